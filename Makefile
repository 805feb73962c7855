# The two commands a newcomer needs: `make demo` (a real RL run) and `make test`.
# Each creates .venv with pinned dependencies if it is missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
export OMP_NUM_THREADS ?= 2
export RAY_AUTH_MODE ?= disabled
export TOKENIZERS_PARALLELISM ?= false

.PHONY: demo test test-slow bench venv clean

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

clean:
	rm -rf runs .pytest_cache
