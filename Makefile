# The two commands of the README: `make demo` (the main job) and `make test`.
# Both install everything they need first, so they work on a fresh machine.
PY ?= python3
STAMP := .venv-installed

.PHONY: install demo test lint bench

$(STAMP): pyproject.toml
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e ".[dev]"
	@# PostgreSQL (Debian) for the paper's SQL baseline in the benchmark and its test
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null)
	@# Chromium (Debian) for the end-to-end widget tests in JupyterLab (tests/e2e)
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null)
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	dni-lab demo

test: $(STAMP)
	$(PY) -m pytest -q
	$(PY) -m pytest -q --nbval-lax --sanitize-with notebooks/nbval_sanitize.cfg notebooks

lint: $(STAMP)
	ruff check .

bench: $(STAMP)
	$(PY) benchmarks/run_benchmarks.py
