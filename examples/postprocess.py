"""A rollout-data post-process hook: no learning signal from truncated answers.

    heron train ... hooks.rollout_data_postprocess=examples/postprocess.py:zero_truncated_advantages \
        hooks.args.truncated_advantage=0.0

An answer cut off by rollout.max_new_tokens (finish_reason "length") was scored on a prefix;
pushing its probability up or down teaches the policy about text it never finished (DAPO's
"overlong filtering"). This hook sets those samples' advantages to
``hooks.args.truncated_advantage`` (default 0.0) after advantages are computed and before the
trainer sees the batch. It edits the batch in place and returns None.
"""

import logging

log = logging.getLogger("examples.postprocess")


def zero_truncated_advantages(config, rollout_id, rollout_data):
    value = float(config.args.get("truncated_advantage", 0.0))
    truncated = [s for s in rollout_data.samples if s.finish_reason == "length"]
    for sample in truncated:
        sample.advantage = value
    log.info("rollout %d: %d of %d samples truncated, advantage set to %s",
             rollout_id, len(truncated), rollout_data.num_samples, value)
