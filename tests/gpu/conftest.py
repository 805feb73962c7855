"""The GPU tier (``pytest -m gpu``): every test here needs a CUDA device and no Ray. Without
one each test is skipped with the reason, so a CPU machine's run of the tier says so instead
of passing silently; the default tier deselects the marker (pyproject.toml addopts)."""

from __future__ import annotations

import pytest
import torch

NO_CUDA = f"no CUDA device (torch {torch.__version__}, torch.cuda.is_available() is False): the GPU tier runs on a GPU machine"


def pytest_collection_modifyitems(config, items):
    here = __file__.rsplit("/", 1)[0]
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.gpu)
            if not torch.cuda.is_available():
                item.add_marker(pytest.mark.skip(reason=NO_CUDA))
