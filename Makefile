# Set-up and entry points. `make demo` and `make test` do all the set-up on a fresh machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export SPARK_LOCAL_IP ?= 127.0.0.1

.PHONY: setup demo test test-fast airflow-start airflow-stop clean

$(VENV)/.installed: pyproject.toml constraints.txt scripts/setup.sh
	@scripts/setup.sh $(VENV)

setup: $(VENV)/.installed

demo: setup
	@scripts/demo.sh

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

test-fast: setup  ## the tests that need neither Spark nor Airflow
	$(PY) -m pytest -m "not spark and not airflow" $(PYTEST_ARGS)

airflow-start: setup  ## Airflow standalone on http://127.0.0.1:8080 (SQLite, this project's DAGs)
	@scripts/airflow.sh start

airflow-stop:
	@scripts/airflow.sh stop

clean:
	rm -rf var spark-warehouse metastore_db derby.log
