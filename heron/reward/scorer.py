"""The reward stage: fills ``Sample.reward`` for every sample of a rollout batch (and scores
eval answers), isolating failures.

One reward function, called per sample, per group or per batch (``reward.scope``), sync or
async. Sync calls run inline only when ``reward.timeout_s=0`` and ``reward.max_concurrency=1``;
otherwise on ``reward.max_concurrency`` daemon threads started per batch, each call with its own
deadline (heron.reward.deadline_pool), or with ``reward.processes`` in that many worker processes
(heron.reward.process_pool: CPU-bound rewards in parallel). Async calls run as concurrent tasks
on one event loop.

A call fails when it raises, runs past ``reward.timeout_s`` (60 s by default), or returns
anything but one finite real number per response. A real number is a bool, int, float or
numpy scalar; a group or batch call returns a list, tuple or 1-D array of them, one per
response. Nothing is coerced: ``"1.0"`` is not a reward, and ``"10"`` is not two. A failure
fails every sample the call covered. With ``reward.on_error=fail`` the run stops and names the
sample. With ``penalize`` those samples get ``reward.failure_value``, and the failure is logged
with the sample id and counted: ``reward/num_errors`` counts the latest training batch, and
eval reports its own ``eval/.../reward_errors``.

A timed-out sync call cannot be killed (Python threads cannot be): its thread is abandoned
and finishes in the background, a fresh thread takes its place; the run moves on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import numbers
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from heron.config.reward import RewardConfig
from heron.records import Prompt, RolloutBatch
from heron.reward.deadline_pool import deadline_error, run_with_deadlines
from heron.reward.overlong import overlong_penalty
from heron.reward.process_pool import RewardProcesses
from heron.reward.reward_fn import build_reward_fn

log = logging.getLogger("heron.reward")

RewardFn = Callable[[Prompt, str], float]


class RewardError(RuntimeError):
    """A reward call failed under ``reward.on_error=fail``."""


@dataclass
class _Call:
    """One call of the reward function and the samples it scores."""

    args: tuple
    sample_ids: list[str]


@dataclass
class RewardScores:
    """One reward per response, and how many of them are ``failure_value`` after a failed call."""

    rewards: list[float]
    num_errors: int


class RewardScorer:
    def __init__(
        self, fn: Callable[..., Any], cfg: RewardConfig | None = None, scope: str = "sample", max_response_tokens: int = 0
    ):
        from heron.plugins.loader import is_async_callable

        self.fn = fn
        self.cfg = cfg or RewardConfig()
        self.scope = scope
        self.is_async = is_async_callable(fn)
        self.num_errors = 0  # failures in the latest training batch (score()); eval counts its own
        self.max_response_tokens = max_response_tokens  # L_max of the overlong shaping (rollout.max_new_tokens)
        self.overlong_mean = 0.0  # mean overlong penalty of the latest score() call
        if self.cfg.processes and self.is_async:
            raise ValueError(f"reward.processes={self.cfg.processes} runs sync reward functions; {self.cfg.fn!r} is "
                             "async: set reward.processes=0 (its calls run as tasks, reward.max_concurrency at once)")
        self._processes = RewardProcesses(self.cfg, self.cfg.processes) if self.cfg.processes else None

    @classmethod
    def from_config(cls, cfg: RewardConfig) -> "RewardScorer":
        fn, scope = build_reward_fn(cfg)
        return cls(fn, cfg, scope)

    @classmethod
    def from_name(cls, name: str) -> "RewardScorer":
        return cls.from_config(RewardConfig(fn=name))

    def score(self, batch: RolloutBatch) -> RolloutBatch:
        """Fills ``reward`` of every training sample; ``metrics()`` then counts its failures."""
        samples = batch.samples
        prompts = [g.prompt for g in batch.groups for _ in g.samples]
        scores = self.score_responses(
            prompts, [s.response_text for s in samples], [s.sample_id for s in samples],
            group_sizes=[len(g.samples) for g in batch.groups],
        )
        penalties = [self._overlong(len(s.response_tokens)) for s in samples]
        for sample, reward, penalty in zip(samples, scores.rewards, penalties):
            sample.reward = reward + penalty if penalty else reward
        self.num_errors = scores.num_errors
        self.overlong_mean = sum(penalties) / len(penalties) if penalties else 0.0
        return batch

    def _overlong(self, length: int) -> float:
        """DAPO's soft length penalty (``heron.reward.overlong``), training rewards only."""
        if self.cfg.overlong_buffer == 0:
            return 0.0
        if self.max_response_tokens < 1:
            raise ValueError("reward.overlong_buffer needs the scorer's max_response_tokens (rollout.max_new_tokens)")
        return overlong_penalty(length, self.max_response_tokens, self.cfg.overlong_buffer, self.cfg.overlong_penalty)

    def score_responses(
        self, prompts: Sequence[Prompt], responses: Sequence[str], sample_ids: Sequence[str],
        group_sizes: Sequence[int] | None = None,
    ) -> RewardScores:
        """One reward per response (``prompts[i]`` answered by ``responses[i]``); consecutive
        responses form groups of ``group_sizes`` (default: each response its own group).
        Leaves the training count (``metrics()``) alone: eval scores through here too."""
        sizes = list(group_sizes) if group_sizes is not None else [1] * len(responses)
        calls = self._calls(list(prompts), list(responses), list(sample_ids), sizes)
        results = self._run_async(calls) if self.is_async else self._run_sync(calls)
        scores = RewardScores([], 0)
        for call, result in zip(calls, results):
            rewards, failed = self._check(call, result)
            scores.rewards.extend(rewards)
            scores.num_errors += failed
        return scores

    def metrics(self) -> dict[str, float]:
        """The latest training batch's reward failures (and mean overlong penalty, if shaped)."""
        overlong = {"reward/overlong_penalty_mean": self.overlong_mean} if self.cfg.overlong_buffer else {}
        return {"reward/num_errors": float(self.num_errors), **overlong}

    def _calls(self, prompts: list[Prompt], responses: list[str], ids: list[str], sizes: list[int]) -> list[_Call]:
        if self.scope == "sample":
            return [_Call((p, r), [i]) for p, r, i in zip(prompts, responses, ids)]
        if self.scope == "batch":
            return [_Call((prompts, responses), ids)] if prompts else []
        calls, start = [], 0
        for size in sizes:
            end = start + size
            calls.append(_Call((prompts[start], responses[start:end]), ids[start:end]))
            start = end
        return calls

    def close(self) -> None:
        """Stops the reward worker processes (``reward.processes``), if any; idempotent."""
        if self._processes is not None:
            self._processes.close()

    def _run_sync(self, calls: list[_Call]) -> list[Any]:
        timeout = self.cfg.timeout_s or None
        if self._processes is not None:
            return self._processes.run([call.args for call in calls], timeout)
        if self.cfg.max_concurrency == 1 and timeout is None:
            return [_capture(self.fn, call.args) for call in calls]
        return run_with_deadlines(self.fn, [call.args for call in calls], self.cfg.max_concurrency, timeout)

    def _run_async(self, calls: list[_Call]) -> list[Any]:
        async def run_all():
            limit = asyncio.Semaphore(self.cfg.max_concurrency)

            async def one(call: _Call):
                async with limit:
                    try:
                        return await asyncio.wait_for(self.fn(*call.args), self.cfg.timeout_s or None)
                    except asyncio.TimeoutError:
                        return deadline_error(self.cfg.timeout_s)
                    except Exception as e:  # noqa: BLE001 -- isolated per call, reported below
                        return e

            return await asyncio.gather(*(one(c) for c in calls))

        return asyncio.run(run_all())

    def _check(self, call: _Call, result: Any) -> tuple[list[float], int]:
        """(rewards of the call's samples, how many failed)."""
        n = len(call.sample_ids)
        if not isinstance(result, BaseException):
            rewards = _rewards(result, n, self.scope == "sample")
            if rewards is not None:
                return rewards, 0
            expected = "a finite real number" if self.scope == "sample" else f"a list of {n} finite real numbers"
            result = ValueError(f"returned {_short(result)}, expected {expected}")
        return self._fail(call, result), n

    def _fail(self, call: _Call, error: BaseException) -> list[float]:
        ids = ", ".join(call.sample_ids[:4]) + (" ..." if len(call.sample_ids) > 4 else "")
        message = f"reward.fn {self.cfg.fn!r} failed on sample {ids}: {type(error).__name__}: {error}"
        if self.cfg.on_error == "fail":
            raise RewardError(message + " (set reward.on_error=penalize to score failures as reward.failure_value)")
        log.warning("%s -> reward %s", message, self.cfg.failure_value)
        return [self.cfg.failure_value] * len(call.sample_ids)


def _rewards(result: Any, n: int, single: bool) -> list[float] | None:
    """The call's rewards as floats, or None unless ``result`` is one finite real number
    (``single``) or a sequence of exactly ``n`` of them. ``numbers.Real`` covers bool, int,
    float, Fraction and numpy scalars; strings are sequences but never rewards."""
    if single:
        values = [result]
    else:
        tolist = getattr(result, "tolist", None)
        if getattr(result, "ndim", None) == 1 and callable(tolist):
            result = tolist()  # a 1-D numpy array or torch tensor
        if isinstance(result, (str, bytes)) or not isinstance(result, SequenceABC) or len(result) != n:
            return None
        values = list(result)
    if not all(isinstance(v, numbers.Real) for v in values):
        return None
    rewards = [float(v) for v in values]
    return rewards if all(math.isfinite(v) for v in rewards) else None


def _capture(fn: Callable[..., Any], args: tuple) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 -- isolated per call, reported by _check
        return e


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
