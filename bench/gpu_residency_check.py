"""GPU checks of the residency CUDA paths, for a session that has a GPU (on CPU: skips).

1. Host offload with pinned host buffers: CUDA memory really drops while asleep
   (``torch.cuda.memory_allocated``) and comes back bit-exact in the same tensors.
2. torch_memory_saver backend (if installed): tensors allocated in its region are paused
   (device free memory rises by their size) and resumed bit-exact at the same addresses.
3. NCCL process group owned by a component: destroyed on sleep, recreated on wake, an
   all_reduce works after each wake (world size 1).
4. A colocated trainer + engine pair on CUDA (toy model, host offload): train / push weights /
   generate with offload gives bit-identical results to the pair without offload.

    python bench/gpu_residency_check.py        # prints one line per check, exit 1 on failure
"""

from __future__ import annotations

import copy
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import torch

MiB = 2**20


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    return ok


def pinned_host_offload() -> bool:
    from heron.residency.host_offload import HostOffload

    tensors = [torch.randn(64 * MiB // 4, device="cuda") for _ in range(4)]  # 4 x 64 MiB
    expected = [t.clone() for t in tensors]
    ptrs_before = [t.untyped_storage()._cdata for t in tensors]
    torch.cuda.synchronize()
    allocated = torch.cuda.memory_allocated()
    backend = HostOffload(pin_memory=True)
    backend.release({"params": tensors})
    freed = allocated - torch.cuda.memory_allocated()
    pinned = all(h.is_pinned() for _, h in backend._saved)
    backend.restore()
    exact = all(torch.equal(t, e) for t, e in zip(tensors, expected))
    same = ptrs_before == [t.untyped_storage()._cdata for t in tensors]
    return check("host offload (pinned)", freed == 256 * MiB and pinned and exact and same,
                 f"freed {freed / MiB:.0f} MiB of 256, pinned={pinned}, bit-exact={exact}, same storages={same}")


def torch_memory_saver_backend() -> bool:
    if importlib.util.find_spec("torch_memory_saver") is None:
        print("SKIP torch_memory_saver: not installed (pip install torch_memory_saver)")
        return True
    import torch_memory_saver

    saver = torch_memory_saver.torch_memory_saver
    if not os.environ.get("LD_PRELOAD") and hasattr(saver, "hook_mode"):
        saver.hook_mode = "torch"  # no LD_PRELOAD: use the torch allocator hook (set before the first region)
    from heron.residency.torch_memory_saver import TorchMemorySaverBackend

    backend = TorchMemorySaverBackend("gpu-check")
    with backend.allocation_scope():
        tensor = torch.randn(256 * MiB // 4, device="cuda")
    expected, address = tensor.cpu(), tensor.data_ptr()
    free_before = torch.cuda.mem_get_info()[0]
    backend.release({"params": [tensor]})
    released = torch.cuda.mem_get_info()[0] - free_before
    held_asleep = backend.held_bytes({"params": [tensor]})["params"]
    backend.restore()
    exact = torch.equal(tensor.cpu(), expected)
    return check("torch_memory_saver", released >= 255 * MiB and held_asleep == 0 and exact and tensor.data_ptr() == address,
                 f"released {released / MiB:.0f} MiB of 256, bit-exact={exact}, same address={tensor.data_ptr() == address}")


def nccl_group() -> bool:
    import torch.distributed as dist

    from heron.residency.host_offload import HostOffload
    from heron.residency.process_group import ManagedProcessGroup
    from heron.residency.state import Holdings, Residency

    store = Path(tempfile.mkdtemp()) / "store"
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    try:
        layer = torch.nn.Linear(1024, 1024, device="cuda")
        group = ManagedProcessGroup("trainer", "dp", backend="nccl")
        residency = Residency("trainer", Holdings(lambda: {"params": list(layer.parameters())}, [("layer", layer)],
                                                  process_groups={"dp": group}),
                              HostOffload(pin_memory=True), device="cuda")
        results = []
        for cycle in range(3):
            residency.sleep()
            results.append(group.released)
            with residency.resident("all_reduce"):
                value = torch.full((4,), float(cycle), device="cuda")
                dist.all_reduce(value, group=residency.process_group("dp"))
                results.append(value.tolist() == [float(cycle)] * 4)
        return check("nccl group release/recreate", all(results), f"3 cycles, checks={results}")
    finally:
        dist.destroy_process_group()


def colocated_pair_on_cuda() -> bool:
    from heron.config.algo import AlgoConfig
    from heron.config.train import TrainConfig
    from heron.records import GenerationRequest, SamplingParams
    from heron.residency.host_offload import HostOffload
    from heron.residency.wiring import ResidencySettings, attach_residency
    from heron.rollout.embedded import EmbeddedEngine
    from heron.toy.addition import make_prompts
    from heron.toy.model import ToyModelSpec, create_toy_model
    from heron.trainer.batch import TrainBatch
    from heron.trainer.objectives import PolicyObjective
    from heron.trainer.policy_trainer import PolicyTrainer
    from transformers import AutoModelForCausalLM

    folder = create_toy_model(Path(tempfile.mkdtemp()), [p.text + p.label for p in make_prompts(500, 0, 2)], ToyModelSpec())
    template = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).cuda()
    template_bytes = sum(p.numel() * p.element_size() for p in template.parameters())

    def run(offload: bool):
        trainer = PolicyTrainer(copy.deepcopy(template), TrainConfig(micro_batch_size=4), PolicyObjective(AlgoConfig()),
                                total_steps=10)
        engine = EmbeddedEngine(copy.deepcopy(template).eval().requires_grad_(False), pad_token_id=template.config.pad_token_id)
        attach_residency(trainer, engine, ResidencySettings(colocate=offload, offload_train=offload, offload_rollout=offload))
        if offload:  # torch_memory_saver (if installed) was picked; its own check is separate
            for component in (trainer, engine):
                component.wake()
                component.residency.backend = HostOffload(pin_memory=True)
                component.sleep()
            assert torch.cuda.memory_allocated() < 1.5 * template_bytes, "offloaded pair still holds its state"  # template + ~0
        g = torch.Generator().manual_seed(0)
        input_ids = torch.randint(3, template.config.vocab_size, (4, 12), generator=g).cuda()  # [B, L]
        batch = TrainBatch(0, 0, list("abcd"), input_ids, torch.ones_like(input_ids), torch.ones(4, 11, device="cuda"),
                           torch.randn(4, generator=g).cuda(), torch.zeros(4, 11, device="cuda"))
        metrics = trainer.train(batch)
        engine.load_weights(trainer.weights())
        gens = engine.generate([GenerationRequest([5, 6, 7], SamplingParams(max_new_tokens=8, seed=i)) for i in range(4)])
        return metrics, gens

    with_offload, without = run(True), run(False)
    return check("colocated pair on cuda", with_offload == without,
                 f"train metrics and generations identical={with_offload == without}")


def main() -> int:
    if not torch.cuda.is_available():
        print("gpu_residency_check: skipped (no CUDA device); the CPU paths are covered by the test suite")
        return 0
    checks = [pinned_host_offload, nccl_group, colocated_pair_on_cuda, torch_memory_saver_backend]
    results = []
    for fn in checks:
        try:
            results.append(fn())
        except Exception as error:  # report and go on: one failing path should not hide the others
            results.append(check(fn.__name__, False, f"{type(error).__name__}: {error}"))
    print(f"gpu_residency_check: {sum(results)}/{len(results)} passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
