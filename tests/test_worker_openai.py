"""The worker with the openai engine on the real broker; the LLM is the fake
OpenAI-compatible server on loopback: a valid answer, an answer invalid twice, a 429."""

from __future__ import annotations

from pathlib import Path

import fake_openai_server
import orjson
import pytest
from fake_openai_server import FakeOpenAIServer, answer_for, mutated, status, valid
from streaming import Deployment, read_topic, stop

fake_openai = fake_openai_server.fake_openai

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.kafka


def small_log(path: Path, n: int = 30) -> Path:
    lines = [
        line
        for line in (REPO / "examples" / "refusal_log.jsonl").read_bytes().splitlines()
        if line.strip()
    ]
    out = path / "small.jsonl"
    out.write_bytes(b"\n".join(lines[:n]) + b"\n")
    return out


@pytest.fixture
def dep(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path, fake_openai: FakeOpenAIServer
) -> Deployment:
    deployment = Deployment(
        kafka_bootstrap,
        unique_topic_prefix,
        tmp_path,
        extra={
            "REFUSAL_AUDIT_OPENAI_BASE_URL": fake_openai.base_url,
            "REFUSAL_AUDIT_OPENAI_API_KEY": "sk-test-not-a-real-key",
            "REFUSAL_AUDIT_OPENAI_MAX_RETRIES": "2",
        },
    )
    deployment.cli("topics", "create")
    return deployment


def drain(dep: Deployment, log: Path) -> None:
    dep.cli("produce", str(log))
    worker = dep.start_worker()
    try:
        dep.wait_drained(worker)
    finally:
        stop(worker)
    assert worker.returncode == 0, dep.worker_logs()


def test_valid_answers_are_stored_and_published(
    dep: Deployment, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai.fallback = valid()
    drain(dep, small_log(tmp_path))
    rows = dep.sql("SELECT log_id, engine, prompt_version FROM current_assessments")
    refusals = dep.sql("SELECT log_id FROM refusal_events FINAL WHERE is_refusal")
    assert {r["log_id"] for r in rows} == {r["log_id"] for r in refusals} != set()
    assert {r["engine"] for r in rows} == {"openai"}
    published = {m.key().decode() for m in read_topic(dep.bootstrap, dep.topic("assessments"))}
    assert published == {r["log_id"] for r in rows}


def test_an_answer_invalid_twice_dead_letters_only_the_broken_event(
    dep: Deployment, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    victims: set[str] = set()

    def drop_first(answer: dict[str, object], log_ids: list[str]) -> dict[str, object]:
        if not victims:
            victims.add(log_ids[0])
        return answer_for([i for i in log_ids if i not in victims])

    fake_openai.fallback = mutated(drop_first)
    drain(dep, small_log(tmp_path))
    (victim,) = victims
    # the retry in the same conversation named the missing id
    retries = [r for r in fake_openai.requests if len(r.messages) > 2]
    assert retries and any(victim in str(r.messages[-1]) for r in retries)
    letters = list(read_topic(dep.bootstrap, dep.topic("dead-letters")))
    assert [m.key().decode() for m in letters] == [victim]
    headers = dict(letters[0].headers() or [])
    assert headers["x-stage"] == b"audit"
    assert b"raw_output" in letters[0].value()
    assessed = {r["log_id"] for r in dep.sql("SELECT log_id FROM current_assessments")}
    refusals = {
        r["log_id"] for r in dep.sql("SELECT log_id FROM refusal_events FINAL WHERE is_refusal")
    }
    assert assessed == refusals - {victim}
    stored = dep.sql("SELECT log_id, stage FROM dead_letters FINAL")
    assert stored == [{"log_id": victim, "stage": "audit"}]


def test_a_429_is_retried_after_retry_after(
    dep: Deployment, fake_openai: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai.script(status(429, retry_after="1"))
    fake_openai.fallback = valid()
    drain(dep, small_log(tmp_path))
    assert fake_openai.pending() == 0
    assert dep.sql("SELECT count() AS n FROM dead_letters FINAL") == [{"n": 0}]
    rows = dep.sql("SELECT count() AS n FROM current_assessments")
    refusals = dep.sql("SELECT count() AS n FROM refusal_events FINAL WHERE is_refusal")
    assert rows == refusals and rows[0]["n"] > 0
    batches = dep.sql("SELECT sum(prompt_tokens) AS p FROM audit_batches FINAL")
    assert batches[0]["p"] > 0
    assert orjson.dumps(rows)
