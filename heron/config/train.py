from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from heron.config.base import check, doc


@dataclass(frozen=True)
class TrainConfig:
    """Optimizer, schedule and batching of the trainer."""

    lr: float = doc("Peak learning rate of AdamW.", 1e-4)
    weight_decay: float = doc("AdamW decoupled weight decay.", 0.0)
    betas: list[float] = doc("AdamW betas.", factory=lambda: [0.9, 0.999])
    eps: float = doc("AdamW epsilon.", 1e-8)
    warmup_steps: int = doc("Linear LR warm-up, in optimizer steps.", 0)
    lr_schedule: Literal["constant", "cosine"] = doc("LR after warm-up: constant, or cosine decay to min_lr_ratio.", "constant")
    min_lr_ratio: float = doc("Final LR of the cosine schedule as a fraction of lr.", 0.1)
    grad_clip: float = doc("Clip the global grad norm to this value; 0 disables clipping.", 1.0)
    steps_per_rollout: int = doc("Optimizer steps per rollout: the batch is split into this many mini-batches.", 1)
    micro_batch_size: int = doc("Sequences per forward/backward; gradients accumulate over a mini-batch.", 8)
    max_tokens_per_micro_batch: int = doc(
        "Token budget of a micro-batch: the tokens its forward holds (rows x their padded length; with shared "
        "prompts, the packed rows x their length); 0 packs micro_batch_size rows in batch "
        "order, each micro-batch cut to its own longest row. > 0: rows are sorted by length and packed greedily under the budget, each micro-batch padded "
        "only to its own longest row (a row longer than the budget is a micro-batch of its own); micro_batch_size "
        "is then unused. The loss normaliser is the mini-batch's either way, so the gradient is the same sum "
        "(heron.trainer.packing).",
        0,
    )
    share_prompts: bool = doc(
        "Samples of one prompt share it in the training forward: the rows of a micro-batch with the same prompt "
        "become one packed row (the prompt once, then each answer) with a mask that keeps the answers apart, so "
        "the prompt's tokens run once per prompt instead of once per sample. Applied for models that take it "
        "(Llama, Qwen2/3, Mistral with sdpa attention, no sliding window) where the estimated FLOPs are at least "
        "10 % below the padded rows'; false: one padded row per sample. The same values up to summation order "
        "(heron.trainer.shared_prompts).",
        True,
    )
    logprob_chunk_size: int = doc(
        "Sequence positions per chunk of the output head: the [B, T, V] logits and log-probabilities are never "
        "held whole, each chunk is recomputed in the backward (0: all positions at once). The same values "
        "within float round-off, for one more head matmul in the backward (heron.trainer.lm_head_chunks).",
        0,
    )
    precision: Literal["fp32", "bf16"] = doc(
        "Arithmetic of the trainer's forward/backward: bf16 runs the model under autocast (bfloat16 matmuls; "
        "FSDP2 ranks also gather the weights in bfloat16, FSDP2's mixed precision) while master weights, "
        "gradients, optimizer state, logprobs and the loss stay float32 (needs model.dtype=float32; "
        "model.dtype=bfloat16 is pure bf16 instead).",
        "fp32",
    )
    attention_backend: Literal["auto", "torch"] = doc(
        "Attention kernel of the training forward. auto: the math kernel (matmul, softmax, matmul) for a "
        "differentiated forward on a CPU in bfloat16 over <= 160 positions, where torch's flash-attention backward "
        "is several times slower; torch's own choice everywhere else. torch: always torch's choice. The same "
        "values up to summation order (heron.trainer.attention_kernel).",
        "auto",
    )
    gradient_checkpointing: bool = doc(
        "Activation checkpointing of the policy's decoder layers: each keeps only its input in the forward and "
        "recomputes the rest in the backward (transformers, non-reentrant). Less activation memory for about one "
        "more forward per micro-batch; the same ops, so the same losses and gradients "
        "(heron.trainer.activation_checkpointing).",
        False,
    )
    compile: bool = doc(
        "torch.compile each of the policy's decoder layers, and the critic's (regional compilation: one graph per "
        "layout, padded or shared prompts, reused by every layer and batch shape): inductor fuses each layer's "
        "elementwise ops (norms, RoPE, activation, autocast's casts) forward and backward. Pays on long runs of "
        "larger models: the first train step compiles (~15-40 s on 2 CPU cores; needs a C++ compiler on a CPU, "
        "Triton on a GPU). The same maths "
        "in another rounding order (heron.trainer.compile).",
        False,
    )
    world_size: int = doc("Data-parallel trainer ranks (torch.distributed group); > 1 needs cluster.backend=ray.", 1)
    parallel: Literal["fsdp2", "ddp"] = doc("Data parallelism of the ranks: fsdp2 (fully_shard, default) or ddp.", "fsdp2")
    reshard_after_forward: bool = doc(
        "FSDP2 ranks: free each decoder layer's gathered weights after its forward and gather them again for its "
        "backward (true: ZeRO-3, the least memory), or keep them until the backward (false: one all-gather of "
        "the weights a micro-batch instead of two, for the whole model's gathered weights held from forward to "
        "backward). The same maths either way (heron.parallel.data_parallel).",
        True,
    )
    balance_ranks: bool = doc(
        "With world_size > 1: deal each mini-batch's rows to the ranks so that each gets about the same work "
        "(tokens of the rows it trains; a prompt's samples kept together), instead of contiguous equal shares: a "
        "step waits for its slowest rank. Every rank still gets the same number of rows; only which rank sums "
        "which row changes (float summation order). train/rank_work_imbalance is the largest rank's work over "
        "the mean (heron.parallel.rank_balance).",
        True,
    )
    on_nonfinite: Literal["error", "skip"] = doc(
        "A mini-batch whose loss or global grad norm is inf/nan: error stops the run before the optimizer "
        "step applies it; skip zeroes its gradients, skips that optimizer and LR-schedule step and counts "
        "it (train/nonfinite_skipped).",
        "error",
    )
    recompute_old_logprobs: bool = doc(
        "Old logprobs (pi_old of the policy ratio) are the trainer's, at the weights before the rollout's first "
        "step (else the engine's sampling logprobs).",
        True,
    )
    skip_zero_advantage: bool = doc(
        "Leave rows whose advantage is 0 on every answer token (a GRPO group whose rewards are all equal) out "
        "of the forward and backward: every built-in policy loss gives them exactly 0 loss and gradient, and the "
        "loss normaliser still counts them, so the step is the same up to float summation order. Not applied "
        "with a KL or entropy term in the loss or a hooks.policy_loss. Diagnostics (entropy, clip fraction) are "
        "then means over the trained rows; train/zero_advantage_skipped is the share left out "
        "(heron.trainer.zero_advantage).",
        True,
    )
    old_logprobs_forward: Literal["auto", "always"] = doc(
        "With recompute_old_logprobs: auto runs the separate no-grad forward for pi_old only where needed "
        "(steps_per_rollout > 1, algo.off_policy correction) and otherwise takes pi_old from the "
        "training forward, detached (the same weights: equal values, one forward less); always runs it every "
        "rollout. train/old_logprobs_recomputed says which ran.",
        "auto",
    )

    def __post_init__(self):
        check(self.lr > 0, f"train.lr must be > 0, got {self.lr}")
        check(len(self.betas) == 2 and all(0 <= b < 1 for b in self.betas), f"train.betas must be two numbers in [0, 1), got {self.betas}")
        check(self.warmup_steps >= 0, f"train.warmup_steps must be >= 0, got {self.warmup_steps}")
        check(0 <= self.min_lr_ratio <= 1, f"train.min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        check(self.grad_clip >= 0, f"train.grad_clip must be >= 0, got {self.grad_clip}")
        check(self.steps_per_rollout >= 1, f"train.steps_per_rollout must be >= 1, got {self.steps_per_rollout}")
        check(self.world_size >= 1, f"train.world_size must be >= 1, got {self.world_size}")
        check(self.reshard_after_forward or self.parallel == "fsdp2",
              "train.reshard_after_forward=false applies to FSDP2's sharded weights; DDP keeps whole weights "
              "(set train.parallel=fsdp2 or drop it)")
        check(self.max_tokens_per_micro_batch >= 0, f"train.max_tokens_per_micro_batch must be >= 0 (0: off), got {self.max_tokens_per_micro_batch}")
        check(self.logprob_chunk_size >= 0, f"train.logprob_chunk_size must be >= 0 (0: off), got {self.logprob_chunk_size}")
        check(self.micro_batch_size >= 1, f"train.micro_batch_size must be >= 1, got {self.micro_batch_size}")
        check(
            self.recompute_old_logprobs or self.old_logprobs_forward == "auto",
            "train.old_logprobs_forward=always needs train.recompute_old_logprobs=true (with false the engine's "
            "logprobs are pi_old and no forward runs)",
        )
