# The two commands of the README, plus helpers. Each target installs what it needs into .venv first.
#   make run    execute every notebook headless and write build/report/ (CPU + recorded data without a GPU)
#   make test   run pytest, which also executes the notebooks
SHELL := /bin/bash
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# On a machine without an NVIDIA driver torch 2.13.0 is pinned: on our CI machines that is a CPU wheel on
# local disk. With a driver, pip keeps (or fetches) a CUDA build; override with `make TORCH_SPEC=... run`.
TORCH_SPEC ?= $(shell command -v nvidia-smi >/dev/null 2>&1 && echo 'torch>=2.5' || echo 'torch==2.13.0')
STAMP  := $(VENV)/.installed
# JupyterLab refuses to start as root unless told to (containers, CI machines, lent GPU machines run as root)
LAB_FLAGS ?= $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: run test test-gpu lab bench-kmeans bench-gemm soak notebooks clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo ">> installing into $(VENV) ($(TORCH_SPEC))"
	@$(PY) -m pip install -q --upgrade pip 2>&1 | grep -v '^WARNING: Location' || true
	@set -o pipefail; $(PY) -m pip install -q "$(TORCH_SPEC)" 2>&1 | { grep -v '^WARNING: Location' || true; }
	@set -o pipefail; $(PY) -m pip install -q -e '.[dev]' 2>&1 | { grep -v '^WARNING: Location' || true; }
	@touch $(STAMP)

run: $(STAMP)
	$(PY) -m workbook.report

test: $(STAMP)
	$(PY) -m pytest

test-gpu: $(STAMP)
	$(PY) -m pytest -m gpu

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/ $(LAB_FLAGS)

# re-execute the notebooks in place, so that their committed outputs are current
notebooks: $(STAMP)
	$(PY) -m workbook.report --inplace

bench-kmeans: $(STAMP)
	$(PY) -m kmeans_kernels.bench

bench-gemm: $(STAMP)
	$(PY) -m gemm_kernels.bench

# GPU: 10,000 checked calls on random shapes, memory flat, a Lloyd loop in a user's CUDA graph (tools/soak.py)
soak: $(STAMP)
	$(PY) tools/soak.py

clean:
	rm -rf build $(VENV)
