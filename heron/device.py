"""The device seam: the one module that knows device kinds (``cpu``, ``cuda``).

Every component gets a ``torch.device`` from here (``resolve``) and places its tensors with
``place``/``to_device``; residency backends ask it whether host buffers are pinned, how to
wait for queued copies and how to hand freed memory back; the cluster layer asks it for the
collective backend and the GPUs a bundle needs. The rest of heron is device-generic: the CPU
path and the CUDA path are the same code with another ``torch.device`` (on CPU every call
below is the identity or a no-op, so a CPU run computes exactly what it did without the seam;
the one copy it makes there is ``place``'s of weights still in a memory-mapped file).
``tests/unit/test_architecture.py`` fails if the string ``cuda`` appears anywhere else outside
the residency and cluster backends.

    device = resolve("auto")          # cuda:<current> when CUDA is available, else cpu
    model = place(load_model(...), device)
    batch = batch.to(device)          # records between stages stay on the host (HOST)
"""

from __future__ import annotations

import functools
import os
import platform
from typing import Any

import torch

from heron.errors import UserError

HOST = torch.device("cpu")
"""Where records between stages, host snapshots and checkpoint staging live."""

KINDS = ("auto", "cpu", "cuda")


class DeviceError(UserError):
    """A device was asked for that this machine (or cluster) does not have: one line, before compute."""


def cuda_available() -> bool:
    return torch.cuda.is_available()


def resolve(kind: str) -> torch.device:
    """``run.device`` / ``cluster.device`` -> a ``torch.device``: ``auto`` = CUDA when available,
    else CPU; CUDA is the current CUDA device (``cuda:0`` in a Ray actor given one GPU)."""
    if kind not in KINDS:
        raise DeviceError(f"unknown device {kind!r}; use one of {', '.join(KINDS)}")
    if kind == "auto":
        kind = "cuda" if cuda_available() else "cpu"
    if kind == "cpu":
        return HOST
    check_available(kind, "run.device")
    return torch.device("cuda", torch.cuda.current_device())


def check_available(kind: str, key: str) -> None:
    """Raises ``DeviceError`` naming ``key`` when ``kind`` is cuda and no CUDA device is visible."""
    if kind == "cuda" and not cuda_available():
        raise DeviceError(
            f"{key}=cuda but this machine has no usable CUDA device (torch {torch.__version__}, "
            f"torch.cuda.is_available() is False); use {key}=cpu or auto, or install a CUDA build of torch"
        )


def native_bf16(device: torch.device | str) -> bool:
    """Whether ``device`` computes bfloat16 in hardware: a CUDA device of compute capability 8.0 or
    more (torch's own test, without emulation), an x86 CPU with avx512-bf16 or AMX. Elsewhere torch
    emulates bf16 (correct, slower than float32) or, on older GPUs, may refuse some kernels."""
    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    probes = (getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))
    return any(bool(probe()) for probe in probes if probe is not None)


def bf16_note(requests: list[str], device_type: str, native: bool, *, allow_emulated: bool = False) -> str | None:
    """None when nothing asks for bf16 or the device has it. Else a one-line ``DeviceError``: on a
    GPU without it always; on a CPU without avx512-bf16/AMX unless ``allow_emulated``
    (``run.allow_emulated_bf16``), then a note. Why refuse on a CPU: torch emulates bf16 there,
    correctly but so slowly that a run looks hung (a 25 M-parameter train step took ~27x its
    float32 time on an AVX2 machine, docs/gpu.md)."""
    if not requests or native:
        return None
    asked = ", ".join(requests)
    if device_type == "cuda":
        raise DeviceError(
            f"{asked} but this GPU has no native bfloat16 (compute capability < 8.0); "
            "use float32 here (model.dtype=float32, train.precision=fp32, engine.embedded.dtype=float32)"
        )
    if not allow_emulated:
        raise DeviceError(
            f"{asked} but this CPU has no avx512-bf16 or AMX, so torch would emulate bf16 (many times slower "
            "than float32); use float32 here (model.dtype=float32, train.precision=fp32, "
            "engine.embedded.dtype=float32) or set run.allow_emulated_bf16=true"
        )
    return f"{asked}: this CPU has no avx512-bf16 or AMX, so torch emulates bf16 (correct, many times slower than float32)"


