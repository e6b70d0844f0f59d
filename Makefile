# Two entry points for a fresh machine:
#   make demo  - set up .venv and run the main job (policies compared on the bundled Philly workload)
#   make test  - set up .venv and run the test suite (default + slow + ray markers that fit in CI)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[all]"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/tessera demo

test: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -n 2 -m "not slow and not ray and not browser"
	HYPOTHESIS_PROFILE=ci $(BIN)/pytest -m "slow or ray or browser" || [ $$? -eq 5 ]

test-fast: $(STAMP)
	$(BIN)/pytest -n 2 -m "not slow and not ray and not browser"

lint: $(STAMP)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) runs
