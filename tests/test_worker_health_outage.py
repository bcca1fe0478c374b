"""Worker ``/health`` while the broker is away (issue 23 B), against the real broker: a worker
holding no partition (its session expired in the outage) used to report lag 0 and 200 until
the broker returned; its lag is unknown now, so past the stall limit it is 503."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from refusal_audit.config import Settings
from refusal_audit.streaming.transactional_worker import TransactionalWorker
from streams.topics import admin_client, create_topics, topic_specs

pytestmark = pytest.mark.kafka


def test_an_unassigned_worker_is_unhealthy_while_the_broker_is_away(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path, broker_control: Any
) -> None:
    admin = admin_client(kafka_bootstrap)
    create_topics(admin, topic_specs(unique_topic_prefix, 2, 1))
    deadline = time.monotonic() + 30  # the new topics in the broker's metadata
    while f"{unique_topic_prefix}refusal-events" not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the topics never appeared"
        time.sleep(0.5)
    cfg = Settings(
        kafka_bootstrap_servers=kafka_bootstrap, kafka_topic_prefix=unique_topic_prefix,
        kafka_consumer_group=f"{unique_topic_prefix}workers", kafka_group_instance_id="h1",
        worker_take_within_seconds=0.5, data_dir=tmp_path, engine="local",
    )  # fmt: skip
    worker = TransactionalWorker.start(cfg)
    try:
        assert not worker.stream.assigned  # never polled: holds no partition
        worker._update_lag(every=0)
        assert worker.lag_total == 0 and worker.health()["ok"]  # nothing to do: healthy
        broker_control.stop()
        worker._update_lag(every=0)
        assert worker.lag_total == -1  # unknown: the broker does not answer
        worker.last_commit = time.monotonic() - 66  # past 10 x 0.5 s + 60 s without a commit
        assert worker.health()["ok"] is False
        broker_control.start()
        deadline = time.monotonic() + 60
        while worker.lag_total != 0 and time.monotonic() < deadline:
            time.sleep(1)
            worker._update_lag(every=0)
        assert worker.lag_total == 0 and worker.health()["ok"]  # back: healthy again
    finally:
        worker.close()


def test_a_pending_offset_commit_makes_the_worker_report_unknown_lag_and_go_unhealthy(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    """Another producer's transactional offset commit left open on the worker group (what a
    producer abandoned mid-call leaves) keeps the group's committed offsets unreadable: the
    worker's lag is unknown (-1, not the 0 of "nothing to do"), /health names the partitions
    and how long, and past the stall limit says 503; once the transaction ends it recovers."""
    from scaleout_harness import open_offset_commit

    admin = admin_client(kafka_bootstrap)
    create_topics(admin, topic_specs(unique_topic_prefix, 2, 1))
    source, group = f"{unique_topic_prefix}refusal-events", f"{unique_topic_prefix}workers"
    deadline = time.monotonic() + 30
    while source not in admin.list_topics(timeout=10).topics:
        assert time.monotonic() < deadline, "the topics never appeared"
        time.sleep(0.5)
    zombie = open_offset_commit(kafka_bootstrap, group, source, 0, 0, f"{group}.zombie")
    cfg = Settings(
        kafka_bootstrap_servers=kafka_bootstrap, kafka_topic_prefix=unique_topic_prefix,
        kafka_consumer_group=group, kafka_group_instance_id="u1",
        worker_take_within_seconds=0.5, data_dir=tmp_path, engine="local",
    )  # fmt: skip
    worker = TransactionalWorker.start(cfg)
    try:
        stream = worker.stream
        deadline = time.monotonic() + 60
        while len(stream.assigned) < 2 and time.monotonic() < deadline:
            stream.next_window(until=lambda: len(stream.assigned) == 2)
        assert len(stream.assigned) == 2
        worker._update_lag(every=0)
        assert worker.lag_total == -1  # partition 0's committed offset cannot be read
        health = worker.health()
        # partition 0 is pending; one committed-offset request asks for both, and it waits
        assert health["committed_offsets_unreadable"] in (1, 2)
        assert health["committed_offsets_unreadable_seconds"] >= 0
        assert worker.metrics.registry.get_sample_value(
            "refusal_audit_committed_offsets_unreadable_partitions"
        ) == health["committed_offsets_unreadable"]
        worker.last_commit = time.monotonic() - 66  # past 10 x 0.5 s + 60 s without a commit
        assert worker.health()["ok"] is False
        zombie.abort_transaction(30)
        deadline = time.monotonic() + 60
        while worker.lag_total != 0 and time.monotonic() < deadline:
            worker._update_lag(every=0)
        assert worker.lag_total == 0 and worker.health()["ok"]
        assert worker.health()["committed_offsets_unreadable"] == 0
    finally:
        worker.close()
