"""Does an async checkpoint save slow down what runs after it? Embedded-engine decode time after
a save, against the same decode in a process that never saved, side by side in one run.

Cases, each in a fresh process (the effect, when there is one, lasts as long as the process),
alternated over ``ROUNDS`` rounds:
- ``no_save``: the decode alone;
- ``async_save``: after three async saves of a 3 M model + AdamW through ``ModuleShards`` (the
  write runs in a thread that ends with it, heron.checkpoint.write_thread);
- ``long_lived_worker``: after the same saves' finite check run in a ``ThreadPoolExecutor``
  that stays alive, the way heron ran its writes before: its thread keeps an OpenMP team, and
  with more OpenMP threads than cores libgomp stops spinning between parallel regions.

The last lines are ``async_save_threads: <case>_vs_no_save=<decode time ratio>`` (1.0 = no effect).

    .venv/bin/python bench/async_save_threads.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = ["no_save", "async_save", "long_lived_worker"]
ROUNDS = 3
DECODES = 4  # per process, after the saves; the median is the process's figure


def _child(case: str) -> None:
    import torch

    from heron.checkpoint import dcp_io
    from heron.checkpoint.finite import check_finite_state
    from heron.checkpoint.shards import ModuleShards, ShardRequest
    from heron.records import GenerationRequest, SamplingParams
    from heron.rollout import EmbeddedEngine
    from heron.toy.addition import make_prompts
    from heron.toy.model import ToyModelSpec, create_toy_model

    spec = ToyModelSpec(hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=2, intermediate_size=768)
    with tempfile.TemporaryDirectory() as tmp:
        corpus = [p.text + p.label for p in make_prompts(2000, seed=0, max_digits=3)]
        model_dir = create_toy_model(Path(tmp) / "model", corpus, spec)
        engine = EmbeddedEngine.from_pretrained(model_dir)
        trained = EmbeddedEngine.from_pretrained(model_dir).model.requires_grad_(True)
        optimizer = torch.optim.AdamW(trained.parameters())
        trained(input_ids=torch.tensor([[5, 6, 7]])).logits.sum().backward()
        optimizer.step()
        shards, worker = ModuleShards(trained, optimizer), ThreadPoolExecutor(1)
        for i in range(3 if case != "no_save" else 0):
            if case == "async_save":
                shards.save_state(ShardRequest(str(Path(tmp) / f"rollout-{i}"), async_save=True))
                shards.wait_saved()
            else:
                staged = dcp_io.stage(dcp_io.live_state(trained, optimizer))
                worker.submit(check_finite_state, staged, f"rollout-{i}").result()
        requests = [GenerationRequest(list(range(10, 20)), SamplingParams(max_new_tokens=32, seed=i)) for i in range(32)]
        engine.generate(requests)  # warm-up
        times = []
        for _ in range(DECODES):
            start = time.perf_counter()
            engine.generate(requests)
            times.append(time.perf_counter() - start)
        print(f"RESULT {statistics.median(times)}")


def main() -> None:
    results: dict[str, list[float]] = {case: [] for case in CASES}
    for _ in range(ROUNDS):
        for case in CASES:
            out = subprocess.run([sys.executable, __file__, "--child", case], capture_output=True, text=True, check=True)
            [line] = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
            results[case].append(float(line.split()[1]))
    for case, values in results.items():
        print(f"{case}: decode median {statistics.median(values) * 1000:.0f} ms over {ROUNDS} processes "
              f"({', '.join(f'{v * 1000:.0f}' for v in values)})")
    base = statistics.median(results["no_save"])
    for case in CASES[1:]:
        print(f"async_save_threads: {case}_vs_no_save={statistics.median(results[case]) / base:.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2])
    else:
        main()
