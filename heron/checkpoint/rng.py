"""Every random number generator of the process, captured as JSON and restored bit-exactly.

heron's own randomness does not depend on these: data order is a pure function of
(run.seed, epoch) and each sample's sampling seed is derived from
(run.seed, rollout_id, prompt_id, sample_index) (``heron.seeding``). The global generators are
saved anyway so that user plugins and library code that draw from them also resume exactly.
Torch states are byte tensors, stored base64-encoded.
"""

from __future__ import annotations

import base64
import random

import numpy as np
import torch

from heron.device import ACCELERATOR_RNG_KEY, accelerator_rng_state, restore_accelerator_rng_state


def _encode(state: torch.Tensor) -> str:
    return base64.b64encode(state.numpy().tobytes()).decode()


def _decode(text: str) -> torch.Tensor:
    return torch.frombuffer(bytearray(base64.b64decode(text)), dtype=torch.uint8)


def capture_rng() -> dict:
    version, mt_state, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "python": {"version": version, "state": list(mt_state), "gauss_next": gauss},
        "numpy": {"name": name, "keys": keys.tolist(), "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
        "torch": _encode(torch.get_rng_state()),
    }
    for key, states in accelerator_rng_state().items():
        state[key] = [_encode(s) for s in states]
    return state


def restore_rng(state: dict) -> None:
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"]), py["gauss_next"]))
    n = state["numpy"]
    np.random.set_state((n["name"], np.array(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    torch.set_rng_state(_decode(state["torch"]))
    if ACCELERATOR_RNG_KEY in state:
        restore_accelerator_rng_state([_decode(s) for s in state[ACCELERATOR_RNG_KEY]])
