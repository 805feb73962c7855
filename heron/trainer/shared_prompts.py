"""One pass over a prompt for all of its samples: the training forward's shared-prompt layout
(``train.share_prompts``).

Why: GRPO-style rollouts draw several answers per prompt, and the padded layout runs the prompt
once per answer, forward and backward. With a 500-token prompt and eight 100-token answers that
is 4800 of the 5600 tokens the layers process; shared, 1300.

Layout: the rows of a micro-batch whose prompts are the same tokens form a group, and a group
becomes one packed row:

    prompt[:-1] | prompt[-1] answer_1[:-1] | prompt[-1] answer_2[:-1] | ... | padding

Each token keeps its own position id (answers start again at the prompt's end), and a token
attends, causally, to the shared part and to its own segment only, so every token sees exactly
the keys and positions it sees in its own padded row. Attention runs by parts
(heron.trainer.grouped_attention): the shared part once, then each segment against its group's
shared keys and its own, never the dense [S, S] scores of the whole packed row. The last
prompt token is repeated in every segment because its output predicts the first answer token,
one target per sample; an answer's last token is not run, as it predicts nothing (the padded
layout drops each row's last position likewise, heron.trainer.logprobs), so each position's
target is held apart (``SharedLayout.targets``) instead of being the next packed token. A row
without answer tokens keeps a one-token segment that predicts nothing. The logprobs (and
entropies) of the packed positions are gathered back to the [B, L-1] layout of the batch;
positions that predict no answer token are 0 there (the loss mask is 0 on them in every
objective).

Values: each token's output is the same sums of the same products as in the padded layout; the
matmuls group rows differently, attention sums over masked-out keys that add exact zeros, and
the shared prompt's gradient is the sum of its samples' (tests/tolerance.py, rule 2;
tests/unit/test_shared_prompts.py).

When (``train.share_prompts``, default on): for models whose attention is transformers' SDPA
and takes position ids (``unsupported_reason``), when at least two rows of a micro-batch share a
prompt, and when the estimated cost is at least ``MIN_SAVING`` lower than the padded layout's,

    cost = tokens x c_token + query-key pairs x c_pair,
    padded: tokens = B (L-1), pairs = B (L-1)^2;  shared: tokens = G S, pairs = G p^2 + N a (p + a)

with c_token and c_pair the model's FLOPs per token and per query-key pair
(heron.trainer.model_flops), and p, a the longest shared part and segment
(heron.trainer.grouped_attention). The margin: where the estimate was 0.95-0.975 of the padded
cost (bench/vs_trl.py's 5-token prompts, 3.2 M and 25 M models) the step measured 0.96-1.00x
with the dense mask this layout had first, and 1.00-1.01x with the attention by parts (shared at
a 5 % margin); with 96-token prompts it is ~0.5 and the step ran 2.0-2.3x faster
(bench/shared_prompts.py).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from heron.trainer.grouped_attention import PromptGroups
from heron.trainer.model_flops import ForwardCost, model_config

MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
MIN_SAVING = 0.1  # share only where the estimate saves at least this fraction (module docstring)
SHARED, PADDING = -1, -2  # segment ids of the shared prompt part and of padding; answers are 0, 1, ...


def unsupported_reason(model: torch.nn.Module) -> str | None:
    """None when the shared-prompt layout computes ``model``'s forward, else why not (one phrase)."""
    config = model_config(model)
    model_type = getattr(config, "model_type", None)
    if model_type not in MODEL_TYPES:
        return f"model type {model_type!r} (shared prompts know {', '.join(MODEL_TYPES)})"
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return f"attention implementation {config._attn_implementation!r} (needs sdpa)"
    if any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or ()) or (
        getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    ):
        return "sliding-window attention"
    return _keywords_reason(model)


def _keywords_reason(model: torch.nn.Module) -> str | None:
    """Why the attention by parts would not reach ``model``'s attention calls (it travels as a
    forward keyword through each decoder layer and its attention module), or None."""
    for module in model.modules():
        attention = getattr(module, "self_attn", None)
        if isinstance(attention, torch.nn.Module):
            for part in (module, attention):
                parameters = inspect.signature(part.forward).parameters.values()
                if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
                    return f"{type(part).__name__}.forward takes no keyword arguments to pass to attention"
    return None


def num_decoder_layers(model: torch.nn.Module) -> int:
    """Decoder layers of ``model`` (through a wrapper): the attention calls one forward makes."""
    return model_config(model).num_hidden_layers


