# Two commands for a new user:
#   make demo   set everything up, start a private RabbitMQ on loopback, seed sample queues, back them up and
#               restore them into another vhost with `airflow dags test` (scripts/demo.py)
#   make test   install what the tests need and run them (CI runs exactly this)
# and for the docs:
#   make docs          render the diagrams (docs/diagrams/*.dot -> .svg; the backup DAG's from the DAG itself)
#   make screenshots   take the documented screenshots anew from real runs (Airflow, RabbitMQ, headless Chromium)

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed

.PHONY: setup demo test docs screenshots bench broker-start broker-stop clean

setup: $(STAMP)

# The C accelerator is built by the (editable) install: rebuild when its sources change.
$(STAMP): pyproject.toml setup.py $(wildcard airflow_rbak/codec/_speedups*.[ch])
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test]'
	# older installs left their metadata beside the package, where a checkout on sys.path shows it twice (setup.py)
	rm -rf airflow_rbak.egg-info
	touch $(STAMP)

demo:
	scripts/system-deps.sh demo
	$(MAKE) --no-print-directory setup
	$(PY) scripts/demo.py

test:
	scripts/system-deps.sh test
	$(MAKE) --no-print-directory setup
	VENV=$(VENV) scripts/test.sh

docs:
	scripts/system-deps.sh docs
	$(MAKE) --no-print-directory setup
	$(PY) scripts/diagrams.py

# tests/ui/test_screenshots.py, test_browser.py and test_view_browser.py with RBAK_SCREENSHOTS=1 write into docs/images/ (RBAK_CI:
# a missing browser fails rather than leaving the old pictures)
screenshots:
	scripts/system-deps.sh test
	$(MAKE) --no-print-directory setup
	RBAK_SCREENSHOTS=1 RBAK_CI=1 $(VENV)/bin/pytest -q -p no:cacheprovider tests/ui/test_screenshots.py tests/ui/test_browser.py tests/ui/test_view_browser.py

bench: setup
	$(PY) bench/codec.py
	$(PY) bench/validate.py
	$(PY) bench/spark_verify.py

broker-start:
	scripts/rabbitmq.sh start

broker-stop:
	scripts/rabbitmq.sh stop

clean:
	-scripts/rabbitmq.sh stop
	rm -rf .run $(VENV)
