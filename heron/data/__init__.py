"""Prompt datasets and the resumable sampler that walks them."""
