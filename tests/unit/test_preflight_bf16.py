"""bf16 on a device without it (issue 12): on a GPU below compute capability 8.0 a one-line
error before anything loads; on a CPU without avx512-bf16/AMX a note (torch emulates bf16 there,
correctly but slower than float32); nothing when no setting asks for bf16."""

import pytest
import torch

from heron.config import load_config
from heron.device import DeviceError, bf16_note, native_bf16
from heron.preflight.device import bf16_requests, check_device

BASE = ["model.path=m", "data.path=d.jsonl"]


def test_the_settings_that_compute_in_bf16_are_named():
    assert bf16_requests(load_config(None, BASE)) == []
    cfg = load_config(None, [*BASE, "train.precision=bf16", "engine.embedded.dtype=bfloat16"])
    assert bf16_requests(cfg) == ["train.precision=bf16", "engine.embedded.dtype=bfloat16"]
    assert bf16_requests(load_config(None, [*BASE, "model.dtype=bfloat16"])) == ["model.dtype=bfloat16"]


def test_a_gpu_without_bf16_is_a_one_line_error_and_a_cpu_without_it_a_note():
    asked = ["train.precision=bf16"]
    with pytest.raises(DeviceError) as error:
        bf16_note(asked, "cuda", native=False)
    assert str(error.value).startswith("train.precision=bf16 but this GPU has no native bfloat16") and "\n" not in str(error.value)
    assert "torch emulates bf16" in bf16_note(asked, "cpu", native=False)
    assert bf16_note(asked, "cuda", native=True) is None and bf16_note(asked, "cpu", native=True) is None
    assert bf16_note([], "cuda", native=False) is None


def test_this_machine_answers_and_the_device_line_says_it():
    native = native_bf16(torch.device("cpu"))
    assert isinstance(native, bool)
    line = check_device(load_config(None, [*BASE, "run.device=cpu", "train.precision=bf16"]))
    assert line.startswith("device: run.device=cpu -> cpu") and (("emulates" in line) is (not native))
