"""Pure checkpoint logic: fingerprints and their one-line mismatch errors, the RNG state's
JSON round trip, and the ``checkpoint.async`` config key."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from heron.checkpoint import dcp_io
from heron.checkpoint.errors import CheckpointMismatchError
from heron.checkpoint.fingerprint import check_config, check_model, check_optimizer, optimizer_fingerprint
from heron.checkpoint.rng import capture_rng, restore_rng
from heron.config.root import load_config
from tests.checkpoint_helpers import model_and_optimizer




def test_fingerprint_mismatches_are_one_line():
    model, optimizer = model_and_optimizer(width=16)
    other, other_opt = model_and_optimizer(width=8)
    live, other_live = dcp_io.live_state(model, optimizer), dcp_io.live_state(other, other_opt)
    from heron.checkpoint.fingerprint import model_fingerprint

    with pytest.raises(CheckpointMismatchError, match=r"0.weight is \(16, 16\) float32 in the checkpoint, \(8, 8\)") as e:
        check_model("rollout-000001", model_fingerprint(live["model"]), model_fingerprint(other_live["model"]))
    assert "\n" not in str(e.value) and "(and 2 more)" in str(e.value)
    split = torch.optim.AdamW([{"params": list(model.parameters())[:2]}, {"params": list(model.parameters())[2:]}])
    saved = optimizer_fingerprint(optimizer, live["optimizer"])
    current = optimizer_fingerprint(split, dcp_io.live_state(model, split)["optimizer"])
    with pytest.raises(CheckpointMismatchError, match=r"param groups of \[4\] parameters in the checkpoint, \[2, 2\] in the run"):
        check_optimizer("rollout-000001", saved, current)
    with pytest.raises(CheckpointMismatchError, match="train.lr=0.1 in the checkpoint, 0.2 in this run"):
        check_config("rollout-000001", {"train.lr": 0.1}, {"train.lr": 0.2})


def test_rng_state_round_trips_through_json():
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = json.loads(json.dumps(capture_rng()))
    expected = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    restore_rng(state)
    assert random.random() == expected[0] and np.random.rand() == expected[1]
    assert torch.equal(torch.rand(3), expected[2])


def test_async_is_the_yaml_key_of_async_():
    cfg = load_config(None, ["model.path=m", "data.path=d", "checkpoint.async=false"])
    assert cfg.checkpoint.async_ is False and cfg.checkpoint.folder("runs/x") == "runs/x/checkpoints"
    from heron.config.base import ConfigError

    with pytest.raises(ConfigError, match="did you mean 'checkpoint.async'"):
        load_config(None, ["model.path=m", "data.path=d", "checkpoint.asynk=false"])


def test_failure_policies_may_change_on_resume():
    """A run stopped by a non-finite loss (or a hanging reward) resumes with the policy changed."""
    from heron.checkpoint.fingerprint import config_fingerprint
    from heron.config.base import to_dict

    base = ["model.path=m", "data.path=d.jsonl"]
    saved = config_fingerprint(to_dict(load_config(None, base)))
    changed = config_fingerprint(to_dict(load_config(None, [*base, "train.on_nonfinite=skip", "reward.timeout_s=300"])))
    check_config("rollout-000004", saved, changed)
    with pytest.raises(CheckpointMismatchError, match="train.lr"):
        check_config("rollout-000004", saved, config_fingerprint(to_dict(load_config(None, [*base, "train.lr=0.5"]))))


def test_where_old_logprobs_come_from_may_change_on_resume():
    """train.old_logprobs_forward changes which forward computes pi_old, not its values (issue 14,
    item 2), so a run resumes across it, and from checkpoints saved before the key existed."""
    from heron.checkpoint.fingerprint import config_fingerprint
    from heron.config.base import to_dict

    base = ["model.path=m", "data.path=d.jsonl"]
    saved = config_fingerprint(to_dict(load_config(None, base)))
    check_config("rollout-000004", saved, config_fingerprint(to_dict(load_config(None, [*base, "train.old_logprobs_forward=always"]))))
    before_the_key = {k: v for k, v in saved.items() if k != "train.old_logprobs_forward"}
    check_config("rollout-000004", before_the_key, saved)


def test_how_rows_are_dealt_to_ranks_may_change_on_resume():
    """train.balance_ranks changes which rank sums which row, not the update
    (heron.parallel.rank_balance), so a run resumes across it, and from checkpoints saved before
    the key existed."""
    from heron.checkpoint.fingerprint import config_fingerprint
    from heron.config.base import to_dict

    base = ["model.path=m", "data.path=d.jsonl"]
    saved = config_fingerprint(to_dict(load_config(None, base)))
    assert "train.balance_ranks" not in saved
    check_config("rollout-000004", saved, config_fingerprint(to_dict(load_config(None, [*base, "train.balance_ranks=false"]))))


def test_critic_keys_count_only_for_a_run_with_a_critic():
    """critic.* and algo.gamma / algo.lam change what a run computes only with algo.advantage=gae:
    without it a checkpoint saved before the keys existed still resumes; with it they must match."""
    from heron.checkpoint.fingerprint import config_fingerprint
    from heron.config.base import to_dict

    base = ["model.path=m", "data.path=d.jsonl"]
    saved = config_fingerprint(to_dict(load_config(None, base)))
    before_the_keys = {k: v for k, v in saved.items() if not k.startswith("critic.") and k not in ("algo.gamma", "algo.lam")}
    check_config("rollout-000004", before_the_keys, saved)
    gae = [*base, "algo.advantage=gae"]
    saved = config_fingerprint(to_dict(load_config(None, gae)))
    for changed in ("critic.lr=0.5", "algo.lam=0.9", "critic.value_clip=0.5"):
        with pytest.raises(CheckpointMismatchError, match=changed.split("=")[0]):
            check_config("rollout-000004", saved, config_fingerprint(to_dict(load_config(None, [*gae, changed]))))
