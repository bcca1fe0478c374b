"""The transactional worker's pipelining against the real broker (issue 14): windows in hand
overlap (their LLM batches are in flight together), commit in order and exactly once; an
unexpected pipeline error ends the worker with exit status 70 and commits nothing; the
worker serves /metrics and /health."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import fake_openai_server
import orjson
import pytest
import typer
from fake_openai_server import FakeOpenAIServer, slow
from test_transactional_worker import _drain, _events, _produce, _read, _settings

from refusal_audit.config import Settings
from refusal_audit.streaming.transactional_worker import TransactionalWorker
from refusal_audit.streaming.worker_web import WorkerWeb
from streams.topics import Topics, admin_client, create_topics, topic_specs

pytestmark = pytest.mark.kafka
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "refusal_log.jsonl"
fake_openai = fake_openai_server.fake_openai


@pytest.fixture
def topics(kafka_bootstrap: str, unique_topic_prefix: str) -> Topics:
    create_topics(admin_client(kafka_bootstrap), topic_specs(unique_topic_prefix, 3, 1))
    return Topics.from_prefix(unique_topic_prefix)


def _cfg(bootstrap: str, prefix: str, tmp: Path, name: str, **more: Any) -> Settings:
    """``_settings`` with ``more`` settings, validated."""
    base = _settings(bootstrap, prefix, tmp, name).model_dump(exclude_unset=True)
    return Settings(**{**base, **more})


def _openai(server: FakeOpenAIServer) -> dict[str, Any]:
    return {"engine": "openai", "openai_base_url": server.base_url,
            "openai_api_key": "sk-test-not-a-real-key", "openai_max_retries": 0}  # fmt: skip


def test_windows_in_hand_overlap_and_commit_in_order_exactly_once(
    kafka_bootstrap: str, unique_topic_prefix: str, topics: Topics, tmp_path: Path,
    fake_openai: FakeOpenAIServer,
) -> None:  # fmt: skip
    events = _events(1)[:120]
    _produce(kafka_bootstrap, topics.input, [orjson.dumps(e) for e in events])
    fake_openai.fallback = slow(1.0)
    # windows of 20 events hold one batch each (batch_max_events 20): more than one LLM call
    # in flight means windows were audited together
    cfg = _cfg(
        kafka_bootstrap, unique_topic_prefix, tmp_path, "w1", **_openai(fake_openai),
        worker_take_max=20, batch_max_events=20, worker_windows_in_flight=3,
        openai_max_concurrency=3,
    )  # fmt: skip
    worker = TransactionalWorker.start(cfg)
    try:
        _drain([worker], lambda: worker.stats.records >= len(events))
    finally:
        worker.close()
    assert worker.stats.records == len(events) and worker.stats.aborted == 0
    assert fake_openai.max_in_flight == 3  # the depth and the concurrency bound, never more
    stored = _read(kafka_bootstrap, topics.stored_events, "read_committed")
    assert Counter(m.key() for m in stored) == Counter(e["log_id"].encode() for e in events)
    refusals = {m.key() for m in stored if orjson.loads(m.value())["is_refusal"]}
    assessed = Counter(m.key() for m in _read(kafka_bootstrap, topics.assessments,
                                              "read_committed"))  # fmt: skip
    assert set(assessed) == refusals and set(assessed.values()) == {1}


def test_an_aborted_window_drops_the_windows_behind_it_and_all_are_redone(
    kafka_bootstrap: str, unique_topic_prefix: str, topics: Topics, tmp_path: Path
) -> None:
    events = _events(2)  # 400 events, windows of 100, 3 in hand
    _produce(kafka_bootstrap, topics.input, [orjson.dumps(e) for e in events])
    cfg = _cfg(kafka_bootstrap, unique_topic_prefix, tmp_path, "w1", worker_windows_in_flight=3)
    worker = TransactionalWorker.start(cfg)
    faults = {"left": 1}

    def fault(window: Any) -> None:  # the 2nd window's commit fails: 3rd and 4th in hand
        if worker.stats.windows == 1 and faults["left"] > 0:
            faults["left"] -= 1
            raise RuntimeError("injected before commit")

    stop = threading.Event()
    thread = threading.Thread(target=worker.run, args=(stop, fault), daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while worker.stats.records < len(events) and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    thread.join(60)
    worker.close()
    assert worker.stats.aborted >= 1 and worker.stats.records == len(events)
    stored = _read(kafka_bootstrap, topics.stored_events, "read_committed")
    ids = Counter(m.key() for m in stored)
    assert len(ids) == len(events) and set(ids.values()) == {1}


def test_an_unexpected_pipeline_error_exits_70_and_commits_nothing(
    kafka_bootstrap: str, unique_topic_prefix: str, topics: Topics, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    from refusal_audit.audit.pipeline import AuditPipeline
    from refusal_audit.streaming import cli as cli_scale

    events = _events(1)[:50]
    _produce(kafka_bootstrap, topics.input, [orjson.dumps(e) for e in events])
    cfg = _cfg(kafka_bootstrap, unique_topic_prefix, tmp_path, "w1", worker_web_port=0)

    async def broken(self: AuditPipeline, *args: Any, **kwargs: Any) -> Any:
        raise ZeroDivisionError("a bug in the pipeline")

    monkeypatch.setattr(AuditPipeline, "run", broken)
    monkeypatch.setattr(cli_scale, "_logging", lambda level: None)
    with pytest.raises(typer.Exit) as exit_info:
        cli_scale.run_topics_worker(cfg, "info")
    assert exit_info.value.exit_code == 70
    monkeypatch.undo()
    # nothing was committed: a second worker of the group audits every event
    worker = TransactionalWorker.start(_cfg(kafka_bootstrap, unique_topic_prefix, tmp_path, "w2"))
    try:
        _drain([worker], lambda: worker.stats.records >= len(events))
    finally:
        worker.close()
    assert worker.stats.records == len(events)


def test_the_worker_serves_metrics_and_health(
    kafka_bootstrap: str, unique_topic_prefix: str, topics: Topics, tmp_path: Path
) -> None:
    events = _events(1)
    bad = [b"{not json"]
    _produce(kafka_bootstrap, topics.input, [orjson.dumps(e) for e in events] + bad)
    worker = TransactionalWorker.start(_settings(kafka_bootstrap, unique_topic_prefix, tmp_path,
                                                 "w1"))  # fmt: skip
    web = WorkerWeb("127.0.0.1", 0, worker.metrics, worker.health)
    base = f"http://127.0.0.1:{web.port}"
    answered: list[dict[str, Any]] = []

    def drained() -> bool:  # /health answers while the polling thread is inside consume
        with urllib.request.urlopen(f"{base}/health", timeout=3) as r:
            answered.append(orjson.loads(r.read()))
        return worker.stats.records >= len(events) + len(bad)

    try:
        _drain([worker], drained)
        assert len(answered) >= 2
        stop = threading.Event()
        idle = threading.Thread(target=worker.run, args=(stop,), daemon=True)
        idle.start()  # nothing left to read: the thread waits in consume
        for _ in range(5):
            with urllib.request.urlopen(f"{base}/health", timeout=3) as r:
                answered.append(orjson.loads(r.read()))
        stop.set()
        idle.join(30)
        worker._lag_read = 0.0
        worker._update_lag()
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as r:
            text = r.read().decode()
        with urllib.request.urlopen(f"{base}/health", timeout=10) as r:
            health = orjson.loads(r.read())
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"{base}/settings", timeout=10)
    finally:
        web.close()
        worker.close()
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines() if line and not line.startswith("#")
    }  # fmt: skip
    assert values["refusal_audit_events_consumed_total"] == len(events) + len(bad)
    assert values['refusal_audit_window_transactions_total{outcome="committed"}'] >= 1
    assert values['refusal_audit_dead_letters_total{reason_code="not_json"}'] == 1
    lags = [v for k, v in values.items() if k.startswith("refusal_audit_consumer_lag_events")]
    assert len(lags) == 3 and sum(lags) == 0
    assert health["ok"] is True and health["assigned_partitions"] == 3
    assert missing.value.code == 404


def test_a_worker_uses_the_baselines_the_sink_publishes(
    kafka_bootstrap: str, unique_topic_prefix: str, topics: Topics, tmp_path: Path
) -> None:
    from datetime import UTC, datetime

    from processors.drift_detection import WindowCounts
    from streams.baselines import BaselinePublisher
    from streams.producer import TopicWriter, make_producer

    baseline = WindowCounts(refusals=1000, false_positives=900, review_flags=10,
                            categories={"harmful_content": 1000})  # fmt: skip
    publisher = BaselinePublisher(TopicWriter(make_producer(kafka_bootstrap)),
                                  topics.drift_baselines)  # fmt: skip
    assert publisher.publish({"default": baseline, "retired": baseline}, datetime.now(UTC)) == 2
    assert publisher.publish({"default": baseline}, datetime.now(UTC)) == 2  # + a tombstone
    values = [orjson.dumps(e) for e in _events(1)]
    _produce(kafka_bootstrap, topics.input, values)
    worker = TransactionalWorker.start(_cfg(kafka_bootstrap, unique_topic_prefix, tmp_path, "w1"))
    try:
        _drain([worker], lambda: worker.stats.records >= len(values))
    finally:
        worker.close()
    assert set(worker.pipeline.baselines) == {"default"}  # the tombstone removed "retired"
    batches = [orjson.loads(m.value()) for m in _read(kafka_bootstrap, topics.audit_batches,
                                                      "read_committed")]  # fmt: skip
    trends = [line for b in batches for line in b["summary"]["trends_identified"]]
    assert trends and all("no baseline" not in line for line in trends)
    assert any("vs baseline 0.90 [" in line and "(n=1000)" in line for line in trends)


def test_the_sinks_detector_pass_publishes_each_bundles_baseline(
    kafka_bootstrap: str, unique_topic_prefix: str, topics: Topics, tmp_path: Path,
    warehouse: Any,
) -> None:  # fmt: skip
    from datetime import UTC, datetime, timedelta

    from refusal_audit.audit.batch import BatchOptions, run_batch
    from refusal_audit.streaming.cli import detector_pass
    from streams.baselines import BaselineReader

    cfg = _cfg(kafka_bootstrap, unique_topic_prefix, tmp_path, "sink", alerts_window_seconds=3600)
    report = run_batch(cfg, [EXAMPLE], BatchOptions.build(None, None, None, None, None),
                       sink=warehouse)  # fmt: skip
    # the example's events are late (event times in 2025): they count in the window they
    # arrived in, which is in the baseline of the window two hours from now
    detector_pass(cfg, warehouse)(datetime.now(UTC) + timedelta(hours=2))
    reader = BaselineReader(kafka_bootstrap, topics.drift_baselines)
    try:
        assert reader.catch_up()
    finally:
        reader.close()
    ((bundle, counts),) = reader.baselines.items()
    assert bundle == "default" and counts.refusals == report.refusals > 0
    assert counts.false_positives == sum(a.is_estimated_false_positive for a in report.assessments)
