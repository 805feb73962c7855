"""Checkpoints: sharded DCP save (sync or async), atomic commit, exact resume, HF export.
See docs/checkpoints.md for the layout and the guarantees."""