def check_bf16(requests: list[str], device: torch.device, *, allow_emulated: bool = False) -> str | None:
    """``bf16_note`` for ``device`` as it is: called where a component is built (the process that
    holds the device: this one locally, each actor on Ray), before its first forward."""
    return bf16_note(requests, device.type, native_bf16(device), allow_emulated=allow_emulated)


def place(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """The module with its parameters and buffers on ``device`` (in place), each in memory of its
    own (``own_memory``)."""
    return own_memory(module.to(device))


def own_memory(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` with every parameter and buffer that lives in a memory-mapped file (a
    non-resizable storage: on the CPU ``from_pretrained`` maps the safetensors files and hands out
    views of them) copied into ordinary memory, in place (``tensor.data = clone``: the same
    Parameter objects stay, tied weights stay tied). Why, both measured on a CPU:

    - a weight file rewritten in place while a run holds it (``save_pretrained`` into the folder
      the run loaded) killed the process with SIGBUS on its next read of those weights; weights
      the optimizer never writes (the reference model, LoRA's frozen base, the engine's copy until
      its first push) would read the file for the whole run;
    - the views sit at the file's 8-byte offsets, not at the 64-byte alignment of every other
      tensor, and MKL's float32 GEMM on an AVX2 CPU (AMD EPYC, 2026-12-06) rounds some shapes
      differently at another 16-byte alignment: a colocated run (whose offload copies the weights
      into fresh memory) and the same run not colocated differed in the last bit of a logprob.

    On a GPU ``module.to(device)`` has already copied everything: nothing to do."""
    for tensor in [*module.parameters(), *module.buffers()]:
        copy_if_mapped(tensor)
    return module


def copy_if_mapped(tensor: torch.Tensor, local: torch.Tensor | None = None) -> bool:
    """Gives ``tensor`` a storage of its own, in place (``tensor.data = clone``: the same object
    stays), when its storage -- or ``local``'s, a DTensor's local shard -- is not resizable: a
    memory-mapped file, or numpy's memory. Returns whether it copied."""
    if (tensor if local is None else local).untyped_storage().resizable():
        return False
    with torch.no_grad():
        tensor.data = tensor.data.clone()
    return True


def to_device(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor`` on ``device`` (the same tensor object when already there)."""
    return tensor.to(device, non_blocking=pins_host_memory(device))


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the host (the same tensor object when already there)."""
    return tensor.to(HOST)


def pins_host_memory(device: torch.device | str) -> bool:
    """Whether host buffers that feed ``device`` are page-locked (CUDA: full-bandwidth async copies)."""
    return torch.device(device).type == "cuda"


def synchronize(device: torch.device | str) -> None:
    """Waits for the copies queued on ``device`` (no-op on CPU: its copies are synchronous)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def release_cached(device: torch.device | str) -> None:
    """Returns the caching allocator's free blocks to the driver, so freed storages show as free
    device memory (``mem_get_info``) for the component that wakes next. No-op on CPU."""
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def allocator_bytes(device: torch.device | str) -> dict[str, int] | None:
    """``{"allocated", "reserved"}`` bytes of this process on ``device`` from the CUDA caching
    allocator; None on CPU (which has no device allocator: callers use the residency backend's counts)."""
    device = torch.device(device)
    if device.type != "cuda":
        return None
    return {"allocated": torch.cuda.memory_allocated(device), "reserved": torch.cuda.memory_reserved(device)}


def free_device_bytes(device: torch.device | str) -> tuple[int, int] | None:
    """(free, total) bytes of the whole device from the driver (``mem_get_info``); None on CPU."""
    device = torch.device(device)
    return torch.cuda.mem_get_info(device) if device.type == "cuda" else None


def map_location(device: torch.device) -> Any:
    """``torch.load``'s ``map_location`` for state read into components on ``device``: tensors
    saved on any device (a CUDA run's checkpoint on a CPU machine and back) land on ``device``."""
    return device


def collective_backend(kind: str) -> str:
    """torch.distributed backend of the trainer group of a run on ``kind``: gloo on CPU; on CUDA
    NCCL for CUDA tensors and gloo for CPU ones (the loss normaliser, metrics and counts are
    reduced as host scalars, which an NCCL-only group refuses)."""
    return "cpu:gloo,cuda:nccl" if kind == "cuda" else "gloo"


def gpus_per_bundle(kind: str) -> int:
    """GPUs a Ray placement bundle reserves for ``cluster.device=kind`` (one device per bundle)."""
    return 1 if kind == "cuda" else 0


def profiler_activities() -> list:
    """What torch.profiler records in this process: host operators, and the CUDA kernels too
    where CUDA is available."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    return activities


def local_gpu_count() -> int:
    """CUDA devices visible to this process (0 without CUDA)."""
    return torch.cuda.device_count() if cuda_available() else 0


def memory_backend_kind(device: torch.device | str, offload: bool) -> str:
    """Which residency backend releases a component's memory on ``device``: ``keep`` (offload
    off), ``torch_memory_saver`` (CUDA with the package installed: region-tagged pause/resume)
    or ``host`` (host offload: pinned copies on CUDA, plain copies on CPU)."""
    import importlib.util

    if not offload:
        return "keep"
    if torch.device(device).type == "cuda" and importlib.util.find_spec("torch_memory_saver") is not None:
        return "torch_memory_saver"
    return "host"


ACCELERATOR_RNG_KEY = "torch_cuda"
"""The key of the accelerator's RNG states in a checkpoint's RNG record."""


def accelerator_rng_state() -> dict:
    """``{ACCELERATOR_RNG_KEY: [ByteTensor per device]}`` once CUDA is in use, else ``{}``."""
    if cuda_available() and torch.cuda.is_initialized():
        return {ACCELERATOR_RNG_KEY: torch.cuda.get_rng_state_all()}
    return {}


def restore_accelerator_rng_state(states: list[torch.Tensor]) -> None:
    """Restores what ``accelerator_rng_state`` captured (ignored on a machine without CUDA: a
    CUDA run resumed on CPU draws its CPU randomness from the CPU state, which is always restored)."""
    if cuda_available():  # a save that saw more devices than this process: the first ones' states
        torch.cuda.set_rng_state_all(states[: torch.cuda.device_count()])


GLOO_LAZY_INIT = "TORCH_GLOO_LAZY_INIT"


def prepare_process_groups() -> None:
    """Called before this process makes a process group: its gloo groups then connect each pair
    of ranks at the pair's first use (torch's documented ``TORCH_GLOO_LAZY_INIT``) instead of all
    pairs while the group is made. Why: with eager connections, a group that one rank destroys
    right after making it (a ``ManagedProcessGroup`` released by its component's first sleep) can
    fail on the other rank, still inside gloo's full-mesh connect, with "Gloo connectFullMesh
    failed ... Connection closed by peer": the first rank's connect had completed on its side
    alone (21 of 240 runs on a busy 2-core machine; with lazy connections 0 of 240;
    docs/cluster.md has the trace through gloo). A value already in the environment is kept."""
    os.environ.setdefault(GLOO_LAZY_INIT, "1")


def new_process_group(store, rank: int, size: int, timeout, device: torch.device):
    """A process group on ``store`` whose collectives carry tensors on ``device``: NCCL on
    CUDA (the CUDA device set as current first), gloo on CPU. ``timeout`` is a ``timedelta``."""
    import torch.distributed as dist

    if torch.device(device).type != "cuda":
        return dist.ProcessGroupGloo(store, rank, size, timeout)
    torch.cuda.set_device(device)
    options = dist.ProcessGroupNCCL.Options()
    options._timeout = timeout
    return dist.ProcessGroupNCCL(store, rank, size, options)


def reset_peak(device: torch.device | str) -> None:
    """Starts a new peak of ``peak_allocated`` (no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_allocated(device: torch.device | str) -> int | None:
    """Most bytes the CUDA caching allocator had allocated since ``reset_peak``; None on CPU."""
    device = torch.device(device)
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def fused_optimizer_supported(params: list[torch.Tensor]) -> bool:
    """Whether torch's fused AdamW (``fused=True``) takes these parameters: non-empty, plain
    floating-point tensors (not FSDP2's DTensor shards), on a CPU or a CUDA device."""
    from torch.distributed.tensor import DTensor

    return bool(params) and all(
        not isinstance(p.data, DTensor) and p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params
    )


def compile_toolchain_missing(device: torch.device | str) -> str | None:
    """What torch.compile's inductor lacks on this machine to build kernels for ``device``, or
    None: a C++ compiler for a CPU (``torch._inductor.config.cpp.cxx``, g++ by default, or
    ``CXX``), Triton for a CUDA device."""
    kind = torch.device(device).type
    if kind == "cuda":
        from torch.utils._triton import has_triton

        return None if has_triton() else "Triton is not installed (pip install triton)"
    from torch._inductor import cpp_builder

    try:
        cpp_builder.get_cpp_compiler()
    except Exception as error:  # inductor's own error names what it searched for
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return f"no C++ compiler for inductor's CPU kernels ({first}; install g++ or set CXX)"
    return None


def separate_inductor_cache_per_capability() -> str | None:
    """Points inductor's on-disk cache at a folder of its own for ``ATEN_CPU_CAPABILITY`` (when set,
    and ``TORCHINDUCTOR_CACHE_DIR`` is unset or inductor's default, which inductor itself writes
    into the environment once it has run); returns that folder, or None. Why: torch 2.13's cache
    does not key its CPU kernels on the capability, and a kernel cached under one then failed to
    build under another (``'at::vec' has not been declared``, measured with ``default`` after the
    machine's own)."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    capability, default = os.environ.get("ATEN_CPU_CAPABILITY"), os.path.abspath(default_cache_dir())
    if not capability or os.environ.get("TORCHINDUCTOR_CACHE_DIR", default) != default:
        return None
    folder = f"{default}_{capability}"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder
    return folder


# The smallest float32 linear weight (elements, [N, K] of one or several stacked linears) worth
# packing on a CPU where MKL's sgemm runs its own best code; see packs_linear.
PACKED_FLOAT32_MIN_ELEMENTS = 1 << 19
# CPU vendors (x86 CPUID vendor strings) whose float32 linears pack at any size; see packs_linear.
# Measured on two AMD EPYCs (one with avx512-bf16, one AVX2 only); Hygon's CPUs are AMD Zen cores,
# which MKL treats alike (not measured).
PACK_EVERY_FLOAT32_VENDORS = ("AuthenticAMD", "HygonGenuine")


@functools.cache
def cpu_vendor() -> str:
    """This machine's x86 CPU vendor string (``GenuineIntel``, ``AuthenticAMD``, ...): Linux's
    /proc/cpuinfo, else what ``platform.processor()`` names (Windows); "" where neither says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as cpuinfo:
            text = cpuinfo.read(1 << 16)  # the first processor's lines are enough
    except OSError:
        text = ""
    return parse_cpu_vendor(text) or parse_cpu_vendor(platform.processor())


def parse_cpu_vendor(text: str) -> str:
    """The vendor string in /proc/cpuinfo's ``vendor_id`` line, or the first known one named in
    ``text``; "" when there is none."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip()
    return next((v for v in ("GenuineIntel", *PACK_EVERY_FLOAT32_VENDORS) if v in text), "")


def float32_packing_floor() -> int:
    """The fewest elements a float32 linear weight (or stacked group) needs to be packed
    (``packs_linear``): 0 on the CPUs of ``PACK_EVERY_FLOAT32_VENDORS``,
    ``PACKED_FLOAT32_MIN_ELEMENTS`` on the others (Intel, and any CPU that does not say)."""
    return 0 if cpu_vendor() in PACK_EVERY_FLOAT32_VENDORS else PACKED_FLOAT32_MIN_ELEMENTS


def packs_linear(weight: torch.Tensor, elements: int | None = None) -> bool:
    """Whether ``packed_linear_weight`` packs a linear weight like ``weight`` with ``elements``
    elements (default its own): on the CPU, in float32 or bfloat16, with oneDNN; in float32 only
    from ``float32_packing_floor()`` up.

    bfloat16 weights pack only on a CPU with native bf16 (``native_bf16``).

    Why a floor, and only on some CPUs: torch's plain float32 linear is MKL's sgemm, and MKL
    runs its own best code on Intel CPUs only. On a 2-core Intel Xeon (AMX), whole engine decode
    of 32 rows: the 3.2 M bench model (hidden 256, every weight below the floor) took 0.78-0.88x
    the time unpacked against packed, the 25 M one (hidden 512) 1.09-1.21x; packing all of the
    25 M model's linears but its 512 x 512 ones (below the floor) took 1.00-1.09x of packing all
    in six A/Bs (two identical settings measured 0.95-1.07x apart in the same runs). There the
    packed kernel wins only where the weight is too large for the core's cache; below, the
    per-batch reorder and its per-call cost are not paid back. On a 2-core AMD EPYC
    (2026-12-05, same torch) oneDNN's packed kernel beat sgemm at every decode shape measured,
    1.08x at [32, 256] x [256, 256] to 2.0x at [32, 256] x [256, 4096], and the whole engine
    took 0.72x (3.2 M, pure decode) and 0.82x (GRPO-shaped batch) the time packed against the
    floor: no floor there. On an AVX2-only AMD EPYC (family 25 model 1, 2026-12-06) the engine
    decoded 1.16x (3.2 M) and 1.40x (25 M) the tokens/s with every float32 linear packed against
    torch's own (bench/engine.py, ``tokens_per_s_vs_unpacked``). bfloat16 packs at any size (on
    a CPU with native bf16): the packed kernel was ahead at every shape and model measured on
    both (the engine took 1.01-1.12x the time unpacked)."""
    if weight.device.type != "cpu" or weight.dtype not in (torch.float32, torch.bfloat16):
        return False
    if weight.dtype == torch.bfloat16 and not native_bf16(weight.device):
        return False  # oneDNN refuses to pack bf16 where the CPU emulates it (an AVX2 AMD EPYC)
    size = weight.numel() if elements is None else elements
    if weight.dtype == torch.float32 and size < float32_packing_floor():
        return False
    return torch.backends.mkldnn.is_available()


def packed_linear_weight(weight: torch.Tensor, rows: int) -> torch.Tensor | None:
    """``weight`` [N, K] of a linear layer reordered once into oneDNN's blocked layout for about
    ``rows`` input rows, for ``packed_linear``; None where there is no such kernel (a device other
    than the CPU, a torch without oneDNN, another dtype) or it does not pay (``packs_linear``).
    Why: a decode step's linears have few rows, and torch's CPU linear re-reads the weight in its
    plain layout every call; measured on a 2-core AMD EPYC (avx512-bf16, no AMX), 16 and 32 rows,
    the 25 M model's MLP shapes: float32 1.7-2.0x torch's MKL sgemm, bfloat16 1.25-1.8x torch's
    own oneDNN call (bit-identical there)."""
    if not packs_linear(weight):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), max(rows, 1))
    except (RuntimeError, AttributeError):  # a torch build without the op, or a CPU oneDNN refuses
        return None


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [..., K] -> [..., N] through a weight from ``packed_linear_weight``: x W^T + b."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def decode_attention_in_float32(query: torch.Tensor) -> bool:
    """Whether a decode step's attention (one query per row) should run on float32 copies of its
    bfloat16 queries, keys and values: on the CPU. Why: torch's CPU flash kernel in bf16 is slow at
    these shapes -- measured on a 2-core AMD EPYC (32 rows, 8 heads over 4 key/value heads, 10-40
    keys): 270-800 us a call without a mask (transformers' ``enable_gqa`` path), 270-350 us with
    one, against 100-240 us for the float32 kernel on the upcast copies; the 25 M bench model's
    generation took 0.92x the time. float32 computes the same attention without rounding the
    softmax weights to bf16 (tests/unit/test_lean_decoder.py bounds both); the lean decode step
    runs it as two matmuls around a softmax (``heron.rollout.lean_decoder.float32_decode_attention``).
    Not on GPUs, whose bf16 kernels are the fast ones."""
    return query.device.type == "cpu" and query.dtype == torch.bfloat16
