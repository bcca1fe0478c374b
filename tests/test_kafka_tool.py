"""deploy/kafka/kafka-tool.sh and the broker's transaction report tests attach to a stuck
drain (``BrokerControl.transactions_report``), against the real broker."""

from __future__ import annotations

import contextlib
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka_fixture import KAFKA_TOOL, BrokerControl, group_offsets_partition
from scaleout_harness import committed_offsets, open_offset_commit


def test_the_offsets_partition_is_javas_string_hash() -> None:
    # Java: "abc".hashCode() == 96354, "hello".hashCode() == 99162322, "é" (U+00E9) == 233,
    # "😀" (two UTF-16 units) == 0xD83D * 31 + 0xDE00 == 1772645
    assert group_offsets_partition("abc") == 96354 % 10
    assert group_offsets_partition("hello") == 99162322 % 10
    assert group_offsets_partition("é", 50) == 233 % 50
    assert group_offsets_partition("😀", 7) == (0xD83D * 31 + 0xDE00) % 7
    # a negative hashCode is negated (Kafka's Utils.abs: Math.abs, Integer.MIN_VALUE -> 0),
    # not masked: Java's "日本語グループ".hashCode() == -305235731 -> 1 (masking gives 7), and
    # "polygenelubricants".hashCode() == Integer.MIN_VALUE -> 0 (values from java 17)
    assert group_offsets_partition("日本語グループ") == 305235731 % 10 == 1
    assert group_offsets_partition("日本語グループ", 50) == 305235731 % 50
    assert group_offsets_partition("polygenelubricants", 7) == 0
    assert group_offsets_partition("x" * 40) == 847293440 % 10  # overflows, stays positive


@pytest.mark.kafka
def test_the_offsets_partition_is_the_brokers(
    kafka_bootstrap: str, unique_topic_prefix: str
) -> None:
    """Groups with negative Java hashes, non-ASCII and emoji: their committed offsets land on
    the ``__consumer_offsets`` partition ``group_offsets_partition`` names (read back from
    the partitions' new records, whose keys hold the group id)."""
    source = f"{unique_topic_prefix}in"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(source, 1, 1)])[source].result(30)
    groups = [
        unique_topic_prefix + g for g in ("日本語グループ", "é-grüße", "g-😀🎉", "a", "b", "c")
    ]
    # read_uncommitted: another test's open transaction on a partition (a worker's window, a
    # zombie) holds read_committed readers back at its first offset, before these commits
    reader = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": f"{source}-reader",
                       "enable.auto.commit": False, "enable.partition.eof": True,
                       "isolation.level": "read_uncommitted"})  # fmt: skip
    # a fresh broker makes __consumer_offsets at the first coordinator lookup: ask for one
    reader.committed([TopicPartition(source, 0)], timeout=30)
    deadline = time.monotonic() + 60
    while len(admin.list_topics("__consumer_offsets", timeout=10).topics["__consumer_offsets"]
              .partitions) < 10:  # fmt: skip
        assert time.monotonic() < deadline, "__consumer_offsets was never made"
        time.sleep(0.5)
    ends = [reader.get_watermark_offsets(TopicPartition("__consumer_offsets", i), 30)[1]
            for i in range(10)]  # fmt: skip
    for group in groups:
        member = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
        member.commit(offsets=[TopicPartition(source, 0, 1)], asynchronous=False)
        member.close()
    reader.assign([TopicPartition("__consumer_offsets", i, end) for i, end in enumerate(ends)])
    seen: dict[str, set[int]] = {}
    eof: set[int] = set()
    while len(eof) < 10 and (record := reader.poll(10)) is not None:
        if record.error():
            eof.add(record.partition())
            continue
        for group in groups:
            if group.encode() in (record.key() or b""):
                seen.setdefault(group, set()).add(record.partition())
    reader.close()
    assert seen == {g: {group_offsets_partition(g)} for g in groups}


@pytest.mark.kafka
def test_the_report_names_the_producer_holding_a_groups_offsets_open(
    kafka_bootstrap: str, unique_topic_prefix: str
) -> None:
    source, group = f"{unique_topic_prefix}in", f"{unique_topic_prefix}g"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(source, 1, 1)])[source].result(30)
    zombie = open_offset_commit(kafka_bootstrap, group, source, 0, 0, f"{group}.zombie")
    try:
        broker = BrokerControl(kafka_bootstrap, unmanageable="a report only")
        report = broker.transactions_report(group, unique_topic_prefix)
        partition = group_offsets_partition(group)
        producers = report.split("describe-producers --topic __consumer_offsets --partition "
                                 f"{partition}\n", 1)[1].split("\n$ ", 1)[0]  # fmt: skip
        # the zombie's open transaction starts at some offset of the group's partition
        open_rows = [line for line in producers.splitlines()[1:]
                     if re.search(r"\t\s*\d+\s*\t?\s*$", line)]  # fmt: skip
        assert open_rows, report
        # the zombie's transactional id is described: Ongoing, with the offsets partition
        described = report.split(f"--transactional-id {group}.zombie\n", 1)[1]
        assert "Ongoing" in described and f"__consumer_offsets-{partition}" in described
        # the operator's remedy (KIP-664): abort it on the partition; the offsets read again
        assert broker.open_offset_transactions(group) != []
        with pytest.raises(KafkaException):
            committed_offsets(kafka_bootstrap, group, [(source, 0)])  # UNSTABLE_OFFSET_COMMIT
        said = broker.abort_offset_transactions(group)
        assert "abort" in said and broker.open_offset_transactions(group) == [], said
        # what the aborted transaction sent never counts: the group committed nothing
        assert committed_offsets(kafka_bootstrap, group, [(source, 0)]) == {(source, 0): -1001}
    finally:
        with contextlib.suppress(KafkaException):
            zombie.abort_transaction(30)


def test_the_tool_names_what_it_runs_and_refuses_the_rest() -> None:
    done = subprocess.run([str(KAFKA_TOOL), "nope"], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 1 and "unknown tool 'nope'" in done.stderr
    helped = subprocess.run([str(KAFKA_TOOL), "--help"], capture_output=True, text=True,
                            check=True)  # fmt: skip
    assert "transactions find-hanging" in helped.stdout


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ([], ["--bootstrap-server", "127.0.0.1:9092"]),
        (["--bootstrap-server", "h:1"], ["--bootstrap-server", "h:1"]),
        (["--bootstrap-server=h:1"], ["--bootstrap-server=h:1"]),  # one only: joptsimple
    ],  # refuses two ("Found multiple arguments"), and consumer-groups still exits 0
)
def test_the_tool_adds_the_bootstrap_server_unless_given(
    tmp_path: Path, given: list[str], expected: list[str]
) -> None:
    """The script's arguments as the JVM gets them (a fake java printing them, one a line;
    a fake jar): the tool's class, the bootstrap server once, the rest as given, spaces
    kept."""
    shutil.copy(KAFKA_TOOL, tmp_path / "kafka-tool.sh")
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "kafka-tools-0.jar").touch()
    java = tmp_path / "java"
    java.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@"\n')
    java.chmod(0o755)
    env = {"JAVA": str(java), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(tmp_path / "kafka-tool.sh"), "consumer-groups", *given, "--group", "a b"],
        capture_output=True, text=True, check=True, env=env,
    )  # fmt: skip
    args = done.stdout.splitlines()
    cls = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    assert args[args.index(cls) + 1 :] == [*expected, "--group", "a b"]
