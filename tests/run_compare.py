"""What two runs that must be bit-identical are compared on: their metric records without wall
times and the throughputs made of them, and without device-memory figures (they differ with
offload). The engine/trainer logprob mismatch is compared too: it once differed at float round-off
between a run with offload and one without, as offload gave the engine's weights fresh storages
while the other run's stayed in the mapped weight file at 8-byte offsets, and MKL's AVX2 float32
GEMM rounds some shapes differently by 16-byte alignment. Every placed model now owns its memory
(``heron.device.own_memory``) and a wake reallocates each storage from the same allocator, so
both runs' weights sit at the same alignment and the mismatch agrees bit for bit.
``assert_roundoff_mismatch`` bounds its size."""

from __future__ import annotations

from tests.tolerance import logprob_roundoff, max_sampled_surprisal

ROUNDOFF_METRICS = ("train/engine_logprob_abs_diff_mean", "train/engine_logprob_abs_diff_max")


def comparable(record: dict) -> dict:
    return {k: v for k, v in record.items() if not k.startswith(("time/", "perf/", "memory/"))}


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
