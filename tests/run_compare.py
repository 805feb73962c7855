"""What two runs that must be bit-identical are compared on: their metric records without wall
times and the throughputs made of them, device-memory figures (they differ with offload) and the
engine/trainer logprob mismatch. The engine's own logprobs feed only that metric (the trainer
recomputes the ones it trains on), and they differ at float round-off between memory layouts:
offload gives the engine's weights fresh storages, and the CPU kernels' summation can differ with
alignment. Each such test bounds the mismatch separately instead."""

from __future__ import annotations

from tests.tolerance import logprob_roundoff, max_sampled_surprisal

ROUNDOFF_METRICS = ("train/engine_logprob_abs_diff_mean", "train/engine_logprob_abs_diff_max")


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items()
            if not k.startswith(("time/", "perf/", "memory/")) and k not in ROUNDOFF_METRICS}


def assert_roundoff_mismatch(records: list[dict], cfg) -> None:
    """The engine/trainer logprob mismatch of every record of run ``cfg`` is float round-off: at
    most ``logprob_roundoff`` over a rollout's tokens (at most batch rows x the model's positions),
    with |log p| of the sampled tokens bounded by ``max_sampled_surprisal`` (tests/tolerance.py)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(cfg.model.path)
    rows = cfg.rollout.batch_size * cfg.rollout.samples_per_prompt
    surprisal = max_sampled_surprisal(config.vocab_size, len(records) * rows * cfg.rollout.max_new_tokens)
    bound = logprob_roundoff(config, rows * config.max_position_embeddings, surprisal)
    worst = max(record[key] for record in records for key in ROUNDOFF_METRICS)
    assert worst <= bound, f"engine/trainer logprob mismatch {worst:.3g} > round-off bound {bound:.3g}"
