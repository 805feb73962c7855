"""heron: RL post-training for LLMs. Nothing is imported here, so ``import heron.config`` stays
light (no torch); the version is the one number pyproject.toml reads (``tool.setuptools.dynamic``)."""

__version__ = "0.1.0"
