# The two commands a newcomer needs: `make demo` (a real RL run) and `make test`.
# Each creates .venv with pinned dependencies if it is missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export OMP_NUM_THREADS ?= 2
export RAY_AUTH_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false

.PHONY: demo test test-slow test-portability test-floor floor-venv test-engines soak bench venv vllm-venv clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/heron demo

# Two workers: the tier waits on child processes much of the time (tests/conftest.py groups the tests).
test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow

# The numerics- and timing-sensitive tests on PyTorch's portable and AVX2 CPU kernels, then
# with every core kept busy (tests/busy_load.py).
PORTABLE := $(BIN)/python -m pytest -q -p no:cacheprovider -m "portability and not slow"
test-portability: $(STAMP)
	ATEN_CPU_CAPABILITY=default $(PORTABLE)
	ATEN_CPU_CAPABILITY=avx2 $(PORTABLE)
	$(BIN)/python tests/busy_load.py -- $(PORTABLE)

# The default tier on the oldest torch and transformers pyproject.toml admits (the GPU machines' image
# has them), in its own venv: requirements.txt's pins with both at their floors
# (tests/floor_requirements.py). torch 2.11 comes from PyPI as its CUDA build (~3 GB, a few minutes).
# FLOOR_PYTHON picks the venv's interpreter (the GPU image's is 3.12); a venv on another one is remade.
# test-floor asks it for its version (an interpreter that does not run stops it with one line) and
# builds the venv in a sub-make told that version (FLOOR_TAG; floor-venv is that sub-make's target),
# so reading this file runs no Python.
FLOOR_PYTHON ?= $(PYTHON)
FLOOR_VENV   := .venv-floor
FLOOR_TAG    ?=
FLOOR_STAMP  := $(FLOOR_VENV)/.installed-$(FLOOR_TAG)
FLOOR_VERSION := import sys; print("py%d.%d" % sys.version_info[:2])

$(FLOOR_STAMP): requirements.txt pyproject.toml tests/floor_requirements.py | $(STAMP)
	if [ "$$($(FLOOR_VENV)/bin/python -V 2>&1)" != "$$($(FLOOR_PYTHON) -V)" ]; then \
	  rm -rf $(FLOOR_VENV) && $(FLOOR_PYTHON) -m venv $(FLOOR_VENV); fi
	$(FLOOR_VENV)/bin/pip install -q --upgrade pip
	$(BIN)/python tests/floor_requirements.py > $(FLOOR_VENV)/requirements.txt
	$(FLOOR_VENV)/bin/pip install -q -r $(FLOOR_VENV)/requirements.txt
	$(FLOOR_VENV)/bin/pip install -q --no-deps -e .
	touch $(FLOOR_STAMP)

floor-venv: $(FLOOR_STAMP)

test-floor: $(STAMP)
	@tag=$$($(FLOOR_PYTHON) -c '$(FLOOR_VERSION)' 2>/dev/null) || { echo "make test-floor: FLOOR_PYTHON=$(FLOOR_PYTHON) does not run a Python; set it to an interpreter's path, e.g. FLOOR_PYTHON=$$(command -v python3)" >&2; exit 2; }; \
	  $(MAKE) --no-print-directory floor-venv FLOOR_TAG=$$tag
	$(FLOOR_VENV)/bin/python -m pytest -q -p no:cacheprovider -n 2 --dist loadfile

# Long soak (not in any other tier): 10,000 random residency sequences, 50 SIGKILLed
# training runs resumed and compared bit for bit, 50 kills per save mode of a checkpoint writer.
soak: $(STAMP)
	OMP_NUM_THREADS=1 HERON_SOAK=1 $(BIN)/python -m pytest -q -s -p no:cacheprovider -m slow -o timeout=0 --durations=0 \
	  tests/lifecycle/test_residency_machine.py::test_random_operation_sequences_long \
	  tests/integration/test_checkpoint_resume.py::test_sigkilled_training_resumes_exactly_with_load_auto \
	  tests/integration/test_checkpoint_crash.py::test_sigkill_during_saves_many_trials

# VS_TRL_FLAGS=--no-venv skips the TRL side when .venv-trl is missing (CI); the default creates it (~2 min).
bench: $(STAMP)
	for b in bench/engine.py bench/decode_batches.py bench/old_logprobs.py bench/shared_prompts.py bench/answer_head.py bench/packing.py bench/row_padding.py bench/last_position.py bench/logprob_memory.py bench/precision.py bench/attention_kernel.py bench/optimizer.py bench/activation_checkpointing.py bench/residency.py bench/reward_calls.py bench/checkpoint.py bench/async_save_threads.py bench/async.py bench/overlap_local.py bench/colocated_ray.py bench/throughput.py bench/zero_advantage.py bench/rank_balance.py bench/fsdp_precision.py bench/fsdp_reshard.py bench/compile.py bench/vllm_push.py; do $(BIN)/python $$b || exit 1; done
	$(BIN)/python bench/vs_trl.py $(VS_TRL_FLAGS)
	$(BIN)/python bench/vs_trl.py $(VS_TRL_FLAGS) --instruction
	$(BIN)/python bench/vs_trl.py $(VS_TRL_FLAGS) --models 3M,25M --precision bf16 --compile

# The vLLM rollout server's own venv (vLLM pins transformers<5.20; heron's venv cannot hold it).
# ~3.5 GB, several minutes. Its install brings torchvision/torchaudio/torchcodec builds that fail
# at import on CPU; nothing in heron's launcher needs them, so they are removed.
VLLM_VENV  := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

vllm-venv: $(VLLM_STAMP)

$(VLLM_STAMP): requirements-vllm.txt
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --upgrade pip
	$(VLLM_VENV)/bin/pip install -q -r requirements-vllm.txt
	$(VLLM_VENV)/bin/pip uninstall -q -y torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/python -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)"
	touch $(VLLM_STAMP)

test-engines: $(STAMP) $(VLLM_STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m engines

clean:
	rm -rf runs .pytest_cache
