"""heron's version: the installed distribution's (``importlib.metadata``), else the source tree's
``heron.__version__`` (a checkout on ``PYTHONPATH`` without ``pip install``)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version


def heron_version() -> str:
    try:
        return version("heron")
    except PackageNotFoundError:
        from heron import __version__

        return __version__
