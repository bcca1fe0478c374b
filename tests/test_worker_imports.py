"""What a streaming worker with the local engine loads (issue 27, item 2: a smaller worker).

The worker (``refusal-audit worker``, the default topics worker) imports what its command
imports (the CLI with every command registered), builds its pipeline with the local engine
and audits a few events in a fresh interpreter; the heavy packages only other paths need
must not be in ``sys.modules`` then: the o200k tokenizer of the LLM engines' batching, the
cascade's ONNX encoder and its tokenizer, training's scikit-learn and pandas, calibration's
statsmodels, the trained models' scipy, the warehouse's pyarrow (columnar inserts) and its
owner channel's httpx, the faust worker (``--outputs warehouse``) and aiokafka (loaded only
to leave the group on the way out).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# what the local-engine worker must never load; numpy is not listed: the local engine's
# BM25 clause index (rank_bm25) runs on it
UNNEEDED = ("bpe_openai", "onnxruntime", "tokenizers", "sklearn", "statsmodels", "pandas",
            "scipy", "pyarrow", "httpx", "faust", "aiokafka")  # fmt: skip

_SCRIPT = """
import asyncio, json, sys, tempfile
import refusal_audit.cli
import refusal_audit.streaming.cli
import refusal_audit.streaming.transactional_worker
import refusal_audit.streaming.worker_web
from processors.adapters import DecodeOptions, SourceRecord
from refusal_audit.audit.batch import build_pipeline
from refusal_audit.audit.pipeline import InputSource
from refusal_audit.config import load_settings


class Null:
    def insert_events(self, e): pass
    def insert_assessments(self, a): pass
    def insert_batches(self, b): pass
    def insert_dead_letters(self, d): pass
    def stored_identities(self, keys): return {}


cfg = load_settings(None, data_dir=tempfile.mkdtemp())
pipeline = build_pipeline(cfg, Null(), "local")
lines = [x for x in open(sys.argv[1], "rb").read().splitlines() if x.strip()][:60]
records = [SourceRecord("t", f"line {i}", raw) for i, raw in enumerate(lines)]
report = asyncio.run(pipeline.run([InputSource(records, "jsonl", DecodeOptions())]))
print(json.dumps({"refusals": report.refusals, "batches": report.batches,
                  "modules": sorted(m for m in sys.modules if "." not in m)}))
"""


def _worker_modules() -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(REPO / "examples" / "refusal_log.jsonl")],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def worker_modules() -> dict[str, object]:
    return _worker_modules()


def test_a_local_engine_worker_loads_no_tokenizer_encoder_or_training_packages(
    worker_modules: dict[str, object],
) -> None:
    assert worker_modules["refusals"] and worker_modules["batches"]  # it did audit
    modules = set(worker_modules["modules"])  # type: ignore[call-overload]
    assert "rank_bm25" in modules  # the local engine ran
    assert not modules & set(UNNEEDED), sorted(modules & set(UNNEEDED))


def test_leaving_the_group_loads_aiokafka_only_then() -> None:
    """The static member's LeaveGroup (streams.static_leave) is reachable from the module
    the worker imports, and importing that module does not load aiokafka."""
    script = (
        "import sys, streams.membership as m; before = 'aiokafka' in sys.modules; "
        "import streams.static_leave as s; "
        "print(before, 'aiokafka' in sys.modules, callable(s.leave_static_member))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True, cwd=REPO)  # fmt: skip
    assert out.stdout.split() == ["False", "True", "True"]
