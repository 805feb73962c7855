"""Typed records passed between the stages of one rollout step.

Every record carries its provenance: the ``rollout_id`` that produced it, the prompt it
answers and the ``policy_version`` of the weights that generated it. Records hold plain
Python data (lists, floats), never device tensors, so they can cross process boundaries
(Ray actors) and be checkpointed as-is; tensors are only built in ``TrainBatch``, the one
record that lives inside the trainer.

Flow:  Prompt -> (engine) Sample x samples_per_prompt -> Group -> RolloutBatch
       -> (advantages) RolloutBatch with advantages -> (trainer) TrainBatch
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Prompt:
    """One prompt of a dataset with its verifiable label.

    Example: ``Prompt(prompt_id=17, text="12+35=", label="47")``
    """

    prompt_id: int  # stable index of the row in its dataset
    text: str
    label: str
    metadata: dict[str, Any] = field(default_factory=dict)
    # chat datasets: the conversation to encode with the chat template (text = last user turn)
    messages: list[dict[str, str]] | None = None


@dataclass(frozen=True)
class SamplingParams:
    """How the engine samples one request. ``seed`` makes a request reproducible on its own,
    independent of which other requests share its batch."""

    max_new_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: tuple[int, ...] = ()
    seed: int = 0
    greedy: bool = False


@dataclass(frozen=True)
class GenerationRequest:
    """Input of ``RolloutEngine.generate``: token ids of one prompt plus its sampling params."""

    prompt_tokens: list[int]
    params: SamplingParams


@dataclass(frozen=True)
class Generation:
    """Output of ``RolloutEngine.generate`` for one request.

    ``logprobs[i]`` is log p(tokens[i] | prefix) under the engine's weights at the sampling
    temperature (before top-p truncation), the quantity the trainer recomputes.
    """

    tokens: list[int]
    logprobs: list[float]
    finish_reason: FinishReason
    policy_version: int


@dataclass
class Sample:
    """One sampled answer to one prompt.

    ``loss_mask`` has one entry per response token: 1 where the policy produced the token and
    the loss applies, 0 for tokens inserted by the environment (tool output in multi-turn).

    Example: ``Sample(rollout_id=3, prompt_id=17, sample_index=0, policy_version=3, ...)``
    """

    rollout_id: int
    prompt_id: int
    sample_index: int  # index within its group, 0..samples_per_prompt-1
    policy_version: int
    prompt_tokens: list[int]
    response_tokens: list[int]
    response_logprobs: list[float]
    loss_mask: list[int]
    response_text: str
    finish_reason: FinishReason
    reward: float | None = None
    advantage: float | None = None
    # PPO with a learned critic (algo.advantage=gae): one entry per response token, set by the
    # advantage stage (heron.critic.advantage_stage); None for per-sequence estimators
    token_advantages: list[float] | None = None
    values: list[float] | None = None  # the critic's V_t the advantages were computed with
    returns: list[float] | None = None  # the value targets R_t = A_t + V_t (before whitening A)

    @property
    def sample_id(self) -> str:
        return f"r{self.rollout_id}/p{self.prompt_id}/s{self.sample_index}"


@dataclass
class Group:
    """All samples answering the same prompt in one rollout (the GRPO group)."""

    prompt: Prompt
    samples: list[Sample]

    @property
    def rewards(self) -> list[float]:
        missing = [s.sample_id for s in self.samples if s.reward is None]
        if missing:
            raise ValueError(f"group of prompt {self.prompt.prompt_id} has unscored samples: {missing}")
        return [float(s.reward) for s in self.samples]  # type: ignore[arg-type]


@dataclass
class RolloutBatch:
    """Everything one rollout step generated: ``batch_size`` groups of samples."""

    rollout_id: int
    policy_version: int
    groups: list[Group]

    @property
    def samples(self) -> list[Sample]:
        return [s for g in self.groups for s in g.samples]

    @property
    def num_samples(self) -> int:
        return sum(len(g.samples) for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        """The batch as plain JSON data (every field; floats round-trip exactly through
        ``json``), for a checkpoint to hold a rollout generated ahead (heron.rollout.async_generator)."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "RolloutBatch":
        """The batch ``to_json`` wrote. Raises ``TypeError``/``KeyError`` on other data."""
        groups = [Group(prompt=Prompt(**g["prompt"]), samples=[Sample(**s) for s in g["samples"]]) for g in data["groups"]]
        return cls(rollout_id=data["rollout_id"], policy_version=data["policy_version"], groups=groups)
