# make demo: set up .venv and run the seed examples; make test: lint, then the CPU test suite;
# make lint: ruff's linter and formatter check on src/, tests/ and bench/.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint format bench clean

$(STAMP): pyproject.toml requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -e .
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m opendnn.demo

test: lint
	$(PY) -m pytest -q -n 2 --dist worksteal tests

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench

format: $(STAMP)
	$(VENV)/bin/ruff check --fix src tests bench
	$(VENV)/bin/ruff format src tests bench

bench: $(STAMP)
	$(PY) -m opendnn.bench all

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info
