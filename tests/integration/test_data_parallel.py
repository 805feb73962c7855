"""2 trainer ranks (real gloo, FSDP2 or DDP) + 1 engine actor (real Ray) against one process.

Both runs drive the same verbs (generate -> score -> advantages -> train -> push weights)
for two rollouts. Rewards come from a fixed function of the sampled tokens, and part of
each response is loss-masked with a per-sample length, so the two ranks hold different
loss-token counts: a trainer that normalised by its local count instead of the global one
would fail here.

Tolerance (tests/tolerance.py, rules 2-4): sharding changes only the order of float sums
(micro-batch grouping, the gradient all-reduce / reduce-scatter, the grad norm over shards).
AdamW runs with eps = grad_clip = 1 (momentum SGD: its update is Lipschitz in the gradient),
so that round-off stays round-off; at the default eps=1e-8 one element whose gradient is ~0
turns a 1e-12 difference into an lr-sized step (3e-5 after 4 steps on another machine).
Parameter updates agree norm-wise within 4 gamma(n) (n: the longest float32 reduction chain);
metrics within 2 gamma(n) (|m| + log V); sampled tokens exactly (the weights agree to
round-off). A trainer normalising by its local token count on one rank fails all three
(checked: update difference 24% of the update, against a bound of 0.2%).
"""

from __future__ import annotations

import math

import pytest
from transformers import AutoConfig

from heron.models import load_model
from heron.config.root import load_config
from heron.rl_run import RLRun
from tests.tolerance import RAY_START, assert_metrics_close, assert_updates_close, reduction_length

NUM_ROLLOUTS = 2
STEPS = NUM_ROLLOUTS * 2  # train.steps_per_rollout=2

pytestmark = pytest.mark.portability


def _config(toy_model_dir, toy_data_path, tmp_path, *extra):
    return load_config(None, [
        f"model.path={toy_model_dir}", f"data.path={toy_data_path}", "eval.path=", f"run.dir={tmp_path}",
        f"rollout.num_rollouts={NUM_ROLLOUTS}", "rollout.batch_size=4", "rollout.samples_per_prompt=2",
        "rollout.max_new_tokens=8", "train.steps_per_rollout=2", "train.micro_batch_size=1", "train.lr=0.1", "train.eps=1",
        "tracking.progress=false", "checkpoint.enabled=false", "tracking.summary=false",
        # every row trains: with zero-advantage rows left out, the diagnostics (entropy, clip fraction) are means
        # over the rows each rank runs, and a rank may take rows back in to match the other's micro-batch count;
        # the update with skipping on ranks is tests/integration/test_zero_advantage_ranks.py's
        "train.skip_zero_advantage=false", *extra,
    ])


def _score(batch):
    """Deterministic, varied rewards and per-sample loss masks (identical in both runs)."""
    for k, sample in enumerate(batch.samples):
        sample.reward = float(sum(sample.response_tokens) % 7) / 6
        keep = max(1, len(sample.response_tokens) - k % 4)
        sample.loss_mask = [1] * keep + [0] * (len(sample.response_tokens) - keep)
    return batch


def _run(cfg):
    """Returns (per-rollout samples' tokens, per-rollout train metrics, final weights)."""
    tokens, metrics = [], []
    with RLRun(cfg) as run:
        for rollout_id in run.rollout_ids():
            batch = run.advantages(_score(run.generate(rollout_id)))
            tokens.append([s.response_tokens for s in batch.samples])
            metrics.append(run.train(batch))
            run.push_weights()  # checks the engine serves the trainer's version
        trainer = run.c.trainer
        weights = trainer.host_weights()
        served = run.c.engine.policy_version
    weights = {k: v.clone() for k, v in weights.items()}
    return tokens, metrics, weights, served


# The second case also runs a non-default objective: per-sequence aggregation (its normaliser is
# all-reduced like the token count), the KL-in-reward term (TrainerGroup.sequence_kl on the ranks),
# TIS weights and their metrics (rank means of global-normalised sums), RLOO and an entropy bonus.
# train.eps=1 makes AdamW's step ~lr * g instead of ~lr * sign(g): with the extra entropy and KL
# terms more gradient elements sit near 0, where the default eps turns sum-order round-off into
# a visible step (measured: one element of 49152 off by 1.3e-5 at eps=1e-8); equal gradients
# then show up as equal parameters, as in tests/unit/test_trainer.py.
ALGO = [
    "train.eps=1.0",
    "algo.advantage=rloo", "algo.loss_agg=seq-mean-token-mean", "algo.off_policy.mode=tis", "algo.kl_coef=0.05",
    "algo.kl_in_reward=true", "algo.kl_estimator=k1", "algo.entropy_coef=0.01",
]


@pytest.mark.parametrize(
    "parallel,colocate,transport,num_engines,algo",
    [("fsdp2", "false", "broadcast", 1, []), ("ddp", "true", "disk", 2, ALGO)],
    ids=["fsdp2-disaggregated-broadcast-1engine", "ddp-colocated-disk-2engines-rloo-seqmean-tis-klreward"],
)
def test_two_ranks_equal_one_process(
    ray_session, toy_model_dir, toy_data_path, tmp_path, parallel, colocate, transport, num_engines, algo
):
    local = _run(_config(toy_model_dir, toy_data_path, tmp_path / "local", *algo))
    ray_run = _run(_config(
        toy_model_dir, toy_data_path, tmp_path / "ray", "cluster.backend=ray", RAY_START, "train.world_size=2",
        f"train.parallel={parallel}", "cluster.cpus_per_bundle=0.5", f"colocate={colocate}",
        f"cluster.weight_transport={transport}", f"cluster.num_engines={num_engines}", *algo,
    ))
    (local_tokens, local_metrics, local_weights, local_served), (ray_tokens, ray_metrics, ray_weights, ray_served) = local, ray_run
    model_config = AutoConfig.from_pretrained(toy_model_dir)
    n = reduction_length(model_config, tokens=8 * model_config.max_position_embeddings)  # 8 rows per rollout
    assert ray_tokens == local_tokens  # the engine actors sample what the local engine samples, in order
    # the group's own metric (train.balance_ranks, on by default: the rows were dealt to the ranks)
    assert all(m.pop("rank_work_imbalance") >= 1.0 for m in ray_metrics)
    assert local_served == ray_served == NUM_ROLLOUTS
    for local_m, ray_m in zip(local_metrics, ray_metrics):
        assert_metrics_close(ray_m, local_m, n=n, log_vocab=math.log(model_config.vocab_size))
    assert local_metrics[-1]["pg_loss"] != 0.0  # the batch trained on something
    # the disk transport writes tied tensors once (the toy model ties lm_head to the embeddings)
    assert local_weights.keys() - ray_weights.keys() <= {"lm_head.weight"}
    initial = load_model(str(toy_model_dir), "float32").state_dict()
    shared = ray_weights.keys()
    assert_updates_close(ray_weights, {k: local_weights[k] for k in shared}, initial, n=n, steps=STEPS)
