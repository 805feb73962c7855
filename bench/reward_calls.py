"""The reward stage's own cost per batch, side by side in one run: the default sync calls
(``reward.timeout_s=60``, ``reward.max_concurrency=1``) on heron.reward.deadline_pool's threads
started per batch, against the thread per call the scorer started before (re-created here as
the reference), and inline calls (``timeout_s=0``: no deadline, no thread) as the floor. The reward is bench/length_reward.py's
(microseconds), so the figures are the stage's overhead: ``reward_calls: batch_s_thread_per_call_vs_pool=<thread per
call / pool>`` (> 1: the pool is faster). Then a CPU-bound reward, the built-in math reward on symbolic
answers, on the default thread against ``reward.processes`` (one worker per core): the last line is
``reward_calls: batch_s_thread_vs_processes=<thread / processes>``. Interleaved repeats, medians.

    .venv/bin/python bench/reward_calls.py
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.length_reward import completion_length  # noqa: E402
from heron.config.reward import RewardConfig  # noqa: E402
from heron.records import Prompt  # noqa: E402
from heron.reward.deadline_pool import run_with_deadlines  # noqa: E402
from heron.reward.scorer import RewardScorer  # noqa: E402

TIMEOUT_S, REPEATS = 60.0, 15
MATH_CALLS, MATH_REPEATS = 64, 3


def thread_per_call(fn, calls: list[tuple]) -> list:
    """The scorer's way before deadline_pool: one daemon thread per call, joined with its deadline."""
    results = []
    for args in calls:
        box: list = []
        worker = threading.Thread(target=lambda a=args: box.append(fn(*a)), daemon=True)
        worker.start()
        worker.join(TIMEOUT_S)
        results.append(box[0] if box else TimeoutError())
    return results


def main() -> None:
    ways = {"thread_per_call": thread_per_call,
            "pool": lambda fn, calls: run_with_deadlines(fn, calls, 1, TIMEOUT_S),
            "inline": lambda fn, calls: [fn(*args) for args in calls]}
    last = 1.0
    for size in (32, 512):
        calls = [(Prompt(prompt_id=i, text="12+34=", label="46"), "46 and some more text") for i in range(size)]
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(REPEATS):
            for name, way in ways.items():
                start = time.perf_counter()
                assert way(completion_length, calls) == [0.21] * size
                times[name].append(time.perf_counter() - start)
        ms = {name: 1e3 * statistics.median(values) for name, values in times.items()}
        print(f"{size} calls: " + ", ".join(f"{name} {value:.2f} ms" for name, value in ms.items()))
        last = ms["thread_per_call"] / ms["pool"]
    print(f"reward_calls: batch_s_thread_per_call_vs_pool={last:.1f}  (512 calls)")
    processes_vs_threads()


def processes_vs_threads() -> None:
    """A CPU-bound reward (the built-in math reward on long answers with a symbolic result) on the
    default thread against ``reward.processes`` workers, one per core (started before timing)."""
    prompts = [Prompt(prompt_id=i, text="q", label=f"(x+{i % 7})^2") for i in range(MATH_CALLS)]
    reasoning = "We expand the square term by term and collect the powers of x. " * 40  # a chain of thought
    answers = [f"{reasoning}So \\boxed{{x^2 + {2 * (i % 7)}x + {(i % 7) ** 2}}}" for i in range(MATH_CALLS)]
    ids = [str(i) for i in range(MATH_CALLS)]
    workers = os.cpu_count() or 1
    scorers = {"thread": RewardScorer.from_config(RewardConfig(fn="math")),
               f"{workers}_processes": RewardScorer.from_config(RewardConfig(fn="math", processes=workers))}
    try:
        times: dict[str, list[float]] = {name: [] for name in scorers}
        for repeat in range(MATH_REPEATS + 1):  # repeat 0 starts the workers and warms both
            for name, scorer in scorers.items():
                start = time.perf_counter()
                scores = scorer.score_responses(prompts, answers, ids)
                assert scores.rewards == [1.0] * MATH_CALLS and scores.num_errors == 0, scores
                if repeat:
                    times[name].append(time.perf_counter() - start)
    finally:
        for scorer in scorers.values():
            scorer.close()
    seconds = {name: statistics.median(values) for name, values in times.items()}
    print(f"math reward, {MATH_CALLS} symbolic answers: " + ", ".join(f"{n} {v:.2f} s" for n, v in seconds.items()))
    print(f"reward_calls: batch_s_thread_vs_processes={seconds['thread'] / seconds[f'{workers}_processes']:.2f}  "
          f"({workers} processes, {workers} cores)")


if __name__ == "__main__":
    main()
