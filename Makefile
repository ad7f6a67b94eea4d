# The README's two commands: `make demo` and `make test`. Both work on a fresh Debian 12 with Python 3.11:
# they create .venv, install the project, and install the Debian packages the tests need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# the simulator modules with a .pxd beside them are compiled with Cython (goodput/simulator/compiled.py)
BUILT  := $(VENV)/.built-stamp
PXD    := $(wildcard goodput/simulator/*.pxd)
APT    := DEBIAN_FRONTEND=noninteractive apt-get -y -qq -o=Dpkg::Use-Pty=0

.PHONY: demo test bench build lint deps-debian deps-test clean

$(STAMP): pyproject.toml setup.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
		echo "installing python3-venv (Debian package)"; \
		apt-get update -qq && $(APT) install python3-venv >/dev/null && $(PYTHON) -m venv $(VENV); }
	@# a C compiler and Python's headers compile the simulator; without them it runs as pure Python, slower
	@if ! command -v cc >/dev/null || ! $(BIN)/python -c "import os, sysconfig, sys; \
		sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))"; then \
		echo "installing gcc and python3-dev (Debian packages)"; \
		apt-get update -qq && $(APT) install gcc python3-dev >/dev/null || echo "warning: no C toolchain"; \
	fi
	$(BIN)/python -m pip install -q --upgrade pip
	@# the editable install compiles the simulator in place (setuptools builds extensions in place in editable mode)
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# Compile again only when a module is not compiled or an edit made its build stale (a stale build refuses to
# import), never right after the install above, which has just compiled everything. Without a C compiler the
# attempt fails and every module runs as Python (setup.py: all or nothing).
NEEDS_BUILD := $(BIN)/python -c "import runpy, sys; \
	sys.exit(set(runpy.run_path('goodput/simulator/compiled.py')['build_status']().values()) == {'compiled'})"
$(BUILT): $(STAMP) $(PXD) $(PXD:.pxd=.py)
	@if $(NEEDS_BUILD); then echo "$(BIN)/python setup.py -q build_ext --inplace"; \
		$(BIN)/python setup.py -q build_ext --inplace; fi
	@touch $(BUILT)

build: $(BUILT)

# promtool / amtool and the real servers, from Debian's packages, when missing.
deps-debian:
	@if ! command -v promtool >/dev/null || ! command -v amtool >/dev/null; then \
		echo "installing prometheus and prometheus-alertmanager (Debian packages)"; \
		apt-get update -qq && $(APT) install prometheus prometheus-alertmanager >/dev/null; \
	fi
	@command -v jsonnet >/dev/null || { echo "installing jsonnet (Debian package: C++ jsonnet, tests/monitoring/test_mixin.py)"; \
		apt-get update -qq && $(APT) install jsonnet >/dev/null; }

# the tests also open pages in headless Chromium (tests/loadtest/test_report.py) and read a long-term metrics store,
# VictoriaMetrics (tests/victoria.py; docs/metrics-stores.md)
deps-test: deps-debian
	@command -v chromium >/dev/null || { echo "installing chromium (Debian package)"; \
		apt-get update -qq && $(APT) install chromium >/dev/null; }
	@if ! command -v victoria-metrics >/dev/null; then \
		echo "installing victoria-metrics (Debian package)"; \
		apt-get update -qq && $(APT) install victoria-metrics >/dev/null; \
	fi

demo: $(BUILT) deps-debian
	$(BIN)/goodput demo

# PYTEST_ARGS: extra pytest arguments (.ci/run adds a JUnit report). TEST_WORKERS: test modules run in this many
# processes at once (pytest-xdist), dealt out in the order tests/conftest.py gives them (long modules first), not
# xdist's largest-module-first. Most tests wait on servers: on the 2-core development box 2 workers kept the CPU
# 121% busy and took 948 s, 4 kept it 176% busy and took 719 s (6 December)
TEST_WORKERS ?= 4
test: $(BUILT) deps-test
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

bench: $(BUILT)
	$(BIN)/python -m benchmarks

# ruff (style, imports, the complexity ceiling) over everything; mypy over the package ([tool.mypy] in pyproject.toml)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache goodput/simulator/*.c goodput/simulator/*.so
