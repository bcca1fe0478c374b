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


def add_ann(dep: Deployment) -> None:
    """The reviewer account ``ann`` (password ``ann-password-1``), through the CLI."""
    added = subprocess.run(
        [sys.executable, "-m", "refusal_audit.cli", "review", "add-reviewer", "ann"],
        cwd=REPO, env=dep.env(), input="ann-password-1\n", capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr


def start_review(dep: Deployment) -> tuple[subprocess.Popen[str], str]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "refusal_audit.cli", "review", "serve", "--port", str(port)],
        cwd=REPO, env=dep.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "review server did not start"
        time.sleep(0.3)


def owner_pid(dep: Deployment, timeout: float = 30) -> int | None:
    """The pid in the store's owner file (waiting up to ``timeout`` for one to appear)."""
    path = Path(f"{(dep.data_dir / 'chdb').resolve()}.owner.json")
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.2)
    return int(orjson.loads(path.read_bytes())["pid"])


def renamed_events(prefix: str, count: int) -> Path:
    """``count`` events of the example log under new log ids (new events to audit)."""
    lines = [orjson.loads(x) for x in EXAMPLE_LOG.read_text().splitlines()[:count]]
    for doc in lines:
        doc["log_id"] = f"{prefix}{doc['log_id']}"
    path = EXAMPLE_LOG.parent.parent / "out" / f"{prefix}events.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"\n".join(orjson.dumps(d) for d in lines) + b"\n")
    return path


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
        add_ann(dep)
        review, url = start_review(dep)
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


def test_the_store_passes_between_the_review_server_and_the_worker(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    dep.cli("topics", "create")
    dep.cli("audit", str(EXAMPLE_LOG))  # review items to start with
    add_ann(dep)
    review, url = start_review(dep)  # owns the store
    worker = None
    try:
        assert owner_pid(dep) == review.pid
        worker = dep.start_worker()  # follows the review server
        wait_for_web(dep, worker)
        first = renamed_events("one-", 20)
        dep.cli("produce", str(first))
        dep.wait_drained(worker)
        assert dep.sql("SELECT count() AS n FROM refusal_events FINAL WHERE log_id LIKE 'one-%'")[
            0
        ]["n"] == 20
        review.terminate()  # the worker takes the store over at its next call
        review.communicate(timeout=30)
        second = renamed_events("two-", 10)
        dep.cli("produce", str(second))
        dep.wait_drained(worker)
        assert owner_pid(dep) == worker.pid
        assert dep.sql("SELECT count() AS n FROM refusal_events FINAL WHERE log_id LIKE 'two-%'")[
            0
        ]["n"] == 10
        review, url = start_review(dep)  # now follows the worker
        ann = Reviewer(url, "ann", "ann-password-1")
        item = ann.claim()
        assert item is not None and ann.submit(item, verdict="agree").status_code == 303
        worker.kill()  # a crash: the review server takes the store over
        worker.wait(30)
        page = ann.http.get("/")
        assert page.status_code == 200, page.text[-2000:]
        assert owner_pid(dep) == review.pid
        rows = dep.sql("SELECT reviewer FROM current_verdicts")
        assert rows == [{"reviewer": "ann"}]
    finally:
        if worker is not None:
            stop(worker)
        if review.poll() is None:
            review.terminate()
            review.communicate(timeout=30)
