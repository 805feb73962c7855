"""Data parallelism applied from outside the model (FSDP2 ``fully_shard`` or DDP over
torch.distributed). Model and algorithm code never import this package."""
