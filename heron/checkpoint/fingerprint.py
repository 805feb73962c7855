"""What a checkpoint must agree on with the run that loads it, stored in ``state.json`` and
compared before any tensor is loaded, so a mismatch is one line naming what differs instead
of a deep DCP traceback ("Cannot merge two lists with different lengths (81 and 52)").

- model: every state-dict key with its shape and dtype;
- optimizer: class, param groups as lists of parameter names, hyperparameter names;
- config: the sections that decide what the resumed run computes (``RESUME_CRITICAL``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import torch

from heron.checkpoint.errors import CheckpointMismatchError

# Config parts that must match on resume, because they change what the next rollouts compute:
# the seed (data order and every sampling seed derive from it), the model and its dtype, the
# data, how rollouts are drawn, the reward, the algorithm and the optimizer settings.
# Not included: rollout.num_rollouts (a run may be extended), eval, tracking, checkpoint, run.dir.
RESUME_CRITICAL = ("run.seed", "model", "data", "rollout", "reward", "algo", "train", "hooks", "critic")
RESUME_FREE = (
    "rollout.num_rollouts", "train.world_size", "train.parallel",  # DCP reshards on load
    # what happens on a failure, not what a healthy step computes: a run stopped by a non-finite
    # loss or a hanging reward resumes with train.on_nonfinite=skip or a longer reward.timeout_s
    "train.on_nonfinite", "reward.timeout_s",
    "train.old_logprobs_forward",  # which forward computes pi_old, not its values (heron.trainer.old_logprobs)
    "train.balance_ranks",  # which rank sums which row, not the update (heron.parallel.rank_balance)
)

# Keys that change what a run computes only with a learned critic (algo.advantage=gae): left out of
# other runs' fingerprints, so checkpoints saved before they existed resume (prefixes).
CRITIC_ONLY = ("critic.", "algo.gamma", "algo.lam")


def _flatten(prefix: str, value: Any, out: dict) -> None:
    if isinstance(value, dict):
        for key, sub in value.items():
            _flatten(f"{prefix}.{key}", sub, out)
    else:
        out[prefix] = value


def config_fingerprint(config_dict: dict) -> dict[str, Any]:
    """Dotted key -> value for the ``RESUME_CRITICAL`` parts of a plain-dict config."""
    out: dict[str, Any] = {}
    for part in RESUME_CRITICAL:
        node = config_dict
        for key in part.split("."):
            node = node.get(key, {}) if isinstance(node, dict) else {}
        _flatten(part, node, out)
    if out.get("model.lora.enabled") is not True:  # no LoRA: as before model.lora existed, so older checkpoints resume
        out = {k: v for k, v in out.items() if not k.startswith("model.lora.")}
    unused = () if out.get("algo.advantage") == "gae" else CRITIC_ONLY  # a run without a critic never reads them
    return {k: v for k, v in sorted(out.items()) if k not in RESUME_FREE and not k.startswith(unused)}


def digest(fingerprint: dict) -> str:
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()[:16]


def model_fingerprint(model_state: dict[str, torch.Tensor]) -> dict[str, dict]:
    return {k: {"shape": list(v.shape), "dtype": str(v.dtype).removeprefix("torch.")} for k, v in model_state.items()}


def optimizer_fingerprint(optimizer: torch.optim.Optimizer, optim_state: dict) -> dict:
    groups = optim_state["param_groups"]
    return {
        "type": type(optimizer).__name__,
        "param_groups": [list(g["params"]) for g in groups],
        "hyperparameters": sorted(k for k in groups[0] if k != "params") if groups else [],
    }


def _fail(name: str, what: str, differs: str) -> None:
    raise CheckpointMismatchError(
        f"checkpoint {name} does not fit this run's {what}: {differs}; resume with the {what} it was "
        f"saved with, point checkpoint.load at another checkpoint, or set checkpoint.load=none"
    )


def _more(items: list) -> str:
    return f" (and {len(items) - 1} more)" if len(items) > 1 else ""


def check_model(name: str, saved: dict, current: dict) -> None:
    missing = [k for k in current if k not in saved]
    extra = [k for k in saved if k not in current]
    if missing:
        _fail(name, "model", f"the model has {missing[0]} which the checkpoint lacks{_more(missing)}")
    if extra:
        _fail(name, "model", f"the checkpoint has {extra[0]} which the model lacks{_more(extra)}")
    diff = [k for k in current if saved[k] != current[k]]
    if diff:
        k = diff[0]
        _fail(name, "model", f"{k} is {tuple(saved[k]['shape'])} {saved[k]['dtype']} in the checkpoint, "
              f"{tuple(current[k]['shape'])} {current[k]['dtype']} in the model{_more(diff)}")


def check_optimizer(name: str, saved: dict, current: dict) -> None:
    if saved["type"] != current["type"]:
        _fail(name, "optimizer", f"the checkpoint has a {saved['type']} optimizer, the run a {current['type']}")
    s_groups, c_groups = saved["param_groups"], current["param_groups"]
    if len(s_groups) != len(c_groups) or any(len(a) != len(b) for a, b in zip(s_groups, c_groups)):
        _fail(name, "optimizer", f"param groups of {[len(g) for g in s_groups]} parameters in the checkpoint, "
              f"{[len(g) for g in c_groups]} in the run")
    for i, (a, b) in enumerate(zip(s_groups, c_groups)):
        if a != b:
            k = next(j for j in range(len(a)) if a[j] != b[j])
            _fail(name, "optimizer", f"param group {i} holds {a[k]} at position {k} in the checkpoint, {b[k]} in the run")
    if saved["hyperparameters"] != current["hyperparameters"]:
        _fail(name, "optimizer", f"hyperparameters {saved['hyperparameters']} in the checkpoint, {current['hyperparameters']} in the run")


def check_config(name: str, saved: dict, current: dict) -> None:
    diff = [k for k in sorted(set(saved) | set(current)) if saved.get(k) != current.get(k)]
    if diff:
        k = diff[0]
        _fail(name, "config", f"{k}={saved.get(k)!r} in the checkpoint, {current.get(k)!r} in this run{_more(diff)}")
