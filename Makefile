# The two commands a newcomer needs: `make demo` (a real RL run) and `make test`.
# Each creates .venv with pinned dependencies if it is missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export OMP_NUM_THREADS ?= 2
export RAY_AUTH_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false

.PHONY: demo test test-slow test-engines bench venv vllm-venv clean

venv: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/heron demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow

bench: $(STAMP)
	for b in bench/engine.py bench/residency.py bench/checkpoint.py bench/async.py bench/colocated_ray.py; do $(BIN)/python $$b || exit 1; done

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
