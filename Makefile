# gpu-finops — the two commands a new user needs are `make demo` and `make test`.
# Each creates .venv if missing and installs the project with the pinned constraints.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
export DAGSTER_HOME := $(CURDIR)/.dagster_home

.PHONY: demo test fuzz ui bench lock clean focus-check focus-validate

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt -e ".[dev]"
	@touch $(STAMP)

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	@mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $@

# Write the bundled scenario to .finops/demo and run the whole graph on it.
demo: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/finops demo

# The suite in TEST_WORKERS processes (pytest-xdist), a test file per process at a time: most tests
# run the pipeline, whose Python (Dagster, polars) holds one core, so two processes suit a 2-core
# machine (three were measured slower: 25 min against 23). TEST_WORKERS=0 runs it in this process.
# Files go out in collection order (tests/conftest.py puts the slowest first): xdist's default
# reorder, files with the most tests first, left Spark's six long tests for the end (21 min).
# The 20 slowest tests are listed at the end, so a CI log says where the time went.
TEST_WORKERS ?= 2
test: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=20

# Property-based fuzzing of every connector (tests/test_fuzz_connectors.py, marker `fuzz`), drawing
# fresh examples until FUZZ_MINUTES are spent; `make test` runs the same properties on a small budget.
# A failure prints the shrunk input and a @reproduce_failure line; .hypothesis/ replays it next run.
FUZZ_MINUTES ?= 10
fuzz: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	FINOPS_FUZZ_PROFILE=fuzz FUZZ_MINUTES=$(FUZZ_MINUTES) $(BIN)/python -m pytest -q -m fuzz -p no:cacheprovider tests/test_fuzz_connectors.py

# Dagster UI on 127.0.0.1:3000 over the demo warehouse (run `make demo` first for data).
ui: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -m pipelines.orchestration.definitions -h 127.0.0.1 -p 3000

# Stage timings of the demo graph, then the GPU-minute rollup over 100 M samples against its floor
# (about 7 min on 2 cores, half of it writing the samples; a model running out of memory is reported, not fatal),
# a new day of telemetry after a month of it against the same day alone (tests/bench_history.py, about 2 min;
# BENCH_HISTORY="--days 60" a longer history), the CUR reader, anomaly scoring of 10,000 daily series, the lake's targets
# (tests/bench_lake.py: a 1M-row CUR against the one-query floor, each connector alone, reruns, a second delivery, telemetry, and a
# 10M-row CUR: BENCH_LAKE="" skips it), and the SQL
# models over a 1M-row CUR on DuckDB and on Spark local mode (skipped, saying why, without Java or
# the spark extra). BENCH_ROLLUP="--gpus 100" runs the rollup at 10 M samples instead;
# BENCH_SPARK="--rows 100000" a smaller CUR.
BENCH_ROLLUP ?= --gpus 1000 --days 12 --memory-limit 4GB
BENCH_SPARK ?= --rows 1000000
BENCH_HISTORY ?= --gpus 200 --days 30
BENCH_LAKE ?= --huge-rows 10000000
bench: $(STAMP) $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/python -m tests.bench
	$(BIN)/python -m tests.bench_rollup $(BENCH_ROLLUP)
	$(BIN)/python -m tests.bench_history $(BENCH_HISTORY)
	$(BIN)/python -m tests.bench_cur
	$(BIN)/python -m tests.bench_anomalies --series 10000
	$(BIN)/python -m tests.bench_ledger
	$(BIN)/python -m tests.bench_lake $(BENCH_LAKE)
	$(BIN)/python -m tests.bench_spark $(BENCH_SPARK)

# FOCUS 1.2 conformance of core.cost_lines. `focus-check` runs the project's own check of
# focus-validator's root-column and dataset rules (what `make test` runs too); `focus-validate`
# runs the FinOps Foundation's focus-validator 2.2.1 itself, from a venv of its own
# (.focus-validator-venv, Python 3.12, made on first use: needs PyPI once), on an export of
# core.cost_lines without the x_ columns, and prints the failing rules. Default warehouse: the
# demo's (`make demo` first); FOCUS_WAREHOUSES="a.duckdb b.duckdb" checks others.
FOCUS_WAREHOUSES ?= .finops/demo/warehouse.duckdb
FOCUS_VALIDATOR_PYTHON ?= python3.12
focus-check: $(STAMP)
	$(BIN)/python -m pipelines.warehouse.focus_conformance $(FOCUS_WAREHOUSES)

focus-validate: $(STAMP)
	PYTHON=$(BIN)/python FOCUS_VALIDATOR_PYTHON=$(FOCUS_VALIDATOR_PYTHON) tools/focus_validate.sh $(FOCUS_WAREHOUSES)

# Re-resolve every dependency from pyproject.toml into constraints.txt (run after changing deps).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade "pip>=24"
	.lock-venv/bin/python -m pip install --quiet -e ".[dev]"
	.lock-venv/bin/python -m pip freeze --exclude-editable | grep -v '^gpu-finops' > constraints.txt
	rm -rf .lock-venv

clean:
	rm -rf $(VENV) .dagster_home .finops
