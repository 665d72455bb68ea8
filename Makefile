# Set-up and everyday commands. Each target creates .venv on first use:
# torch==2.13.0 (CPU wheel) first, so that botorch/ax-platform do not pull a CUDA
# build, then this package in editable mode with its dev extra.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install install-min demo test test-slow test-min lint format docs notebooks bench-speed bofire-stops clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## Compare Chaining-UCB, GP-UCB and stock UCB on a built-in discrete problem.
demo: $(STAMP)
	$(BIN)/python -m benchmarks.demo

## Lint, then the test suite but for the tests marked slow. pytest's exit 5
## (no tests ran) fails too. The suite builds the documentation site with
## `mkdocs build --strict` into a temporary folder (tests/test_docs.py), so a
## broken link fails `make test`. Hypothesis draws the same examples on every
## run (profile "fixed", here and in CI); `HYPOTHESIS_PROFILE=random make test`
## draws new ones (tests/conftest.py).
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -n 2 -m "not slow" --durations=15; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; \
	exit $$rc

## The tests marked slow: end-to-end CLI runs, peak-memory probes, clusters that lose workers, Ax
## loops, the README and the notebooks (what CI runs after `make test`).
test-slow: $(STAMP)
	$(BIN)/python -m pytest -n 2 -m slow --durations=15; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; \
	exit $$rc

## The library's fast tests again in .venv-min, every dependency at its lower
## bound in pyproject.toml (what CI runs last); the benchmarks' tests
## (tests/benchmarks), notebooks and docs excluded, and the Dask tests (dask is
## at its lower bound in .venv too), to keep CI within 15 minutes.
MIN := .venv-min
MIN_STAMP := $(MIN)/.installed

$(MIN_STAMP): pyproject.toml .ci/min_constraints.py
	test -x $(MIN)/bin/python || $(PYTHON) -m venv $(MIN)
	$(MIN)/bin/python -m pip install --quiet --upgrade pip
	$(MIN)/bin/python -m pip install --quiet torch==2.13.0
	$(MIN)/bin/python .ci/min_constraints.py > $(MIN)/constraints.txt
	$(MIN)/bin/python -m pip install --quiet -c $(MIN)/constraints.txt -e ".[dev]"
	touch $(MIN_STAMP)

install-min: $(MIN_STAMP)

test-min: $(MIN_STAMP)
	$(MIN)/bin/python -m pip list --format=freeze | grep -iE '^(numpy|pandas|botorch|gpytorch|ax-platform|torch)=='
	$(MIN)/bin/python -m pytest -n 2 -q -m "not slow" --ignore=tests/benchmarks --ignore=tests/test_distributed.py --ignore=tests/test_tutorials.py --ignore=tests/test_docs.py; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: failing"; exit 1; fi; \
	exit $$rc

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check ax_chaining benchmarks tests docs/_ext

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format ax_chaining benchmarks tests docs/_ext

## Build the documentation site into site/ (--strict: any warning fails).
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --site-dir site

## Execute every tutorial in place at its full size, keeping outputs and figures.
notebooks: $(STAMP)
	cd tutorials && for nb in *.ipynb; do PYTHONPATH=.. ../$(BIN)/jupyter-execute --inplace $$nb || exit 1; done

## Speed and memory of one ChainingUCB step against stock UCB (JSON lines).
bench-speed: $(STAMP)
	$(BIN)/python -m benchmarks speed

## BoFire's convergence criteria on the stopping benchmark's stored runs, in
## BoFire's own environment (.venv-bofire: it pulls jax, cvxpy and shap).
BOFIRE := .venv-bofire

$(BOFIRE)/.installed:
	test -x $(BOFIRE)/bin/python || $(PYTHON) -m venv $(BOFIRE)
	$(BOFIRE)/bin/python -m pip install --quiet torch==2.13.0
	$(BOFIRE)/bin/python -m pip install --quiet "bofire[optimization]==0.5.0"
	touch $@

bofire-stops: $(BOFIRE)/.installed
	$(BOFIRE)/bin/python benchmarks/bofire_stops.py benchmarks/results/stopping.jsonl.gz benchmarks/results/stopping_bofire.jsonl.gz

clean:
	rm -rf $(VENV) $(MIN) $(BOFIRE) .pytest_cache .ruff_cache .hypothesis site
