"""bf16 on a device without it (issue 12): a one-line error before anything loads, on a GPU below
compute capability 8.0 always, on a CPU without avx512-bf16/AMX unless run.allow_emulated_bf16
(torch emulates bf16 there, correctly but many times slower than float32: docs/gpu.md); nothing
when no setting asks for bf16. The same check runs where each component is built (in each actor on
Ray), so a Ray run is refused there before any forward."""

import pytest
import torch

import heron.device
from heron.build import critic_spec, engine_spec, trainer_spec
from heron.config import load_config
from heron.critic.build import build_critic
from heron.device import DeviceError, bf16_note, native_bf16
from heron.preflight.device import bf16_requests, check_device
from heron.rollout.embedded import build_embedded_engine
from heron.trainer.build import build_trainer

BASE = ["model.path=m", "data.path=d.jsonl"]


def test_the_settings_that_compute_in_bf16_are_named():
    assert bf16_requests(load_config(None, BASE)) == []
    cfg = load_config(None, [*BASE, "train.precision=bf16", "engine.embedded.dtype=bfloat16"])
    assert bf16_requests(cfg) == ["train.precision=bf16", "engine.embedded.dtype=bfloat16"]
    assert bf16_requests(load_config(None, [*BASE, "model.dtype=bfloat16"])) == ["model.dtype=bfloat16"]
    assert bf16_requests(load_config(None, [*BASE, "engine.embedded.dtype=float32"])) == []


def test_a_device_without_bf16_is_a_one_line_error_and_an_emulating_cpu_can_be_allowed():
    asked = ["train.precision=bf16"]
    with pytest.raises(DeviceError) as gpu_error:
        bf16_note(asked, "cuda", native=False, allow_emulated=True)  # a GPU has no opt-in
    assert str(gpu_error.value).startswith("train.precision=bf16 but this GPU has no native bfloat16")
    with pytest.raises(DeviceError) as cpu_error:
        bf16_note(asked, "cpu", native=False)
    message = str(cpu_error.value)
    assert message.startswith("train.precision=bf16 but this CPU has no avx512-bf16 or AMX")
    assert "train.precision=fp32" in message and "run.allow_emulated_bf16=true" in message
    assert "\n" not in message and "\n" not in str(gpu_error.value)
    assert "torch emulates bf16" in bf16_note(asked, "cpu", native=False, allow_emulated=True)
    assert bf16_note(asked, "cuda", native=True) is None and bf16_note(asked, "cpu", native=True) is None
    assert bf16_note([], "cuda", native=False) is None and bf16_note([], "cpu", native=False) is None


def test_this_machine_answers_and_the_preflight_line_says_it():
    native = native_bf16(torch.device("cpu"))
    assert isinstance(native, bool)
    asked = [*BASE, "run.device=cpu", "train.precision=bf16"]
    allowed = check_device(load_config(None, [*asked, "run.allow_emulated_bf16=true"]))
    assert allowed.startswith("device: run.device=cpu -> cpu") and (("emulates" in allowed) is (not native))
    if native:
        assert check_device(load_config(None, asked)) == "device: run.device=cpu -> cpu"
    else:
        with pytest.raises(DeviceError, match="run.allow_emulated_bf16=true"):
            check_device(load_config(None, asked))


@pytest.mark.parametrize("component", ["trainer", "critic", "engine"])
def test_each_component_refuses_before_it_loads_a_model(monkeypatch, component):
    """What a Ray actor runs: the check comes before the model loads (model.path does not exist,
    so anything else would fail on the load, not on bf16). The CPU is made to answer "no bf16" so
    that the test means the same on every machine."""
    monkeypatch.setattr(heron.device, "native_bf16", lambda device: False)
    overrides = [*BASE, "model.path=/nonexistent/model", "run.device=cpu", "algo.advantage=gae"]
    settings = {"trainer": "train.precision=bf16", "critic": "train.precision=bf16", "engine": "engine.embedded.dtype=bfloat16"}
    cfg = load_config(None, [*overrides, settings[component]])
    build, spec = {
        "trainer": (build_trainer, trainer_spec), "critic": (build_critic, critic_spec),
        "engine": (build_embedded_engine, lambda c: engine_spec(c, pad_token_id=0)),
    }[component]
    with pytest.raises(DeviceError, match=f"^{settings[component]} but this CPU has no avx512-bf16"):
        build(spec(cfg))
    allowed = load_config(None, [*overrides, settings[component], "run.allow_emulated_bf16=true"])
    with pytest.raises(OSError):  # allowed: it goes on to load the (missing) model
        build(spec(allowed))
