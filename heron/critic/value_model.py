"""The value model: the policy's architecture (an HF base model) with a scalar value head.

Legend: B = sequences, L = padded prompt+response length, L-1 = positions that predict a token,
H = hidden size.

Alignment: ``values[:, t]`` is V(s_t), the value of the state after tokens 0..t, in which the
policy chooses token t+1. It sits at the same index as ``TrainBatch.loss_mask[:, t]`` and the
policy's ``logprobs[:, t]`` (both about token t+1), so GAE's V_t belongs to the action scored at
t. The head starts at zero (V = 0 everywhere until the first update: the first advantages are
the discounted rewards), independent of any random stream.
"""

from __future__ import annotations

import torch

from heron.trainer.logprobs import predicting_positions


class ValueModel(torch.nn.Module):
    # kept float32 under FSDP2's bf16 mixed precision too (heron.parallel.data_parallel)
    float32_modules = ("value_head",)

    def __init__(self, backbone: torch.nn.Module, hidden_size: int):
        super().__init__()
        self.backbone = backbone
        self.value_head = torch.nn.Linear(hidden_size, 1, dtype=torch.float32)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """values [B, L-1] (fp32) from input_ids, attention_mask [B, L]. The last position (the
        state after the whole sequence, whose value no action uses) is not run: causal
        attention leaves every earlier position's state the same without it (as the policy's
        logprobs, heron.trainer.logprobs)."""
        inputs, mask = predicting_positions(input_ids, attention_mask)
        hidden = self.backbone(input_ids=inputs, attention_mask=mask, use_cache=False).last_hidden_state
        hidden = hidden[:, : input_ids.shape[1] - 1]  # [B, L-1, H] (a no-op but where L = 1)
        with torch.autocast(hidden.device.type, enabled=False):  # the head is float32 under any autocast
            # the head on [B (L-1), H] rows: a 2-D linear returns a fresh tensor, not a view, and
            # FSDP2 hooks each unit's output for the backward (the head is a unit of its own)
            values = self.value_head(hidden.float().flatten(0, 1))  # [B (L-1), 1]
            # [B, L-1]; a copy, not a view, for the same reason (the root's output)
            return values.view(hidden.shape[:2]).clone()


def load_value_model(path: str, dtype: str) -> ValueModel:
    """A value model on the backbone of the HF folder ``path`` (a causal LM folder loads its base
    model; its LM head is dropped)."""
    from heron.models import load_backbone

    backbone = load_backbone(path, dtype)
    return ValueModel(backbone, backbone.config.hidden_size)
