"""Child process of the crash-consistency test: saves checkpoints back to back, forever, until
it is SIGKILLed. Checkpoint r holds every parameter and every AdamW moment equal to r, so a
loaded checkpoint proves it was not mixed from two saves. Usage: _crash_saver.py DIR sync|async"""

import sys

import torch

from heron.checkpoint.shards import ModuleShards
from heron.checkpoint.writer import CheckpointWriter


def main(folder: str, mode: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(4)])  # ~1 M params
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 512)).sum().backward()
    optimizer.step()
    writer = CheckpointWriter(folder, async_save=mode == "async", keep_last=2)
    shards = ModuleShards(model, optimizer)
    print("ready", flush=True)
    rollout_id = 0
    while True:
        # An async save copies the live tensors in its thread after save() returns; training changes
        # them only through optimizer.step, which waits for that copy (ModuleShards' step pre-hook).
        # These direct fills bypass the hook, so they wait for the copy themselves: without this a
        # fill under load could land in the previous save's copy (seen: checkpoint 7 holding 8s).
        shards.wait_staged()
        with torch.no_grad():
            for p in model.parameters():
                p.fill_(float(rollout_id))
                optimizer.state[p]["exp_avg"].fill_(float(rollout_id))
        writer.save(rollout_id, shards, {"value": rollout_id})
        rollout_id += 1


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
