# kafka-backup: every target sets up what it needs (virtualenv, Python packages,
# Apache Kafka jars from Maven Central) and is safe to run again.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
INSTALLED := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)

.PHONY: help demo test test-unit test-integration lint install bytecode system-deps browser promtool azurite fake-gcs jars docs clean bench bench-quick

help: ## Show the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-17s %s\n", $$1, $$2}'

demo: install bytecode jars ## Run the main job: a full local disaster-recovery drill on two throwaway clusters
	$(BIN)/kafka-backup drill --local --report drill-report.json

# The tests that run promtool fail, rather than skip, when it is missing (tests/support/promtool.py).
test test-unit test-integration: export KBACKUP_REQUIRE_PROMTOOL := 1

# Test workers (pytest-xdist): each starts its own Kafka clusters, S3 server and Spark session, and
# takes whole files (--dist loadfile). Two keep a 2-core machine busy while tests wait on brokers,
# processes and Spark; TEST_WORKERS=0 runs in one process.
# --max-worker-restart=0: a worker that dies ends the run at once, naming the test it ran. Replacing
# it is what xdist 3.8 does by default, and under --dist loadfile that can wait forever at the end of
# the run (pytest-xdist#1378: the dead worker's finished files come back as empty work), which a
# fresh-clone run did here until killed at 2,967 s; a death is a failure either way.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile --max-worker-restart=0

test: install bytecode jars browser promtool azurite fake-gcs ## Run the whole test suite (lint, types, layer contracts, unit and integration tests)
	$(MAKE) --no-print-directory lint
	$(PYTEST)

test-unit: install bytecode promtool ## Unit tests only: no Kafka, no S3, no Spark
	$(PYTEST) -m "not integration"

test-integration: install bytecode jars browser promtool azurite fake-gcs ## Integration tests: real Kafka clusters, moto's S3 server, Azurite, fake-gcs-server, Spark, Chromium
	$(PYTEST) -m integration

lint: install ## ruff (with the banned-api rule), mypy strict and the import-layer contracts
	$(BIN)/ruff check kbackup tests bench
	$(BIN)/ruff format --check kbackup tests bench
	$(BIN)/mypy
	$(BIN)/lint-imports

system-deps: ## Java 17 and Maven (Debian packages), if missing
	@if ! command -v java >/dev/null || ! command -v mvn >/dev/null; then \
	  echo "installing Java 17 and Maven from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openjdk-17-jre-headless maven; \
	fi

browser: ## Debian's headless Chromium, if missing (the drill report's test renders the page in it)
	@if ! command -v chromium >/dev/null; then \
	  echo "installing Chromium from Debian's packages"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	fi

# Only the promtool binary of Debian's prometheus package, into the virtualenv: no Prometheus
# service is installed or started. `promtool test rules` evaluates examples/prometheus-alerts.yaml
# as Prometheus does (tests/support/promtool.py).
promtool: install ## Prometheus' promtool (from Debian's prometheus package, the binary only, into .venv/bin), if missing
	@if ! command -v promtool >/dev/null && ! test -x $(BIN)/promtool; then \
	  echo "installing promtool into $(BIN) from Debian's prometheus package (the binary only)"; \
	  work=$$(mktemp -d) && trap 'rm -rf "$$work"' EXIT && cd "$$work" && \
	  { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; } && \
	  dpkg-deb -x prometheus_*.deb root && "$$work/root/usr/bin/promtool" --version >/dev/null && \
	  cp root/usr/bin/promtool "$(abspath $(BIN))/promtool.partial" && \
	  chmod 755 "$(abspath $(BIN))/promtool.partial" && \
	  mv "$(abspath $(BIN))/promtool.partial" "$(abspath $(BIN))/promtool"; \
	fi

# Azurite, the Azure Storage emulator, from the npm registry at a pinned version, into the cache folder
# beside the Kafka jars (kbackup/sandbox/emulators.py starts its blob service per test worker).
AZURITE_VERSION := 3.37.0
AZURITE_DIR := $(or $(KBACKUP_CACHE_DIR),$(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kafka-backup)/azurite-$(AZURITE_VERSION)
azurite: ## Azurite 3.37.0 (the Azure Storage emulator, from npm) into ~/.cache/kafka-backup, if missing
	@if ! test -x "$(AZURITE_DIR)/node_modules/.bin/azurite-blob"; then \
	  command -v npm >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; }; \
	  echo "installing Azurite $(AZURITE_VERSION) into $(AZURITE_DIR)"; \
	  mkdir -p "$(AZURITE_DIR)" && npm install --prefix "$(AZURITE_DIR)" --no-audit --no-fund --loglevel=error azurite@$(AZURITE_VERSION); \
	fi

# The Cloud Storage emulator the suite starts (kbackup/sandbox/emulators.py): fake-gcs-server, pinned
# there, built once with `go install` into ~/.cache/kafka-backup/fake-gcs-server/VERSION.
fake-gcs: install ## fake-gcs-server (the Cloud Storage emulator of the tests), built with Go, if missing
	$(BIN)/python -m kbackup.sandbox.emulators install-fake-gcs

install: system-deps $(INSTALLED) ## Create .venv and install kafka-backup with its test tools

$(INSTALLED): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	rm -f $(VENV)/.installed-*
	touch $@

# The suite, the benchmarks and the drill start hundreds of Python processes that import this
# package (`python -m kbackup`, spawned worker processes, Spark's Python workers). The editable
# install leaves its modules uncompiled, and where PYTHONDONTWRITEBYTECODE is set, every
# one of those processes compiled them anew: 0.4-0.5 s of a `python -m kbackup` start of 1.6 s.
# compileall writes the bytecode once (again only for files changed since), whatever that variable says.
bytecode: install ## Compile the package's, the tests' and the benchmarks' modules to bytecode once
	$(BIN)/python -m compileall -q kbackup tests bench

jars: install ## Resolve the Apache Kafka versions the suite runs (kbackup.sandbox.jars.SUITE_KAFKA_VERSIONS) from Maven Central into ~/.cache/kafka-backup (once)
	$(BIN)/python -m kbackup.sandbox.jars

bench: install bytecode jars azurite fake-gcs ## Run every benchmark (backup, restore, mapping, reset, accuracy) and write docs/benchmarks.md
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python -m bench all

bench-quick: install bytecode jars azurite fake-gcs ## Every benchmark at smoke sizes; writes nothing into docs/ (logs in bench-results/quick)
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	$(BIN)/python -m bench all --quick

docs: install ## Regenerate docs/cli.md from the CLI and docs/configuration.md from the config models
	$(BIN)/python -m kbackup.cli.reference > docs/cli.md
	$(BIN)/python -m kbackup.cli.config_reference > docs/configuration.md

clean: ## Remove the virtualenv and caches in the repo (not the jar cache)
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
