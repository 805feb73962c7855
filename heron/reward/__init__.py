"""Reward functions: score each sample's response against its prompt's label."""
