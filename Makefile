# Two commands on a fresh clone: `make demo` and `make test`. Each sets up .venv itself.
# torch is installed first, pinned to the version the tests ran with; the pin does not choose
# the build: on Linux x86_64 PyPI's torch wheel is the CUDA build (it runs on a CPU too). For the
# smaller CPU build, install it into .venv first from PyTorch's index (README: "Install"):
#   .venv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
# and the line below finds it installed. The pins are this environment's; the package itself
# asks only for ranges (pyproject.toml).
PYTHON ?= python3
TORCH  := torch==2.13.0
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test test-fast docs clean

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[test,plot]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/bertkit demo --out runs/demo

# A worker a core (at most 4: each holds torch), a test file to one worker (its fixtures built
# once); the conftest gives each worker its share of the threads.
XDIST = -n auto --maxprocesses 4 --dist loadfile

test: $(STAMP)
	$(PY) -m pytest -q -x $(XDIST) --durations=15

# Everything but the integration runs marked `slow`: about 3 minutes on 2 cores.
test-fast: $(STAMP)
	$(PY) -m pytest -q -x $(XDIST) -m 'not slow'

# The documentation site into site/, warnings as errors (as tests/test_docs.py builds it).
docs: $(STAMP)
	$(PY) -m mkdocs build --strict

clean:
	rm -rf $(VENV) runs site
