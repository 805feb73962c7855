"""What a custom generate hook (``hooks.generate``) gets: the engine, the tokenizer and
helpers that keep heron's conventions -- per-sample seeds derived from ids, stop tokens, and
``Sample`` records stamped with the right rollout_id.

Multi-turn recipe: ``tokens = ctx.encode(prompt)``; ``gen = ctx.generate(tokens + response,
ctx.params(prompt, i, turn=t))``; append ``gen.tokens`` with loss_mask 1 and their logprobs,
append tool/environment tokens with loss_mask 0 (logprob 0.0); repeat; ``ctx.make_sample``.
"""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field
from typing import Any

from heron.config.rollout import RolloutConfig
from heron.records import FinishReason, Generation, GenerationRequest, Prompt, Sample, SamplingParams
from heron.rollout.engine import RolloutEngine
from heron.rollout.prompt_format import PromptFormatter
from heron.rollout.turn_batcher import TurnBatcher
from heron.seeding import derive_seed


@dataclass
class GenerateContext:
    rollout_id: int
    engine: RolloutEngine
    formatter: PromptFormatter
    cfg: RolloutConfig
    seed: int  # run.seed
    stop_token_ids: tuple[int, ...]
    args: dict[str, Any] = field(default_factory=dict)  # hooks.args
    batcher: TurnBatcher | None = None  # set while async hooks run: batches their agenerate calls
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def samples_per_prompt(self) -> int:
        return self.cfg.samples_per_prompt

    @property
    def tokenizer(self):
        return self.formatter.tokenizer

    def encode(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids, formatted like built-in rollouts (chat template if configured)."""
        return self.formatter.encode(prompt)

    def encode_text(self, text: str) -> list[int]:
        """Token ids of plain text (e.g. tool output), without special tokens."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def decode(self, tokens: list[int]) -> str:
        return self.formatter.decode(tokens)

    def params(self, prompt: Prompt, sample_index: int, *, turn: int = 0, max_new_tokens: int | None = None) -> SamplingParams:
        """rollout.* sampling with a seed derived from (run.seed, rollout_id, prompt_id,
        sample_index[, turn]); turn 0 draws exactly what the built-in generator draws."""
        ids = (self.seed, self.rollout_id, prompt.prompt_id, sample_index) + ((turn,) if turn else ())
        return SamplingParams(
            max_new_tokens=max_new_tokens or self.cfg.max_new_tokens, temperature=self.cfg.temperature,
            top_p=self.cfg.top_p, stop_token_ids=self.stop_token_ids, seed=derive_seed(*ids),
        )

    def generate(self, tokens: list[int], params: SamplingParams) -> Generation:
        """One engine call for one sequence (tokens = everything so far: prompt + earlier turns)."""
        with self._lock:  # the embedded engine decodes one batch at a time
            return self.engine.generate([GenerationRequest(list(tokens), params)])[0]

    async def agenerate(self, tokens: list[int], params: SamplingParams) -> Generation:
        """``generate`` for async hooks: concurrent calls of one rollout are decoded as one
        engine batch (``heron.rollout.turn_batcher``)."""
        if self.batcher is None:
            return await asyncio.to_thread(self.generate, tokens, params)
        return await self.batcher.generate(GenerationRequest(list(tokens), params))

    def make_sample(
        self, prompt: Prompt, sample_index: int, prompt_tokens: list[int], response_tokens: list[int],
        response_logprobs: list[float], loss_mask: list[int], finish_reason: FinishReason, policy_version: int,
        response_text: str | None = None,
    ) -> Sample:
        """A Sample of this rollout; ``response_text`` defaults to the decoded response tokens."""
        return Sample(
            rollout_id=self.rollout_id, prompt_id=prompt.prompt_id, sample_index=sample_index,
            policy_version=policy_version, prompt_tokens=list(prompt_tokens), response_tokens=list(response_tokens),
            response_logprobs=list(response_logprobs), loss_mask=list(loss_mask),
            response_text=self.decode(response_tokens) if response_text is None else response_text,
            finish_reason=finish_reason,
        )
