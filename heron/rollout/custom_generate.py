"""Runs a user generate hook (``hooks.generate``) for a rollout and checks what it returns.

Scope ``sample``: ``fn(ctx, prompt, sample_index) -> Sample``, called samples_per_prompt times
per prompt; scope ``group``: ``fn(ctx, prompt) -> list[Sample]``, once per prompt. Async hooks
of one rollout run concurrently on one event loop. A returned sample that breaks the record
contract (wrong ids, token/logprob/mask lengths that differ, a mask value not 0/1, no prompt
tokens) stops the run with a one-line ``HookOutputError`` naming the hook and the sample.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from heron.records import Group, Prompt, Sample
from heron.rollout.generate_context import GenerateContext
from heron.rollout.turn_batcher import TurnBatcher


class HookOutputError(RuntimeError):
    """A hook returned something that breaks heron's record contract."""


class CustomGenerate:
    def __init__(self, fn: Callable[..., Any], scope: str, is_async: bool, name: str):
        self.fn, self.scope, self.is_async, self.name = fn, scope, is_async, name

    def groups(self, ctx: GenerateContext, prompts: list[Prompt]) -> list[Group]:
        calls = self._calls(ctx, prompts)
        results = self._run_async(ctx, calls) if self.is_async else [self.fn(*args) for args in calls]
        n = ctx.samples_per_prompt
        if self.scope == "sample":
            results = [results[k * n : (k + 1) * n] for k in range(len(prompts))]
        return [Group(prompt=p, samples=self._check(ctx, p, samples)) for p, samples in zip(prompts, results)]

    def _run_async(self, ctx: GenerateContext, calls: list[tuple]) -> list[Any]:
        async def run_all():
            ctx.batcher = TurnBatcher(ctx.engine, len(calls))

            async def one(args):
                try:
                    return await self.fn(*args)
                finally:
                    ctx.batcher.task_done()

            return await asyncio.gather(*(one(args) for args in calls))

        return asyncio.run(run_all())

    def _calls(self, ctx: GenerateContext, prompts: list[Prompt]) -> list[tuple]:
        if self.scope == "group":
            return [(ctx, p) for p in prompts]
        return [(ctx, p, i) for p in prompts for i in range(ctx.samples_per_prompt)]

    def _check(self, ctx: GenerateContext, prompt: Prompt, samples: Any) -> list[Sample]:
        where = f"hooks.generate {self.name!r} for prompt {prompt.prompt_id} of rollout {ctx.rollout_id}"
        if not isinstance(samples, list) or not all(isinstance(s, Sample) for s in samples):
            raise HookOutputError(f"{where} returned {type(samples).__name__}, expected Sample records (use ctx.make_sample)")
        if len(samples) != ctx.samples_per_prompt:
            raise HookOutputError(f"{where} returned {len(samples)} samples, expected rollout.samples_per_prompt={ctx.samples_per_prompt}")
        for i, s in enumerate(samples):
            problem = _problem(s, ctx.rollout_id, prompt.prompt_id, i)
            if problem:
                raise HookOutputError(f"{where}: sample {i} {problem}")
        return samples


def _problem(s: Sample, rollout_id: int, prompt_id: int, index: int) -> str:
    if (s.rollout_id, s.prompt_id, s.sample_index) != (rollout_id, prompt_id, index):
        return f"has ids (rollout {s.rollout_id}, prompt {s.prompt_id}, index {s.sample_index}), expected ({rollout_id}, {prompt_id}, {index})"
    if not (len(s.response_tokens) == len(s.response_logprobs) == len(s.loss_mask)):
        return (f"has {len(s.response_tokens)} response tokens, {len(s.response_logprobs)} logprobs and "
                f"{len(s.loss_mask)} loss-mask entries; they must be equal")
    if any(m not in (0, 1) for m in s.loss_mask):
        return "has loss_mask values other than 0 and 1"
    if not s.prompt_tokens:
        return "has no prompt tokens"
    return ""
