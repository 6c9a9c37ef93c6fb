# gpuobs — the two commands: `make demo` (try it) and `make test` (check it).
# Everything runs in .venv, created on first use from the pinned requirements files.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
MANAGE := $(PY) manage.py
DEMO_ADDRESS ?= 127.0.0.1:8000

# Tests use real services: PostgreSQL (pytest-django makes test_<name> from DATABASE_URL) and
# Redis db 15. DATABASE_URL from the environment wins; Redis comes only from GPUOBS_TEST_REDIS_URL,
# so a REDIS_URL meant for a real deployment is never written to by the tests.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
GPUOBS_TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
# The suite runs on PYTEST_WORKERS processes (pytest-xdist), each with its own test database and
# Redis db (tests/support/parallel.py); PYTEST_WORKERS=0 runs it in one. One more than the cores:
# many tests wait on programs they started (3 workers on 2 cores: 585 s against 706 s with 2).
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc 2>/dev/null || echo 1) + 1 )))
PYTEST_ARGS ?=

.PHONY: help demo demo-prepare demo-serve install install-dev test lint bench clean

help:
	@echo "make demo   set up and serve gpuobs on http://$(DEMO_ADDRESS) (embedded: SQLite, no Redis)"
	@echo "make test   run the test suite against PostgreSQL and Redis"
	@echo "make lint   ruff, Django's checks, missing migrations"
	@echo "make bench  run every bench/*.py (not the shared bench/_*.py)"

# --- environment ---------------------------------------------------------------------------------

$(PY):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "gpuobs needs Python >= 3.11; set PYTHON=/path/to/python3.11 or newer"; exit 1; }
	@$(PYTHON) -m venv $(VENV) || { rm -rf $(VENV); \
		echo "could not create $(VENV): on Debian/Ubuntu, apt-get install python3-venv"; exit 1; }

$(VENV)/.installed-runtime: requirements.txt | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@touch $@

$(VENV)/.installed-dev: requirements.txt requirements-tracing.txt requirements-dev.txt | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@ $(VENV)/.installed-runtime

install: $(VENV)/.installed-runtime
install-dev: $(VENV)/.installed-dev

# --- demo ----------------------------------------------------------------------------------------
# demo-prepare gets the embedded instance ready; demo-serve serves it. Extend demo-prepare (e.g.
# creating the demo cluster) rather than demo-serve.

demo: demo-prepare demo-serve

demo-prepare: install
	$(MANAGE) migrate --noinput
	$(MANAGE) ensure_admin

# The demo cluster (128 simulated A100 nodes) runs cycles in this process while a child serves
# the UI; with REDIS_URL set, Celery worker and beat children run the cycles instead.
demo-serve: install
	@echo "gpuobs: serving on http://$(DEMO_ADDRESS)/ (Ctrl-C stops it)"
	$(MANAGE) demo --serve $(DEMO_ADDRESS)

# --- checks --------------------------------------------------------------------------------------

# pytest exits 5 when it collected no test: a suite that ran nothing has not passed.
test: install-dev
	@DATABASE_URL="$${DATABASE_URL:-$(TEST_DATABASE_URL)}" REDIS_URL="$(GPUOBS_TEST_REDIS_URL)" \
		$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS); status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: FAILED, pytest collected no tests"; fi; \
	exit $$status

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(MANAGE) check --fail-level WARNING
	$(MANAGE) makemigrations --check --dry-run

bench: install-dev
	@scripts=$$(ls bench/[!_]*.py 2>/dev/null); \
	if [ -z "$$scripts" ]; then echo "make bench: no bench/*.py yet"; exit 0; fi; \
	failed=""; goals=$$(mktemp); \
	for script in $$scripts; do \
		echo "=== $$script"; \
		{ DJANGO_SETTINGS_MODULE=gpuobs.settings PYTHONPATH=. $(PY) $$script || echo "FAILED $$script"; } \
			| tee -a $$goals; \
	done; \
	echo "=== every figure against its goal (bench/_goals.py)"; grep '^goal:' $$goals || echo "(none)"; \
	failed=$$(grep '^FAILED ' $$goals | cut -d' ' -f2 | tr '\n' ' '); rm -f $$goals; \
	if [ -n "$$failed" ]; then echo "make bench: FAILED: $$failed"; exit 1; fi; \
	echo "make bench: every script ran ($$(echo $$scripts | wc -w))"

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .ruff_cache