@dataclass(frozen=True)
class SharedLayout:
    """A micro-batch of B rows [B, L] packed into G rows [G, S] (module docstring)."""

    input_ids: torch.Tensor  # [G, S] long
    targets: torch.Tensor  # [G, S] long: the token each packed position predicts (0 where none)
    position_ids: torch.Tensor  # [G, S] long
    segments: torch.Tensor  # [G, S] long: SHARED, PADDING, or the segment's number in its group
    groups: PromptGroups  # where the parts sit, for the attention
    source: torch.Tensor  # [B, L-1] long: flat index into the packed [G, S] outputs
    valid: torch.Tensor  # [B, L-1] bool: the positions that have a source (they predict an answer token)

    @property
    def attention_length(self) -> int:
        """The most keys any query attends over: a segment's, shared part and own (p + a)."""
        return self.groups.shared + self.groups.segment_index.shape[1]

    def dense_mask(self) -> torch.Tensor:
        """[G, 1, S, S] bool, True where a query may attend to a key: the visibility the parts
        compute, as one mask (causal, within the shared part and the query's own segment; a
        padding query attends to itself only)."""
        width = self.segments.shape[1]
        query, key = self.segments[:, :, None], self.segments[:, None, :]  # [G, S, 1], [G, 1, S]
        causal = torch.ones(width, width, dtype=torch.bool, device=self.segments.device).tril()  # [S, S]
        allowed = causal & ((key == SHARED) | (key == query)) & (query != PADDING) & (key != PADDING)
        return (allowed | torch.eye(width, dtype=torch.bool, device=self.segments.device))[:, None]

    def packed_positions(self, positions: torch.Tensor) -> torch.Tensor:
        """Batch positions [B, L-1] bool -> [G, S] bool, True at the packed positions that
        ``gather`` takes the valid ones of them from."""
        out = torch.zeros(self.input_ids.numel(), dtype=torch.bool, device=self.source.device)  # [G S]
        out[self.source[self.valid & positions]] = True
        return out.view(self.input_ids.shape[0], -1)

    def gather(self, packed: torch.Tensor) -> torch.Tensor:
        """Packed per-position values [G, S] -> the batch's [B, L-1], 0 where nothing is predicted."""
        out = packed.reshape(-1)[self.source.reshape(-1)].view(self.source.shape)  # [B, L-1]
        return torch.where(self.valid, out, torch.zeros((), dtype=out.dtype, device=out.device))


