"""``TrainBatch``: the tensor form of a rollout's samples, the one record built inside the trainer.

Legend: B = sequences, L = padded prompt+response length, L-1 = predicted positions
(position t predicts token t+1).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Iterator, Sequence

import torch

from heron.device import to_device
from heron.records import Sample


_SEQUENCE_FIELDS = ("input_ids", "attention_mask")  # [B, L]; every other 2-D tensor is per position [B, L-1]
_ROW_INFO = ("rollout_id", "policy_version", "sample_ids")


@dataclass
class TrainBatch:
    rollout_id: int
    policy_version: int
    sample_ids: list[str]
    input_ids: torch.Tensor  # [B, L] long, right-padded
    attention_mask: torch.Tensor  # [B, L] long
    loss_mask: torch.Tensor  # [B, L-1] float: 1 where target input_ids[:, t+1] is a policy token
    advantages: torch.Tensor  # [B] float, or [B, L-1] token-level (algo.advantage=gae; 0 off the loss positions)
    old_logprobs: torch.Tensor  # [B, L-1] float: engine logprobs on loss positions, 0 elsewhere
    # [B, L-1] float or None: per-token weights of the policy loss that correct the engine/trainer
    # mismatch (algo.off_policy); set by the trainer after it recomputes old_logprobs
    mismatch_weights: torch.Tensor | None = None
    # PPO with a learned critic: [B, L-1] value targets R_t and the values V_old they were computed
    # with (the value loss clips around them), on the loss positions, 0 elsewhere; else None
    returns: torch.Tensor | None = None
    old_values: torch.Tensor | None = None
    # [B] long: prompt tokens at the start of each row (the rest is the answer), which lets the
    # samples of one prompt share it in the forward (heron.trainer.shared_prompts); None: unknown
    prompt_lengths: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def to(self, device: torch.device) -> "TrainBatch":
        """This batch with every tensor on ``device``: itself when all are there already (on CPU,
        always), else a copy (``heron.device.to_device``); collated batches live on the host."""
        tensors = {name: t for name, t in self.row_tensors().items() if t is not None}
        if all(t.device == device for t in tensors.values()):
            return self
        return replace(self, **{name: to_device(t, device) for name, t in tensors.items()})

    def row_tensors(self) -> dict[str, torch.Tensor | None]:
        """Every per-row tensor field by name (rows on dim 0; None where unset): what ``to``,
        ``select``, ``take`` and ``heron.parallel.shard_batch.concat`` carry, so a field added
        to the batch is carried by all of them."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _ROW_INFO}

    def select(self, index: slice) -> "TrainBatch":
        tensors = {name: None if t is None else t[index] for name, t in self.row_tensors().items()}
        return replace(self, sample_ids=self.sample_ids[index], **tensors)

    def take(self, rows: Sequence[int], length: int) -> "TrainBatch":
        """Rows ``rows`` (in that order), cut to ``length`` positions (``cut``)."""
        index = torch.tensor(list(rows), dtype=torch.long)
        tensors = {name: None if t is None else t[index] for name, t in self.row_tensors().items()}
        return replace(self, sample_ids=[self.sample_ids[i] for i in rows], **tensors).cut(length)

    def cut(self, length: int) -> "TrainBatch":
        """This batch cut to ``length`` positions (views): the [B, L] tensors to ``length``, the
        per-position [B, L-1] ones (token-level advantages, returns and old values included) to
        ``length - 1``; [B] tensors as they are."""

        def cut(name: str, t: torch.Tensor | None) -> torch.Tensor | None:
            if t is None or t.dim() == 1:
                return t
            return t[:, :length] if name in _SEQUENCE_FIELDS else t[:, : length - 1]

        return replace(self, **{name: cut(name, t) for name, t in self.row_tensors().items()})

    def chunks(self, size: int) -> Iterator["TrainBatch"]:
        for start in range(0, len(self), size):
            yield self.select(slice(start, start + size))

    def answer_positions(self) -> torch.Tensor | None:
        """[B, L-1] bool: the positions that predict an answer token (from the prompt's last token
        to the one before the row's last), or None when the prompt lengths are unknown."""
        if self.prompt_lengths is None:
            return None
        t = torch.arange(self.loss_mask.shape[1], device=self.input_ids.device)  # [L-1]
        ends = self.attention_mask.sum(dim=-1, keepdim=True) - 1  # [B, 1]: positions that predict a token
        return (t >= self.prompt_lengths[:, None].to(t.device) - 1) & (t < ends)

    @property
    def num_loss_tokens(self) -> float:
        return float(self.loss_mask.sum())


def collate(samples: Sequence[Sample], pad_token_id: int) -> TrainBatch:
    """Right-pads prompt+response of every sample into one ``TrainBatch``."""
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    lengths = [len(s.prompt_tokens) + len(s.response_tokens) for s in samples]
    num_rows, max_len = len(samples), max(lengths)
    input_ids = torch.full((num_rows, max_len), pad_token_id, dtype=torch.long)  # [B, L]
    attention_mask = torch.zeros((num_rows, max_len), dtype=torch.long)  # [B, L]
    loss_mask = torch.zeros((num_rows, max_len - 1), dtype=torch.float32)  # [B, L-1]
    old_logprobs = torch.zeros((num_rows, max_len - 1), dtype=torch.float32)  # [B, L-1]
    for row, s in enumerate(samples):
        p, r = len(s.prompt_tokens), len(s.response_tokens)
        input_ids[row, : p + r] = torch.tensor(s.prompt_tokens + s.response_tokens)
        attention_mask[row, : p + r] = 1
        # response token j sits at position p + j and is predicted from position p + j - 1
        loss_mask[row, p - 1 : p - 1 + r] = torch.tensor(s.loss_mask, dtype=torch.float32)
        old_logprobs[row, p - 1 : p - 1 + r] = torch.tensor(s.response_logprobs, dtype=torch.float32)
    critic = token_level(samples, loss_mask.shape)  # (advantages, returns, old values) [B, L-1] or None
    advantages = torch.tensor([0.0 if s.advantage is None else s.advantage for s in samples]) if critic is None else critic[0]
    return TrainBatch(
        rollout_id=samples[0].rollout_id,
        policy_version=min(s.policy_version for s in samples),
        sample_ids=[s.sample_id for s in samples],
        input_ids=input_ids,
        attention_mask=attention_mask,
        loss_mask=loss_mask,
        advantages=advantages,
        old_logprobs=old_logprobs,
        returns=None if critic is None else critic[1],
        old_values=None if critic is None else critic[2],
        prompt_lengths=torch.tensor([len(s.prompt_tokens) for s in samples], dtype=torch.long),
    )


def token_level(samples: Sequence[Sample], shape: torch.Size) -> tuple[torch.Tensor, ...] | None:
    """Token-level advantages, returns and old values [B, L-1] at the response positions (as
    ``collate`` places the loss mask), or None when the samples carry per-sequence advantages."""
    if all(s.token_advantages is None for s in samples):
        return None
    out = tuple(torch.zeros(shape, dtype=torch.float32) for _ in range(3))  # [B, L-1] each
    for row, s in enumerate(samples):
        if s.token_advantages is None or s.returns is None or s.values is None:
            raise ValueError(f"sample {s.sample_id} has no token-level advantages while others of its batch do")
        p, r = len(s.prompt_tokens), len(s.response_tokens)
        for tensor, values in zip(out, (s.token_advantages, s.returns, s.values)):
            tensor[row, p - 1 : p - 1 + r] = torch.tensor(values, dtype=torch.float32)
    return out
