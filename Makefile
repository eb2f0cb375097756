# labkit — the two commands that matter: `make lab` and `make test` (see README).
SHELL := /bin/bash
# Every variable given on make's command line or from the environment is data, never code: its text
# is kept as given (make would otherwise expand a $(shell ...) in it, even only to export it) and
# reaches the recipes through the environment, read there as "$$VAR" (quoted; never pasted on a shell
# line), so a report named `...` or $(...) runs nothing (issue 61).
NSYS_UI_PORT := $(if $(filter command line environment,$(origin PORT)),$(value PORT),6080)
USER_VARIABLES := VENV MODE PORT IP EXTRAS TORCH_SPEC PYTHON PYTEST_ARGS REPORT DRY_RUN CONDA_PREFIX \
  CONDA_DEFAULT_ENV PYTHONPATH JOBS
$(foreach v,$(filter-out MAKEFLAGS MFLAGS SHELL,$(.VARIABLES)),$(if $(or $(filter command line,$(origin $v)),\
  $(and $(filter environment,$(origin $v)),$(filter $v,$(USER_VARIABLES)))),\
  $(eval override $v := $$(value $v))$(eval export $v)))
PYTHON ?= python3
# An active conda environment (other than base) is used as it is (GPU workshop machines:
# environment.yml); otherwise a project venv. `make lab VENV=/path/to/env` names any existing one.
VENV ?= $(if $(and $(CONDA_PREFIX),$(filter-out base,$(CONDA_DEFAULT_ENV))),$(CONDA_PREFIX),.venv)
MODE ?= full
PORT ?= 8888
IP ?= 127.0.0.1
# What the project venv installs: the test tools, JupyterLab (to open the executed lab; the browser
# tests) and CPU ONNX Runtime. On a GPU machine with a venv use EXTRAS=test,gpu,jupyter
# (onnxruntime-gpu); never cpu and gpu both, they ship the same files.
EXTRAS ?= test,cpu,jupyter
# CPU machines without a GPU take the CPU build of torch; GPU machines should use
# environment.yml (conda) or set TORCH_SPEC to the CUDA build they want.
TORCH_SPEC ?= torch==2.13.0
PY := $(VENV)/bin/python
export PY VENV MODE PORT IP EXTRAS TORCH_SPEC PYTHON NSYS_UI_PORT
# An environment this Makefile did not create (conda, or any VENV other than .venv) already holds
# its stack (a CUDA torch, onnxruntime-gpu): labkit goes in with --no-deps, so pip never replaces
# a CUDA package with its CPU twin.
EXISTING := $(if $(filter .venv,$(VENV)),,1)
# The project venv records its install inside itself; for an existing environment the record is
# this checkout's (.make/), so two checkouts sharing one environment never skip each other's.
# The record names the extras, so asking for other extras installs them.
comma := ,
export STAMP := $(if $(EXISTING),.make/installed$(subst /,_,$(abspath $(VENV))),$(VENV)/.labkit-installed.$(subst $(comma),_,$(EXTRAS)))
ifeq ($(EXISTING),1)
# An existing environment may already hold labkit from another checkout (a shared venv): it is
# left pointing there, and this checkout's code comes first through PYTHONPATH (kernels and the
# application inherit it), so one checkout's make never re-points another's environment.
export PYTHONPATH := $(CURDIR)$(if $(PYTHONPATH),:$(PYTHONPATH))
endif

.PHONY: lab test setup-lab setup-test jupyter browser nsys-ui doctor env reset clean-reports timings container container-run container-smoke

$(STAMP): pyproject.toml
ifeq ($(EXISTING),1)
	@test -x "$$PY" || { echo "make: $$PY is not there: activate the environment or pass VENV=" >&2; exit 1; }
	@where=$$(cd / && env -u PYTHONPATH "$$PY" -c "import labkit, pathlib; print(pathlib.Path(labkit.__file__).resolve().parents[1])" 2>/dev/null); \
	if [ -z "$$where" ]; then echo "$$PY -m pip install -q --no-deps -e ."; "$$PY" -m pip install -q --no-deps -e . || exit 1; \
	elif [ "$$where" != "$$(pwd -P)" ]; then echo "make: $$PY has labkit from $$where; left as it is (this checkout runs through PYTHONPATH)"; fi
	@"$$PY" -m labkit doctor >/dev/null || echo "make: labkit's doctor reports a problem in $$PY (a missing dependency?): run $$PY -m labkit doctor" >&2
else
	@test -x "$$PY" || "$$PYTHON" -m venv "$$VENV"
	@"$$PY" -m pip install -q --upgrade pip
	@"$$PY" -c "import torch" 2>/dev/null || "$$PY" -m pip install -q "$$TORCH_SPEC"
	"$$PY" -m pip install -q -e ".[$$EXTRAS]"
endif
	@mkdir -p "$$(dirname "$$STAMP")" && touch "$$STAMP"

env: $(STAMP)

# Both install the system parts they need first (scripts/setup: nsys; for the tests also Chromium and
# the GUI's packages), each said in one line with its cost, or one line saying what is missing.
# They come before the venv, so a part that is missing is said before any work.
setup-lab:
	@bash scripts/setup lab

setup-test:
	@bash scripts/setup test

# lab and test byte-compile the project first (a second or less; nothing when up to date): where
# PYTHONDONTWRITEBYTECODE is set, as in many containers and on our VMs, Python would otherwise compile
# labkit's modules again in every process the lab and the tests start (about 30 ms a command, about 0.2 s
# a kernel that imports labbook); a checkout it cannot write is left as it is. The line is written in
# both recipes, not as a make variable: a variable given on make's command line would become code there.
lab: setup-lab $(STAMP)
	@"$$PY" -m compileall -qq labkit labbook source_code || true
	"$$PY" scripts/run_lab.py --mode "$$MODE"

