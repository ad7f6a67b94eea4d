# The README's two commands: `make demo` and `make test`. Both work on a fresh Debian 12 with Python 3.11:
# they create .venv, install the project, and install the Debian packages the tests need.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
APT    := DEBIAN_FRONTEND=noninteractive apt-get -y -qq -o=Dpkg::Use-Pty=0

.PHONY: demo test bench lint deps-debian clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
		echo "installing python3-venv (Debian package)"; \
		apt-get update -qq && $(APT) install python3-venv >/dev/null && $(PYTHON) -m venv $(VENV); }
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $(STAMP)

# promtool / amtool and the real servers, from Debian's packages, when missing.
deps-debian:
	@if ! command -v promtool >/dev/null || ! command -v amtool >/dev/null; then \
		echo "installing prometheus and prometheus-alertmanager (Debian packages)"; \
		apt-get update -qq && $(APT) install prometheus prometheus-alertmanager >/dev/null; \
	fi

demo: $(STAMP) deps-debian
	$(BIN)/goodput demo

test: $(STAMP) deps-debian
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m benchmarks

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .ruff_cache
