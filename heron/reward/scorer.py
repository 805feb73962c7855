"""The reward stage: fills ``Sample.reward`` for every sample of a rollout batch (and scores
eval answers), isolating failures.

One reward function, called per sample, per group or per batch (``reward.scope``), sync or
async. Sync calls run inline, or on ``reward.max_concurrency`` threads when that is > 1 or
``reward.timeout_s`` is set; async calls run as concurrent tasks on one event loop. A call
that raises, times out, or returns something that is not one finite number per response is a
failure of every sample it covered: with ``reward.on_error=fail`` the run stops with the
sample id; with ``penalize`` those samples get ``reward.failure_value`` and the failure is
counted (``reward/num_errors`` in the metrics) and logged with the sample id.

A timed-out sync call cannot be killed (Python threads cannot be): its thread is abandoned
and finishes in the background; the run moves on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from heron.config.reward import RewardConfig
from heron.records import Prompt, RolloutBatch
from heron.reward.builtin import BUILTIN_REWARDS
from heron.reward.overlong import overlong_penalty

log = logging.getLogger("heron.reward")

RewardFn = Callable[[Prompt, str], float]


class RewardError(RuntimeError):
    """A reward call failed under ``reward.on_error=fail``."""


@dataclass
class _Call:
    """One call of the reward function and the samples it scores."""

    args: tuple
    sample_ids: list[str]


def build_reward_fn(cfg: RewardConfig) -> tuple[Callable[..., Any], str]:
    """(function, scope) for ``reward.fn``: a built-in name or a checked hook path."""
    if cfg.fn == "remote":
        from heron.reward.remote import RemoteReward

        return RemoteReward(cfg.remote), "sample"
    if cfg.fn in BUILTIN_REWARDS:
        return BUILTIN_REWARDS[cfg.fn], "sample"
    from heron.plugins.loader import HookError, load_hook

    if ":" not in cfg.fn and "." not in cfg.fn:
        raise HookError(f"unknown reward.fn '{cfg.fn}'; built-ins: {sorted([*BUILTIN_REWARDS, 'remote'])}, or a hook path module:function")
    point = {"sample": "reward", "group": "group_reward", "batch": "batch_reward"}[cfg.scope]
    return load_hook(point, cfg.fn), cfg.scope


class RewardScorer:
    def __init__(
        self, fn: Callable[..., Any], cfg: RewardConfig | None = None, scope: str = "sample", max_response_tokens: int = 0
    ):
        from heron.plugins.loader import is_async_callable

        self.fn = fn
        self.cfg = cfg or RewardConfig()
        self.scope = scope
        self.is_async = is_async_callable(fn)
        self.num_errors = 0  # failures in the latest score() / score_responses() call
        self.max_response_tokens = max_response_tokens  # L_max of the overlong shaping (rollout.max_new_tokens)
        self.overlong_mean = 0.0  # mean overlong penalty of the latest score() call

    @classmethod
    def from_config(cls, cfg: RewardConfig) -> "RewardScorer":
        fn, scope = build_reward_fn(cfg)
        return cls(fn, cfg, scope)

    @classmethod
    def from_name(cls, name: str) -> "RewardScorer":
        return cls.from_config(RewardConfig(fn=name))

    def score(self, batch: RolloutBatch) -> RolloutBatch:
        samples = batch.samples
        prompts = [g.prompt for g in batch.groups for _ in g.samples]
        rewards = self.score_responses(
            prompts, [s.response_text for s in samples], [s.sample_id for s in samples],
            group_sizes=[len(g.samples) for g in batch.groups],
        )
        penalties = [self._overlong(len(s.response_tokens)) for s in samples]
        for sample, reward, penalty in zip(samples, rewards, penalties):
            sample.reward = reward + penalty if penalty else reward
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
    ) -> list[float]:
        """One reward per response (``prompts[i]`` answered by ``responses[i]``); consecutive
        responses form groups of ``group_sizes`` (default: each response its own group)."""
        sizes = list(group_sizes) if group_sizes is not None else [1] * len(responses)
        calls = self._calls(list(prompts), list(responses), list(sample_ids), sizes)
        results = self._run_async(calls) if self.is_async else self._run_sync(calls)
        self.num_errors = 0
        rewards: list[float] = []
        for call, result in zip(calls, results):
            rewards.extend(self._check(call, result))
        return rewards

    def metrics(self) -> dict[str, float]:
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

    def _run_sync(self, calls: list[_Call]) -> list[Any]:
        timeout = self.cfg.timeout_s or None
        if self.cfg.max_concurrency == 1 and timeout is None:
            return [_capture(self.fn, call.args) for call in calls]
        with ThreadPoolExecutor(max_workers=self.cfg.max_concurrency, thread_name_prefix="reward") as pool:
            return list(pool.map(lambda call: _call_with_timeout(self.fn, call.args, timeout), calls))

    def _run_async(self, calls: list[_Call]) -> list[Any]:
        async def run_all():
            limit = asyncio.Semaphore(self.cfg.max_concurrency)

            async def one(call: _Call):
                async with limit:
                    try:
                        return await asyncio.wait_for(self.fn(*call.args), self.cfg.timeout_s or None)
                    except asyncio.TimeoutError:
                        return TimeoutError(f"reward call took longer than reward.timeout_s={self.cfg.timeout_s}")
                    except Exception as e:  # noqa: BLE001 -- isolated per call, reported below
                        return e

            return await asyncio.gather(*(one(c) for c in calls))

        return asyncio.run(run_all())

    def _check(self, call: _Call, result: Any) -> list[float]:
        n = len(call.sample_ids)
        if not isinstance(result, BaseException):
            values = [result] if self.scope == "sample" else result
            try:
                rewards = [float(v) for v in values]
                if len(rewards) == n and all(math.isfinite(v) for v in rewards):
                    return rewards
            except (TypeError, ValueError):
                pass
            result = ValueError(f"returned {_short(result)}, expected {'a finite number' if self.scope == 'sample' else f'{n} finite numbers'}")
        return self._fail(call, result)

    def _fail(self, call: _Call, error: BaseException) -> list[float]:
        ids = ", ".join(call.sample_ids[:4]) + (" ..." if len(call.sample_ids) > 4 else "")
        message = f"reward.fn {self.cfg.fn!r} failed on sample {ids}: {type(error).__name__}: {error}"
        if self.cfg.on_error == "fail":
            raise RewardError(message + " (set reward.on_error=penalize to score failures as reward.failure_value)")
        self.num_errors += len(call.sample_ids)
        log.warning("%s -> reward %s", message, self.cfg.failure_value)
        return [self.cfg.failure_value] * len(call.sample_ids)


def _capture(fn: Callable[..., Any], args: tuple) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 -- isolated per call, reported by _check
        return e


def _call_with_timeout(fn: Callable[..., Any], args: tuple, timeout: float | None) -> Any:
    if timeout is None:
        return _capture(fn, args)
    box: list[Any] = []
    worker = threading.Thread(target=lambda: box.append(_capture(fn, args)), daemon=True, name="reward-call")
    worker.start()
    worker.join(timeout)
    if not box:
        return TimeoutError(f"reward call took longer than reward.timeout_s={timeout}")
    return box[0]


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
