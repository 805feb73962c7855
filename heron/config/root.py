"""The root config of a run: one section per component, nothing global."""

from __future__ import annotations

from dataclasses import dataclass

from heron.config.algo import AlgoConfig
from heron.config.algo_checks import check_algo_combinations
from heron.config.base import apply_overrides, build, check, doc, load_yaml
from heron.config.checkpoint import CheckpointConfig
from heron.config.cluster import ClusterConfig
from heron.config.critic import CriticConfig
from heron.config.data import DataConfig
from heron.config.engine import EngineConfig
from heron.config.eval import EvalConfig
from heron.config.hooks import HooksConfig
from heron.config.loop import LoopConfig
from heron.config.model import ModelConfig
from heron.config.residency import OffloadConfig, resolve_offload
from heron.config.reward import RewardConfig
from heron.config.rollout import RolloutConfig
from heron.config.run import RunConfig
from heron.config.sft import SFTConfig
from heron.config.tracking import TrackingConfig, check_profiled_rollouts
from heron.config.train import TrainConfig
from heron.config.train_checks import check_precision


@dataclass(frozen=True)
class HeronConfig:
    """Everything a run is made of. Each component is built from its own section."""

    model: ModelConfig = doc("Policy model folder.")
    data: DataConfig = doc("Training prompts.")
    run: RunConfig = doc("Output folder and seed.", factory=RunConfig)
    rollout: RolloutConfig = doc("Rollout counts and sampling.", factory=RolloutConfig)
    engine: EngineConfig = doc("Rollout engine backend: embedded (in-process HF), vllm (a vLLM server), ...", factory=EngineConfig)
    algo: AlgoConfig = doc("Advantages, loss and KL.", factory=AlgoConfig)
    train: TrainConfig = doc("Optimizer and batching.", factory=TrainConfig)
    critic: CriticConfig = doc("Value model of PPO with a learned critic (algo.advantage=gae).", factory=CriticConfig)
    reward: RewardConfig = doc("Reward function.", factory=RewardConfig)
    eval: EvalConfig = doc("Held-out evaluation.", factory=EvalConfig)
    sft: SFTConfig = doc("Supervised warm start (heron sft).", factory=SFTConfig)
    tracking: TrackingConfig = doc("Progress, summaries, metrics, plots.", factory=TrackingConfig)
    hooks: HooksConfig = doc("User hooks: generate, post-process, advantage, loss, data source.", factory=HooksConfig)
    checkpoint: CheckpointConfig = doc("Saving, resuming and HF export.", factory=CheckpointConfig)
    cluster: ClusterConfig = doc("Executor (local or Ray), placement and deadlines.", factory=ClusterConfig)
    loop: LoopConfig = doc("Sync or one-step off-policy async rollouts.", factory=LoopConfig)
    colocate: bool = doc(
        "Trainer and rollout engine share devices and take turns (the idle one sleeps); false gives "
        "engines their own devices (Ray placement).", False
    )
    offload: OffloadConfig = doc("Which components release device memory when idle.", factory=OffloadConfig)

    def __post_init__(self):
        resolve_offload(self.colocate, self.offload)  # residency (issue 3): colocate needs offload
        check(
            self.data.path != "" or self.hooks.data_source != "",
            "data.path is required: set data.path=<prompts.jsonl|.parquet|hf folder> (or hooks.data_source)",
        )
        self._check_cluster()
        check_algo_combinations(self)
        check_precision(self.train, self.model)
        check_profiled_rollouts(self.tracking.profile, self.rollout.num_rollouts)
        mini = self.rollout.num_samples // self.train.steps_per_rollout
        check(
            self.rollout.num_samples % self.train.steps_per_rollout == 0,
            f"train.steps_per_rollout={self.train.steps_per_rollout} must divide the "
            f"{self.rollout.num_samples} samples of a rollout (rollout.batch_size x rollout.samples_per_prompt)",
        )
        check(
            self.train.max_tokens_per_micro_batch > 0 or mini % min(self.train.micro_batch_size, mini) == 0,
            f"train.micro_batch_size={self.train.micro_batch_size} must divide the mini-batch of {mini} samples "
            f"(rollout samples / train.steps_per_rollout)",
        )

    def _check_cluster(self) -> None:
        world = self.train.world_size
        check(
            world == 1 or self.cluster.backend == "ray",
            f"train.world_size={world} needs cluster.backend=ray (the local backend runs one trainer rank)",
        )
        check(
            self.loop.mode == "sync" or (self.cluster.backend == "ray" and not self.colocate),
            "loop.mode=async needs disaggregated engines: set cluster.backend=ray and colocate=false",
        )
        check(  # one device per bundle: two colocated engines could never take their turn together
            self.cluster.backend == "local" or not self.colocate or self.cluster.num_engines <= world,
            f"colocate=true places engine e on trainer rank e's bundle, so cluster.num_engines="
            f"{self.cluster.num_engines} must be <= train.world_size={world}; lower num_engines or set colocate=false",
        )
        check(  # the broadcast group would hold trainer rank 0 and engine 0 on one GPU, which NCCL refuses
            not (self.cluster.backend == "ray" and self.colocate and self.cluster.device == "cuda"
                 and self.cluster.weight_transport == "broadcast"),
            "cluster.weight_transport=broadcast with colocate=true on cluster.device=cuda would put trainer rank 0 "
            "and engine 0 on one GPU in one NCCL group; use cluster.weight_transport=object_store or disk",
        )
        check(
            self.cluster.backend == "local" or self.run.device in ("auto", self.cluster.device),
            f"run.device={self.run.device} places the local backend's components; on Ray cluster.device="
            f"{self.cluster.device} does: set run.device=auto or cluster.device={self.run.device}",
        )
        mini = self.rollout.num_samples // max(self.train.steps_per_rollout, 1)
        check(
            mini % world == 0,
            f"train.world_size={world} must divide the mini-batch of {mini} samples "
            f"(rollout samples / train.steps_per_rollout): each rank trains on an equal share",
        )


def load_config(path: str | None, overrides: list[str] = ()) -> HeronConfig:
    """YAML file (optional) + ``key.sub=value`` overrides -> a validated ``HeronConfig``."""
    data = load_yaml(path) if path else {}
    return build(HeronConfig, apply_overrides(data, list(overrides)))
