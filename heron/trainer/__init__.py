"""The trainer: policy model, optimizer, schedule and the objectives it minimises."""