def _by_prompt(ids: list[list[int]], prompts: list[int]) -> dict[tuple[int, ...], list[int]]:
    """Prompt tokens -> the rows (in order) that start with them; ``prompts``: each row's prompt length."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, (tokens, n) in enumerate(zip(ids, prompts)):
        groups.setdefault(tuple(tokens[:n]), []).append(row)
    return groups


def prompt_ids(input_ids: torch.Tensor, prompt_lengths: torch.Tensor) -> list[int]:
    """Per row of ``input_ids`` [B, L], a number that rows with the same prompt tokens share (the
    first such row's index)."""
    ids = [0] * input_ids.shape[0]
    for rows in _by_prompt(input_ids.tolist(), prompt_lengths.tolist()).values():
        for row in rows:
            ids[row] = rows[0]
    return ids


def plan(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_lengths: torch.Tensor,
         cost: ForwardCost) -> SharedLayout | None:
    """The shared layout of a right-padded micro-batch (input_ids, attention_mask [B, L],
    prompt_lengths [B]), or None when no two rows share a prompt or it would cost more."""
    ids, lengths, prompts = input_ids.tolist(), attention_mask.sum(-1).tolist(), prompt_lengths.tolist()
    groups = _by_prompt(ids, prompts)
    group_of = [0] * len(ids)
    for g, rows in enumerate(groups.values()):
        for row in rows:
            group_of[row] = g
    shape = shared_shape(lengths, prompts, group_of, input_ids.shape[1], cost)
    if shape is None:
        return None
    return _pack(ids, lengths, list(groups.items()), shape[1], input_ids)


def shared_shape(lengths: list[int], prompt_lengths: list[int], prompts: list[int], length: int,
                 cost: ForwardCost) -> tuple[int, int] | None:
    """(G, S) of the layout ``plan`` builds for rows of ``lengths`` tokens with these prompt
    lengths and prompt ids (rows with one id have the same prompt tokens) in a micro-batch of
    ``length`` positions, or None where it keeps one padded row per sample: no two rows share a
    prompt, a prompt is empty, or the estimate saves less than MIN_SAVING. Packing under a token
    budget asks this too (heron.trainer.packing), so that the budget counts the tokens the
    forward will hold."""
    if not lengths or min(prompt_lengths) < 1:
        return None
    members: dict[int, list[int]] = {}
    for row, prompt in enumerate(prompts):
        members.setdefault(prompt, []).append(row)
    if len(members) == len(lengths):
        return None
    width = max(prompt_lengths[rows[0]] - 1 + sum(_segment(lengths[r], prompt_lengths[r]) for r in rows)
                for rows in members.values())
    shared = max(prompt_lengths[rows[0]] - 1 for rows in members.values())
    segment = max(_segment(n, p) for n, p in zip(lengths, prompt_lengths))
    pairs = len(members) * shared**2 + len(lengths) * segment * (shared + segment)
    padded = len(lengths) * (length - 1)  # the padded layout runs L-1 positions a row (heron.trainer.logprobs)
    if cost.of(len(members) * width, pairs) > (1 - MIN_SAVING) * cost.of(padded, padded * (length - 1)):
        return None
    return len(members), width


def _segment(length: int, prompt_length: int) -> int:
    """Positions a row of ``length`` tokens runs in its segment: its prompt's last token and its
    answer but the last token (at least the one, for a row without answer tokens)."""
    return max(length - prompt_length, 1)


def _pack(ids: list[list[int]], lengths: list[int], groups: list[tuple[tuple[int, ...], list[int]]],
          width: int, like: torch.Tensor) -> SharedLayout:
    """Builds the packed tensors of ``groups`` (prompt tokens -> batch rows) on ``like``'s device."""
    num_rows, length = like.shape
    tokens = torch.zeros(len(groups), width, dtype=torch.long)  # [G, S]; padding: token 0, position 0
    targets = torch.zeros(len(groups), width, dtype=torch.long)  # [G, S]
    positions = torch.zeros(len(groups), width, dtype=torch.long)  # [G, S]
    segments = torch.full((len(groups), width), PADDING, dtype=torch.long)  # [G, S]
    source = torch.zeros(num_rows, length - 1, dtype=torch.long)  # [B, L-1]
    valid = torch.zeros(num_rows, length - 1, dtype=torch.bool)  # [B, L-1]
    spans = []  # per segment: (group, its shared length, first packed position, length)
    for g, (prompt, rows) in enumerate(groups):
        shared = len(prompt) - 1
        tokens[g, :shared] = torch.tensor(prompt[:shared], dtype=torch.long)
        positions[g, :shared] = torch.arange(shared)
        segments[g, :shared] = SHARED
        start = shared
        for k, row in enumerate(rows):
            n = _segment(lengths[row], len(prompt))  # original positions shared .. shared + n - 1
            tokens[g, start : start + n] = torch.tensor(ids[row][shared : shared + n], dtype=torch.long)
            # packed position start + j predicts the token at original position shared + j + 1
            predicted = ids[row][shared + 1 : lengths[row]]
            targets[g, start : start + len(predicted)] = torch.tensor(predicted, dtype=torch.long)
            positions[g, start : start + n] = torch.arange(shared, shared + n)
            segments[g, start : start + n] = k
            source[row, shared : lengths[row] - 1] = g * width + start + torch.arange(len(predicted))
            valid[row, shared : lengths[row] - 1] = True
            spans.append((g, shared, start, n))
            start += n
    device = like.device
    parts = _groups(spans, segments).to(device)
    return SharedLayout(tokens.to(device), targets.to(device), positions.to(device), segments.to(device), parts,
                        source.to(device), valid.to(device))


def _groups(spans: list[tuple[int, int, int, int]], segments: torch.Tensor) -> PromptGroups:
    """The attention's index tensors (heron.trainer.grouped_attention.PromptGroups) of segments
    ``spans`` (group, shared length, first packed position, length) in packed rows ``segments`` [G, S]."""
    num_groups, width = segments.shape
    p, a = max(span[1] for span in spans), max(span[3] for span in spans)
    slot = torch.arange(a)  # [a]
    segment_index = torch.zeros(len(spans), a, dtype=torch.long)  # [N, a]
    mask = torch.zeros(len(spans), 1, a, p + a, dtype=torch.bool)  # [N, 1, a, p + a]
    assemble = torch.zeros(num_groups * width, dtype=torch.long)  # [G * S]; padding positions read row 0
    causal, itself = torch.ones(a, a, dtype=torch.bool).tril(), torch.eye(a, dtype=torch.bool)  # [a, a] each
    for i, (g, shared, start, n) in enumerate(spans):
        segment_index[i] = g * width + start + slot.clamp(max=n - 1)  # slots past the segment repeat its last
        mask[i, 0, :, :shared] = True
        mask[i, 0, :, p:] = causal & (slot < n)  # own keys: causal, real ones
        mask[i, 0, n:, p:] |= itself[n:]  # a padding slot sees itself: no empty row
        assemble[g * width + start : g * width + start + n] = num_groups * p + i * a + torch.arange(n)
    for g, shared in {span[0]: span[1] for span in spans}.items():  # each group's shared part, once
        assemble[g * width : g * width + shared] = g * p + torch.arange(shared)
    groups = torch.tensor([span[0] for span in spans], dtype=torch.long)  # [N]
    return PromptGroups(p, groups, segment_index, mask, assemble)
