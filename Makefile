# labkit — the two commands that matter: `make lab` and `make test` (see README).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
MODE ?= full
# CPU machines without a GPU take the CPU build of torch; GPU machines should use
# environment.yml (conda) or set TORCH_SPEC to the CUDA build they want.
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.labkit-installed

.PHONY: lab test jupyter doctor env clean-reports

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e ".[test]"
	@touch $(STAMP)

env: $(STAMP)

lab: $(STAMP)
	$(PY) scripts/run_lab.py --mode $(MODE)

test: $(STAMP)
	@set +e; $(PY) -m pytest -q -rs $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; exit $$rc

jupyter: $(STAMP)
	@$(PY) -c "import jupyterlab" 2>/dev/null || $(PY) -m pip install -q -e ".[jupyter]"
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks

doctor: $(STAMP)
	$(PY) -m labkit doctor --probe
