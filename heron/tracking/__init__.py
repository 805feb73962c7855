"""What the user sees: progress bar, per-rollout summary, metrics.jsonl, plots."""
