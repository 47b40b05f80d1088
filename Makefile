# Two commands for a new user:
#   make demo   set everything up, start a private RabbitMQ on loopback, back up sample queues
#   make test   install what the tests need and run them (CI runs exactly this)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: setup demo test bench broker-start broker-stop clean

setup: $(STAMP)

$(STAMP): pyproject.toml setup.py airflow_rbak/codec/_speedups.c
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test]'
	touch $(STAMP)

demo: setup
	$(PY) scripts/demo.py

test: setup
	$(VENV)/bin/pytest -q

bench: setup
	$(PY) bench/codec.py
	$(PY) bench/spark_verify.py

broker-start:
	scripts/rabbitmq.sh start

broker-stop:
	scripts/rabbitmq.sh stop

clean:
	-scripts/rabbitmq.sh stop
	rm -rf .run $(VENV)
