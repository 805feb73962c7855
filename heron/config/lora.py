"""LoRA adapters on the policy (``model.lora``): the trainer trains low-rank adapters through
``peft`` and freezes the base weights; the engine serves the merged weights (heron.lora)."""

from __future__ import annotations

from dataclasses import dataclass

from heron.config.base import check, doc

ALL_LINEAR = "all-linear"


@dataclass(frozen=True)
class LoraConfig:
    """``W x + (alpha / rank) * B A x`` on each target layer, with ``A: [rank, in]``,
    ``B: [out, rank]`` (B starts at 0, so training starts from the base model). Off by default
    (full fine-tuning). Needs ``pip install 'heron[lora]'`` (peft)."""

    enabled: bool = doc("Train LoRA adapters instead of all weights (the base weights stay frozen).", False)
    rank: int = doc("Adapter rank r (the inner dimension of B A).", 8)
    alpha: float = doc("Scale numerator: the update is (alpha / rank) * B A.", 16.0)
    dropout: float = doc(
        "Dropout on the adapters' input while training, in [0, 1); > 0 makes the trainer's logprobs stochastic.", 0.0
    )
    target_modules: list[str] = doc(
        "Linear layers that get adapters, by name (e.g. [q_proj, v_proj]), or [all-linear] (every linear layer but the output head).",
        factory=lambda: [ALL_LINEAR],
    )

    def __post_init__(self):
        check(self.rank >= 1, f"model.lora.rank must be >= 1, got {self.rank}")
        check(self.alpha > 0, f"model.lora.alpha must be > 0, got {self.alpha}")
        check(0 <= self.dropout < 1, f"model.lora.dropout must be in [0, 1), got {self.dropout}")
        check(len(self.target_modules) > 0, "model.lora.target_modules must name at least one layer (or [all-linear])")
        check(
            ALL_LINEAR not in self.target_modules or len(self.target_modules) == 1,
            f"model.lora.target_modules: {ALL_LINEAR} stands alone, got {self.target_modules}",
        )
        check(
            len(set(self.target_modules)) == len(self.target_modules),
            f"model.lora.target_modules lists a layer twice: {self.target_modules}",
        )
        check(all(self.target_modules), "model.lora.target_modules has an empty name")

    @property
    def scaling(self) -> float:
        """alpha / rank: what B A is multiplied by (peft's ``scaling``)."""
        return self.alpha / self.rank
