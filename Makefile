# grpo-sweeps: `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed
SWEEP ?=
ARGS ?=

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		$(PY) -m pip install -q torch; \
	else \
		$(PY) -m pip install -q "torch==$(TORCH_VERSION)"; \
	fi
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP) ## create .venv in the checkout and install the project (CPU torch where there is no GPU)

demo: $(STAMP) ## run the CPU demo sweep (tiny model, toy task) and plot it
	$(PY) launch.py -m +experiment=demo
	$(PY) -m analysis plots --sweep "$$(ls -d outputs/demo/*/ | sort | tail -n 1)"

sweep: $(STAMP) ## run a sweep: make sweep ARGS="off_policy.epochs=1,2 model=tiny data=toy rollout=hf"
	$(PY) launch.py -m $(ARGS)

plots: $(STAMP) ## figures + report.md of the latest sweep (SWEEP="dir [dir2 ...]" to choose and overlay)
	$(PY) -m analysis plots $(foreach s,$(SWEEP),--sweep $(s))

watch: $(STAMP) ## live view of the latest sweep, running or finished (SWEEP=dir to choose), then its summary
	$(PY) -m analysis watch $(SWEEP)

test: $(STAMP) ## run the whole test suite (slow and SLURM tests included)
	$(PY) -m pytest -q

lint: $(STAMP) ## ruff over the project
	$(VENV)/bin/ruff check grpo analysis hydra_plugins tests bench launch.py

clean: ## remove outputs, caches and the virtual environment
	rm -rf outputs .cache .pytest_cache .ruff_cache $(VENV)

.PHONY: help install demo sweep plots watch test lint clean
