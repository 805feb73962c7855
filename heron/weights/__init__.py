"""Weight transport from the trainer to the rollout engines, versioned."""
