# make demo: set up .venv and run the seed examples; make test: the CPU test suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m opendnn.demo

test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist worksteal tests

bench: $(STAMP)
	$(PY) -m opendnn.bench all

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