# Two phases (tests/conftest.py marks which): most tests, the lab's long runs too, run on every core at
# once (pytest-xdist, JOBS= workers, default the machine's cores, one file per worker, the longest files first:
# their tests' `minutes` markers, tests/conftest.py); then those whose
# assertions depend on how fast things ran beside each other (profiled programs and their judgement,
# compared measurements, ranks, Dask, the browser, kills and interrupts of nsys) run one at a time. PYTEST_ARGS= goes to both (e.g. -k NAME), split
# as a shell would split it, by pytest itself (PYTEST_ADDOPTS), never run as code.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
export JOBS
test: setup-test $(STAMP)
	@"$$PY" -m compileall -qq labkit labbook source_code || true
	@set +e; export PYTEST_ADDOPTS="$$PYTEST_ARGS $${PYTEST_ADDOPTS:-}"; t=$$(date +%s); \
	"$$PY" -m pytest -q -rs --durations=10 -m "not serial" -n "$$JOBS" --dist loadfile --no-loadscope-reorder; a=$$?; \
	echo "make test: the parallel phase took $$(( $$(date +%s) - t )) s"; t=$$(date +%s); \
	"$$PY" -m pytest -q -rs --durations=15 -m serial; b=$$?; \
	echo "make test: the serial phase took $$(( $$(date +%s) - t )) s"; \
	if [ $$a -eq 5 ] && [ $$b -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	for rc in $$a $$b; do [ $$rc -eq 0 ] || [ $$rc -eq 5 ] || exit $$rc; done

# JupyterLab on notebooks/ (EXECUTED=1: on the notebooks make lab executed, <reports>/notebooks/, with
# their outputs): MODE=small|full, PORT=, IP= (0.0.0.0 for every interface),
# JUPYTER_TOKEN= (generated when unset); prints the URL with its token. Works as root. Installs the
# kernel "Python (labkit nsys)" into the environment first (%%nsys records cells of it).
jupyter: $(STAMP)
	@"$$PY" -c "import jupyterlab, ipywidgets" 2>/dev/null || "$$PY" -m pip install -q $(if $(EXISTING),jupyterlab ipywidgets,-e ".[jupyter]")
	@"$$PY" -m labkit kernel install --sys-prefix >/dev/null
	@"$$PY" scripts/jupyter_lab.py --mode "$$MODE" --port "$$PORT" --ip "$$IP" $(if $(filter 1 yes true,$(EXECUTED)),--executed)

# Every notebook, then its exercise solutions, run in headless Chromium through JupyterLab
# (scripts/browser_lab.py --solutions; CI runs tests/test_browser.py on 00, 01 and 07): needs
# `apt-get install chromium chromium-driver`. One JSON line per notebook; screenshots: reports/browser/.
browser: $(STAMP)
	@"$$PY" -c "import jupyterlab, ipywidgets, selenium" 2>/dev/null || "$$PY" -m pip install -q $(if $(EXISTING),jupyterlab ipywidgets selenium,-e ".[jupyter,test]")
	"$$PY" scripts/browser_lab.py all --solutions --mode small

# The real Nsight Systems GUI (nsys-ui) of REPORT in the browser: a virtual display (Xvfb), a VNC
# server on the loopback (x11vnc) and noVNC (websockify) on PORT (default 6080; IP=0.0.0.0 for every
# interface). Prints the URL; Ctrl-C stops it all. Works as root. Needs nsys (scripts/install-nsys) and
# `apt-get install xvfb xauth xdotool x11vnc novnc websockify`; no Python package (python3 alone).
REPORT ?= reports/reference/gui/baseline.nsys-rep
export REPORT
nsys-ui:
	@"$$PYTHON" scripts/nsys_ui.py --port "$$NSYS_UI_PORT" --ip "$$IP" -- "$$REPORT"

doctor: $(STAMP)
	"$$PY" -m labkit doctor --probe

# Back to a fresh lab, keeping caches (data/ clips, converted models): removes the ledger,
# profiles, results, videos and executed notebooks under $LABKIT_REPORTS (default reports/),
# naming each; committed reference results stay. DRY_RUN=1 only lists them.
reset:
	@PYTHONPATH="$$(pwd)$${PYTHONPATH:+:$$PYTHONPATH}" "$$PYTHON" scripts/reset_lab.py $(if $(DRY_RUN),--dry-run)

clean-reports: reset

# The measured timing plan: every notebook headless in MODE, seconds per notebook in
# $LABKIT_REPORTS/notebooks/timings.json (notebooks/README.md, "Timing plan").
timings: $(STAMP)
	"$$PY" scripts/run_lab.py --mode "$$MODE"

# The workshop image (Containerfile; docs/container.md). VARIANT=gpu|cpu
# (default: gpu where nvidia-smi lists a GPU), CONTAINER_ENGINE=podman|docker, IMAGE=, BASE=.
container:
	@bash scripts/container.sh build

# JupyterLab in the image, as `make jupyter`: MODE=, PORT=, IP=, JUPYTER_TOKEN= (from the
# environment; passed by name, never on a command line), GUI_PORT= (6080, the Nsight GUI),
# REPORTS= (host folder kept as /reports, default reports/), GPU_METRICS=1 (--cap-add SYS_ADMIN).
container-run:
	@bash scripts/container.sh run

# What CI runs (.ci/run): build the CPU image from an mmdebstrap base and smoke-test it offline.
container-smoke:
	@bash scripts/container_smoke.sh
