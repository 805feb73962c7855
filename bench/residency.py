"""Sleep + wake of a trainer whose state is a few hundred MB, against the physical reference.

The trainer is a real ``PolicyTrainer`` (random-weight Qwen3, ~43 M parameters: ~170 MB of
weights + ~340 MB of AdamW state after one step) with residency attached (host offload).
The reference copies every state tensor out to freshly allocated host memory and back into
freshly allocated memory (``torch.empty_like(t).copy_(t)`` both ways, so page faults count on
both sides) -- what any sleep + wake must at least do. Runs are interleaved to share machine
noise; each figure is the median of ``NUM_REPEATS``.

Also reported: the fraction of state bytes released while asleep (the component's own
accounting) and the process RSS before, asleep and after. On CPU "device" and host are the
same RAM, so asleep RSS should be about the RSS before (the host copies replace the freed
storages) -- if the freed storages did not go back to the OS it would be before + state
bytes. glibc keeps freed blocks below its adaptive mmap threshold unless told: the backend
calls ``malloc_trim(0)`` after freeing (without it, asleep RSS was before + 476 MiB here),
and the reference pays the same trims; the RSS line reports what really went back.

Last line: ``residency: sleep_wake_vs_memcpy=<reference / ours> released_fraction=<fraction>``
(targets: ratio >= 0.8, released >= 0.99).

    OMP_NUM_THREADS=1 .venv/bin/python bench/residency.py
"""

from __future__ import annotations

import statistics
import time

import torch

from heron.config.algo import AlgoConfig
from heron.config.train import TrainConfig
from heron.residency.host_offload import return_freed_memory_to_os
from heron.residency.wiring import ResidencySettings, attach_residency
from heron.rollout.embedded import EmbeddedEngine
from heron.trainer.batch import TrainBatch
from heron.trainer.objectives import PolicyObjective
from heron.trainer.policy_trainer import PolicyTrainer

NUM_REPEATS = 5
MiB = 2**20


def malloc_trim() -> None:
    """Applied to the reference too, so both sides pay for returning memory."""
    return_freed_memory_to_os()


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def build_trainer() -> PolicyTrainer:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=32000, hidden_size=512, intermediate_size=1536, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, head_dim=64, tie_word_embeddings=True)
    trainer = PolicyTrainer(Qwen3ForCausalLM(config), TrainConfig(micro_batch_size=2), PolicyObjective(AlgoConfig()),
                            total_steps=10)
    input_ids = torch.randint(0, 32000, (2, 16))  # [B, L]
    trainer.train(TrainBatch(0, 0, ["a", "b"], input_ids, torch.ones_like(input_ids), torch.ones(2, 15),
                             torch.tensor([1.0, -1.0]), torch.zeros(2, 15)))  # creates the AdamW state
    return trainer


def reference_round_trip(tensors: list[torch.Tensor]) -> float:
    start = time.perf_counter()
    host = [torch.empty_like(t, device="cpu").copy_(t) for t in tensors]
    back = [torch.empty_like(h, device=t.device).copy_(h) for h, t in zip(host, tensors)]
    del host
    malloc_trim()
    elapsed = time.perf_counter() - start
    del back
    malloc_trim()
    return elapsed


def main() -> None:
    trainer = build_trainer()
    tiny_engine = EmbeddedEngine(torch.nn.Linear(1, 1), pad_token_id=0)  # attach_residency wants a pair
    attach_residency(trainer, tiny_engine, ResidencySettings(colocate=False, offload_train=True, offload_rollout=False))
    trainer.wake()
    inventory = trainer.holdings().inventory()
    tensors = list({t.untyped_storage()._cdata: t for ts in inventory.values() for t in ts}.values())
    state_bytes = sum(trainer.memory_report().values())
    print(f"state: {state_bytes / MiB:.0f} MiB in {len(tensors)} tensors "
          + ", ".join(f"{k}={v / MiB:.0f}MiB" for k, v in trainer.memory_report().items()))

    malloc_trim()
    rss_before = rss_bytes()
    ours, reference, rss_asleep, rss_after, released = [], [], [], [], []
    for _ in range(NUM_REPEATS):
        reference.append(reference_round_trip(tensors))
        start = time.perf_counter()
        trainer.sleep()
        ours_sleep = time.perf_counter() - start
        released.append(1 - sum(trainer.memory_report().values()) / state_bytes)
        rss_asleep.append(rss_bytes())  # the backend trimmed: what really went back
        start = time.perf_counter()
        trainer.wake()
        ours.append(ours_sleep + time.perf_counter() - start)
        rss_after.append(rss_bytes())

    ratio = statistics.median(reference) / statistics.median(ours)
    print(f"sleep+wake {statistics.median(ours) * 1e3:.0f} ms (runs: {', '.join(f'{t * 1e3:.0f}' for t in ours)}); "
          f"reference memcpy out+back {statistics.median(reference) * 1e3:.0f} ms "
          f"({', '.join(f'{t * 1e3:.0f}' for t in reference)}); "
          f"{2 * state_bytes / statistics.median(ours) / 1e9:.1f} GB/s moved")
    asleep, after = statistics.median(rss_asleep), statistics.median(rss_after)
    freed_to_os = (rss_before + state_bytes - asleep) / state_bytes  # 1.0: every freed storage went back
    print(f"rss: before {rss_before / MiB:.0f} MiB, asleep {asleep / MiB:.0f} MiB (host copies "
          f"{state_bytes / MiB:.0f} MiB included), after {after / MiB:.0f} MiB; "
          f"freed storages returned to the OS: {freed_to_os:.3f} of state bytes")
    print(f"residency: sleep_wake_vs_memcpy={ratio:.2f} released_fraction={min(released):.4f}")


if __name__ == "__main__":
    main()
