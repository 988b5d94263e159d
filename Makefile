# specbayes — two commands do all set-up on a fresh machine (python3 + make):
#   make demo   fit the bundled demo data and write the report to ./specbayes-demo/
#   make test   lint and run the test suite (the command CI runs)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-all lint format clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/specbayes demo

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) -m pytest -q -m "not slow" -n 2 --durations=15

test-all: $(STAMP)
	$(PY) -m pytest -q -n 2 --durations=15

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

clean:
	rm -rf $(VENV) specbayes-demo .pytest_cache .ruff_cache
