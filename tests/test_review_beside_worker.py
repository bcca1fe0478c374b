"""The review app beside the worker on the embedded store (issue 10): the worker owns the
chDB store, and ``review add-reviewer``, ``review serve`` and ``review stats`` reach it
through the owner channel (a real broker and worker; the review server in a subprocess)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest
from review_app_harness import Reviewer
from streaming import REPO, Deployment, free_port, stop, wait_for_web

pytestmark = [pytest.mark.integration, pytest.mark.kafka]

EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"


def test_reviewers_work_while_the_worker_owns_the_embedded_store(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    dep.cli("topics", "create")
    dep.cli("produce", str(EXAMPLE_LOG))
    worker = dep.start_worker()
    review: subprocess.Popen[str] | None = None
    try:
        wait_for_web(dep, worker)
        dep.wait_drained(worker)
        added = subprocess.run(
            [sys.executable, "-m", "refusal_audit.cli", "review", "add-reviewer", "ann"],
            cwd=REPO, env=dep.env(), input="ann-password-1\n", capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        port = free_port()
        review = subprocess.Popen(
            [sys.executable, "-m", "refusal_audit.cli", "review", "serve", "--port", str(port)],
            cwd=REPO, env=dep.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert review.poll() is None and time.monotonic() < deadline, "review server died"
            time.sleep(0.3)
        ann = Reviewer(url, "ann", "ann-password-1")
        item = ann.claim()
        assert item is not None
        assert ann.submit(item, verdict="agree", note="checked").status_code == 303
        rows = dep.sql("SELECT reviewer, verdict, note FROM current_verdicts")
        assert rows == [{"reviewer": "ann", "verdict": "agree", "note": "checked"}]
        stats = dep.cli("review", "stats", "--json", "--min-items", "1").stdout
        groups = [orjson.loads(line)["group"] for line in stats.splitlines() if line.strip()]
        (rollup,) = [g for g in groups if g["key"][0] == "all"]
        assert rollup["false_positive"]["n"] == 1 and rollup["false_positive"]["rate"] == 1.0
        assert worker.poll() is None
    finally:
        if review is not None:
            review.terminate()
            output = review.communicate(timeout=30)[0]
            assert "through its owner" in output, output[-2000:]
        stop(worker)
    assert worker.returncode == 0, dep.worker_logs()
