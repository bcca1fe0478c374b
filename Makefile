# refusal-audit developer commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck unit bench bench-worker bench-scaleout schemas dashboards clean kafka-up kafka-down

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 needed"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

## Audit the synthetic example log end to end on embedded defaults (chDB, local engine), then
## write its HTML report (out/report.html).
demo: install
	mkdir -p out
	$(BIN)/refusal-audit audit examples/refusal_log.jsonl --out out/demo-result.json
	$(BIN)/refusal-audit query false_positive_rate
	$(BIN)/refusal-audit query category_mix --since 2025-06-05
	$(BIN)/refusal-audit report --out out/report.html

## Lint, type-check and run the whole test suite.
test: install lint typecheck unit

lint: install
	$(BIN)/ruff check .

typecheck: install
	$(BIN)/mypy

## The tests in two processes (pytest-xdist), then those that restart the shared broker, alone.
unit: install
	$(BIN)/pytest -n 2 -m "not serial"
	$(BIN)/pytest -m serial

bench: install
	$(BIN)/python benchmarks/local_engine.py

## Streaming throughput, memory and latency of the one-process worker (needs the broker: make kafka-up).
bench-worker: install
	$(BIN)/python benchmarks/worker_throughput.py

## Scale-out figures: transactional workers, the sink, the openai engine, RSS, live latency (broker up).
bench-scaleout: install
	$(BIN)/python benchmarks/scaleout.py

schemas: install
	$(BIN)/python -m schemas.export

## Regenerate the Grafana dashboards (deploy/grafana/dashboards/*.json) from refusal_audit/grafana.
dashboards: install
	$(BIN)/python -m refusal_audit.grafana deploy/grafana/dashboards

## Start the dev Kafka broker (KRaft, 127.0.0.1:9092; jars from Maven Central into deploy/kafka/lib).
kafka-up:
	deploy/kafka/kafka-up.sh

## Stop it; data stays in deploy/kafka/data (deploy/kafka/kafka-down.sh --wipe deletes it).
kafka-down:
	deploy/kafka/kafka-down.sh

clean:
	rm -rf .refusal-audit out .pytest_cache .mypy_cache .ruff_cache
