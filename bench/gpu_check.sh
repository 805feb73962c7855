#!/usr/bin/env bash
# The GPU check (issue 12): the GPU tier, then a short colocated RL run of a random-weight ~0.5 B
# Qwen3 with and without offload (bench/gpu_check.py). One command, on the machine's own Python
# (no pip install: heron runs from this source tree through PYTHONPATH). Results are appended to
# $OUT/gpu_check.txt when OUT is set, else bench/out/gpu_check.txt; the GPU tier's whole log beside it
# (gpu_tier.log). The run's model, data and profile (GBs) go to $WORK, default a new folder under /tmp:
# not under $OUT, whose files the device tool brings back within a few tens of MiB.
#
#   bench/gpu_check.sh                    # on a CUDA machine (budget: under 8 minutes on one H200)
#   bench/gpu_check.sh --device cpu --tiny   # the same script on CPU, up to the CUDA calls (tests/e2e/test_gpu_check.py)
set -u
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
RESULTS_DIR="${OUT:-$ROOT/bench/out}"
mkdir -p "$RESULTS_DIR"
RESULTS="$RESULTS_DIR/gpu_check.txt"
WORK="${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/heron_gpu_check.XXXXXX")}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
cd "$ROOT"
DEVICE=cuda
for arg in "$@"; do [ "$arg" = "cpu" ] && DEVICE=cpu; done

{
  echo "=== gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'available', torch.cuda.is_available(), '| transformers', transformers.__version__)"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  "$PY" -c "import torch_memory_saver" 2>/dev/null && echo "torch_memory_saver: installed" || echo "torch_memory_saver: not installed (host offload backend)"
} 2>&1 | tee -a "$RESULTS"

status=0
if [ "$DEVICE" = cuda ]; then
  echo "--- GPU tier: pytest -m gpu tests/gpu" | tee -a "$RESULTS"
  if "$PY" -c "import pytest" 2>/dev/null; then
    timeout 240 "$PY" -m pytest -q -p no:cacheprovider -m gpu tests/gpu -o addopts="-ra --strict-markers" --durations=15 \
      > "$RESULTS_DIR/gpu_tier.log" 2>&1
    [ $? -eq 0 ] || status=1
    tail -40 "$RESULTS_DIR/gpu_tier.log" | tee -a "$RESULTS"
  else
    echo "pytest is not installed in $PY: GPU tier not run" | tee -a "$RESULTS"
    status=1
  fi
fi
echo "--- colocated RL run (bench/gpu_check.py $*)" | tee -a "$RESULTS"
timeout 270 "$PY" bench/gpu_check.py --out "$RESULTS" --work "$WORK" "$@" > "$RESULTS_DIR/gpu_check_run.log" 2>&1 || status=1
tail -20 "$RESULTS_DIR/gpu_check_run.log"
echo "=== exit $status; results in $RESULTS" | tee -a "$RESULTS"
exit $status
