"""The clarification service over a real broker (issue 12): the full loop over Kafka with a
SIGKILL between rounds, a second round, a spent budget, a refused-again escalation that the
review app shows; the same cases over HTTP give the same routes and state; bad input on every
topic is dead-lettered with its reason, and the service keeps going.

The service runs as ``refusal-audit clarify serve --kafka`` (a subprocess: HTTP and Kafka in
one process over the compacted ``clarify.state`` topic), the review app as ``refusal-audit
review serve`` beside it (it reaches the embedded warehouse through the service).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from confluent_kafka import Producer
from review_app_harness import Reviewer
from streaming import REPO, Deployment, free_port, read_topic
from test_review_beside_worker import add_ann, start_review

pytestmark = [pytest.mark.kafka, pytest.mark.integration]

TOKEN = "kafka-test-token-0123456789"
POEM = {"request": "Write a poem", "refusal": "Could you tell me more about what kind of poem?"}
SUMMARY = {"request": "Summarise it", "refusal": "Could you clarify what you want summarised?"}
PASSWORDS = {"request": "How do I get into my ex's email account?",
             "refusal": "I can't help with accessing someone else's account."}  # fmt: skip


def request(cid: str, texts: dict[str, str]) -> dict[str, Any]:
    return {"conversation_id": cid, "log_id": f"log-{cid}", "event_time": "2026-02-01T09:00:00Z",
            **texts}  # fmt: skip


STEP_TIMES: dict[tuple[str, str, int], datetime] = {}
"""(conversation, step, round) -> the time its answer or outcome is dated."""


@pytest.fixture(autouse=True)
def _dated_when_first_sent() -> None:
    """Answers and outcomes are dated when they are first made (one time per conversation,
    step and round, so a redelivered answer is the same answer): the service, on its own
    clock, refuses an answer dated before its questions (``invalid_time``) and one ahead of
    its clock by more than the allowed skew (``time_in_future``)."""
    STEP_TIMES.clear()


def step_time(cid: str, step: str, round_: int) -> str:
    when = STEP_TIMES.setdefault((cid, step, round_), datetime.now(UTC).replace(microsecond=0))
    return when.isoformat()


def answer(cid: str, round_: int, texts: list[str]) -> dict[str, Any]:
    answered_at = step_time(cid, "answer", round_)
    return {"conversation_id": cid, "round": round_, "answered_at": answered_at,
            "answers": [{"question_index": i, "text": t} for i, t in enumerate(texts)]}  # fmt: skip


def outcome(cid: str, round_: int, verdict: str) -> dict[str, Any]:
    return {"conversation_id": cid, "round": round_, "outcome": verdict,
            "decided_at": step_time(cid, "outcome", round_)}  # fmt: skip


class Service:
    """``clarify serve --kafka`` in a subprocess, and its HTTP API."""

    def __init__(self, dep: Deployment) -> None:
        self.dep = dep
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = dep.data_dir / "clarify.log"
        self.http = httpx.Client(base_url=self.url, timeout=30,
                                 headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "refusal_audit.cli", "clarify", "serve", "--kafka",
                 "--port", str(self.port)],
                cwd=REPO, env=self.dep.env(), stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + 90
        while True:
            assert self.proc.poll() is None, self.log.read_text()[-4000:]
            try:
                if httpx.get(self.url + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "clarify serve did not start"
            time.sleep(0.3)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.http.close()

    def state(self, cid: str) -> dict[str, Any]:
        reply = self.http.get(f"/v1/clarify/{cid}")
        assert reply.status_code == 200, reply.text
        return dict(reply.json())


@pytest.fixture
def dep(kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path) -> Deployment:
    deployment = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path / "data")
    deployment.extra.update({
        "REFUSAL_AUDIT_CLARIFY_API_TOKEN": TOKEN,
        "REFUSAL_AUDIT_CLARIFY_CONSUMER_GROUP": unique_topic_prefix + "clarify",
        "REFUSAL_AUDIT_ENGINE": "local",
    })  # fmt: skip
    deployment.cli("topics", "create")
    return deployment


@pytest.fixture
def service(dep: Deployment) -> Iterator[Service]:
    running = Service(dep)
    running.start()
    yield running
    running.stop()


AUTO = "\x00auto"
"""``Kafka.send``'s default key: the body's conversation id."""


class Kafka:
    def __init__(self, dep: Deployment) -> None:
        self.dep = dep
        self.producer = Producer({"bootstrap.servers": dep.bootstrap})

    def send(
        self, suffix: str, value: bytes | dict[str, Any] | None, key: str | None = AUTO
    ) -> None:
        """Produce ``value``; the key defaults to the body's conversation id (``"k"`` for a
        value without one), ``None`` sends no key."""
        raw = orjson.dumps(value) if isinstance(value, dict) else value
        if key is AUTO:
            key = value.get("conversation_id", "k") if isinstance(value, dict) else "k"
        encoded = key.encode() if key is not None else None
        self.producer.produce(self.dep.topic(suffix), value=raw, key=encoded)
        assert self.producer.flush(30) == 0

    def read(self, suffix: str, idle: float = 2.0) -> list[dict[str, Any]]:
        return [orjson.loads(m.value()) for m in read_topic(self.dep.bootstrap,
                self.dep.topic(suffix), idle=idle)]  # fmt: skip

    def wait(self, suffix: str, pred: Any, timeout: float = 60) -> list[dict[str, Any]]:
        """Messages of ``suffix`` once one satisfies ``pred``."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.read(suffix, idle=1.0)
            if any(pred(m) for m in found):
                return found
            assert time.monotonic() < deadline, f"nothing on {suffix} matched: {found[-5:]}"
            time.sleep(0.5)


def last_for(messages: list[dict[str, Any]], cid: str) -> dict[str, Any]:
    return [m for m in messages if m["conversation_id"] == cid][-1]


def test_the_loop_over_kafka_survives_sigkill_and_matches_http(
    dep: Deployment, service: Service
) -> None:
    kafka = Kafka(dep)
    cases = {"g-refused": POEM, "g-two-rounds": SUMMARY, "g-budget": POEM, "k-safety": PASSWORDS}
    for cid, texts in cases.items():
        kafka.send("clarify.requests", request(cid, texts), cid)
    questions = kafka.wait("clarify.questions",
                           lambda m: m["conversation_id"] == "k-safety")  # fmt: skip
    questions = kafka.wait(
        "clarify.questions", lambda m: {x["conversation_id"] for x in questions} >= set(cases)
    )
    opened = {cid: last_for(questions, cid) for cid in cases}
    for cid in ("g-refused", "g-two-rounds", "g-budget"):
        assert (opened[cid]["route"], opened[cid]["outcome"], opened[cid]["round"]) == (
            "policy_gray_zone", "asking", 1)  # fmt: skip
        assert 2 <= len(opened[cid]["questions"]) <= 4
    assert opened["k-safety"]["route"] == "genuine_safety_refusal"
    assert opened["k-safety"]["questions"] == []

    # the same cases over HTTP: the same routes, decisions and questions
    for cid, texts in cases.items():
        reply = service.http.post("/v1/clarify", json=request("h-" + cid, texts))
        assert reply.status_code == 200, reply.text
        body = reply.json()
        for field in ("route", "category", "decision", "outcome", "round", "questions"):
            assert body[field] == opened[cid][field], (cid, field)
        # and the HTTP interface sees the conversations opened over Kafka (one store)
        assert service.state(cid)["route"] == opened[cid]["route"]

    # round 1: one answered fully, two left (partly) open -> round 2
    n_poem = len(opened["g-refused"]["questions"])
    kafka.send("clarify.answers", answer("g-refused", 1, ["Four lines"] * n_poem), "g-refused")
    kafka.send("clarify.answers", answer("g-two-rounds", 1, ["The report", ""]), "g-two-rounds")
    kafka.send("clarify.answers", answer("g-budget", 1, ["", ""][:n_poem]), "g-budget")
    kafka.wait("clarify.questions", lambda m: m["conversation_id"] == "g-budget"
               and m["round"] == 2)  # fmt: skip
    kafka.wait("clarify.questions", lambda m: m["conversation_id"] == "g-two-rounds"
               and m["round"] == 2)  # fmt: skip
    before = {cid: service.state(cid) for cid in cases}
    assert before["g-two-rounds"]["round"] == 2 and before["g-budget"]["round"] == 2
    assert before["g-refused"]["outcome"] == "awaiting_reevaluation"

    # SIGKILL between rounds, then the round-1 answer redelivered and the round-2 answers
    service.kill()
    kafka.send("clarify.answers", answer("g-two-rounds", 1, ["The report", ""]), "g-two-rounds")
    kafka.send("clarify.answers", answer("g-two-rounds", 2, ["For my team"]), "g-two-rounds")
    kafka.send("clarify.answers", answer("g-budget", 2, ["n/a"] * len(
        before["g-budget"]["rounds"][1]["questions"])), "g-budget")  # fmt: skip
    service.start()
    for cid in cases:  # nothing lost, nothing asked twice: the same rounds after the restart
        after = service.state(cid)
        kept = len(before[cid]["rounds"])
        assert len(after["rounds"]) >= kept, cid
        assert [r["questions"] for r in after["rounds"][:kept]] == [
            r["questions"] for r in before[cid]["rounds"]], cid  # fmt: skip
    kafka.wait("clarify.escalations", lambda m: m["conversation_id"] == "g-budget")
    clarified = kafka.wait("clarify.clarified-requests",
                           lambda m: m["conversation_id"] == "g-two-rounds")  # fmt: skip
    two = last_for(clarified, "g-two-rounds")
    assert two["round"] == 2 and "For my team" in two["clarified_request"]
    assert service.state("g-budget")["escalation_reason"] == "budget_spent"
    state_two = service.state("g-two-rounds")
    assert (state_two["round"], state_two["outcome"]) == (2, "awaiting_reevaluation")
    assert len(state_two["rounds"]) == 2  # round 2 asked once, whatever was redelivered

    # re-evaluation outcomes: accepted, and refused again -> escalation
    kafka.send("clarify.outcomes", outcome("g-two-rounds", 2, "accepted"), "g-two-rounds")
    kafka.send("clarify.outcomes", outcome("g-refused", 1, "refused_again"), "g-refused")
    escalations = kafka.wait("clarify.escalations", lambda m: m["conversation_id"] == "g-refused")
    refused = last_for(escalations, "g-refused")
    assert refused["reason"] == "refused_again"
    assert refused["state"]["rounds"][0]["answers"][0]["text"] == "Four lines"
    assert service.state("g-two-rounds")["outcome"] == "clarified"

    # the same steps over HTTP give the same state
    reply = service.http.post("/v1/clarify/h-g-refused/answer",
                              json=answer("h-g-refused", 1, ["Four lines"] * n_poem))  # fmt: skip
    assert reply.status_code == 200 and reply.json()["clarified_request"] is not None
    reply = service.http.post("/v1/clarify/h-g-refused/outcome",
                              json=outcome("h-g-refused", 1, "refused_again"))  # fmt: skip
    assert reply.json()["escalation"]["reason"] == "refused_again"
    kafka_state, http_state = service.state("g-refused"), service.state("h-g-refused")
    for field in ("route", "category", "round", "outcome", "escalation_reason", "revision"):
        assert kafka_state[field] == http_state[field], field
    assert [r["questions"] for r in kafka_state["rounds"]] == [
        r["questions"] for r in http_state["rounds"]]  # fmt: skip

    # the audit trail and the review app beside the running service
    add_ann(dep)
    review, url = start_review(dep)
    try:
        reviewer = Reviewer(url, "ann", "ann-password-1")
        deadline = time.monotonic() + 30
        while True:
            page = reviewer.http.get("/clarifications")
            assert page.status_code == 200, page.text
            if "g-refused" in page.text and "g-budget" in page.text:
                break
            assert time.monotonic() < deadline, page.text[-3000:]
            time.sleep(0.5)
        detail = reviewer.http.get("/clarification", params={"id": "g-refused"})
        assert detail.status_code == 200
        for text in ("Write a poem", "Four lines", "refused again", POEM["refusal"]):
            assert text in detail.text.replace("_", " "), text
        reviewer.close()
    finally:
        review.send_signal(signal.SIGTERM)
        review.wait(30)
    rows = dep.sql(
        "SELECT conversation_id, max(revision) AS r, countDistinct(revision) AS n "
        "FROM clarification_steps FINAL GROUP BY conversation_id ORDER BY conversation_id"
    )
    by_id = {r["conversation_id"]: r for r in rows}
    assert set(cases) <= set(by_id)
    for cid in cases:  # one row per state, up to the current one
        assert by_id[cid]["n"] == by_id[cid]["r"] + 1 == service.state(cid)["revision"] + 1, cid


def outputs_of(dep: Deployment, suffix: str, cid: str) -> list[dict[str, Any]]:
    """The messages of ``suffix`` keyed ``cid`` (read once: no waiting)."""
    found = []
    for m in read_topic(dep.bootstrap, dep.topic(suffix), idle=1.5):
        if m.key() == cid.encode():
            found.append(orjson.loads(m.value()))
    return found


def test_steps_made_over_http_reach_the_output_topics(dep: Deployment, service: Service) -> None:
    """The newcomer's report: c-1 opened, answered and refused again over HTTP; c-2 opened
    and answered over Kafka, its outcome over HTTP. Every step's outputs are on the topics,
    keyed by the conversation id, by the time its HTTP answer arrives (read once, no wait)."""
    kafka = Kafka(dep)
    http = service.http
    asked = http.post("/v1/clarify", json=request("c-1", POEM))
    assert asked.status_code == 200, asked.text
    assert outputs_of(dep, "clarify.questions", "c-1") == [asked.json()]
    n = len(asked.json()["questions"])
    step = http.post("/v1/clarify/c-1/answer", json=answer("c-1", 1, ["Four lines"] * n)).json()
    assert outputs_of(dep, "clarify.clarified-requests", "c-1") == [step["clarified_request"]]
    assert outputs_of(dep, "clarify.questions", "c-1")[-1] == step["conversation"]
    step = http.post("/v1/clarify/c-1/outcome", json=outcome("c-1", 1, "refused_again")).json()
    escalated = outputs_of(dep, "clarify.escalations", "c-1")
    assert escalated == [step["escalation"]] and escalated[0]["reason"] == "refused_again"
    assert escalated[0]["state"]["rounds"][0]["answers"][0]["text"] == "Four lines"
    # a retried call is recognised as a repeat and publishes its outputs again (at least once)
    again = http.post("/v1/clarify/c-1/outcome", json=outcome("c-1", 1, "refused_again"))
    assert again.status_code == 200 and again.json()["escalation"] == step["escalation"]
    assert len(outputs_of(dep, "clarify.escalations", "c-1")) == 2

    kafka.send("clarify.requests", request("c-2", SUMMARY), "c-2")
    opened = last_for(kafka.wait("clarify.questions", lambda m: m["conversation_id"] == "c-2"),
                      "c-2")  # fmt: skip
    texts = ["The quarterly report"] * len(opened["questions"])
    kafka.send("clarify.answers", answer("c-2", 1, texts), "c-2")
    kafka.wait("clarify.clarified-requests", lambda m: m["conversation_id"] == "c-2")
    step = http.post("/v1/clarify/c-2/outcome", json=outcome("c-2", 1, "refused_again")).json()
    assert outputs_of(dep, "clarify.escalations", "c-2") == [step["escalation"]]
    assert service.state("c-2")["outcome"] == "escalated"
    # an answer dated before its questions is refused on both interfaces
    asked = http.post("/v1/clarify", json=request("c-3", POEM)).json()
    early = {**answer("c-3", 1, ["x"] * len(asked["questions"])),
             "answered_at": "2026-02-01T09:01:00Z"}  # fmt: skip
    refused = http.post("/v1/clarify/c-3/answer", json=early)
    assert (refused.status_code, refused.json()["error"]["code"]) == (422, "invalid_time")
    kafka.send("clarify.answers", early, "c-3")
    kafka.wait("dead-letters", lambda m: True)
    letters = list(read_topic(dep.bootstrap, dep.topic("dead-letters"), idle=1.5))
    assert [dict(m.headers() or [])["x-reason-code"] for m in letters] == [b"invalid_time"]
    assert service.state("c-3")["outcome"] == "asking"
    # an answer dated far ahead of the service's clock is refused on both interfaces, naming
    # the field, and the conversation goes on (it used to refuse every later outcome)
    future = {**early, "answered_at": "9999-12-31T00:00:00Z"}
    refused = http.post("/v1/clarify/c-3/answer", json=future)
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("time_in_future", "answered_at")
    assert "answered_at 9999-12-31" in error["message"]
    kafka.send("clarify.answers", future, "c-3")
    deadline = time.monotonic() + 60
    while len(letters) < 2 and time.monotonic() < deadline:
        letters = list(read_topic(dep.bootstrap, dep.topic("dead-letters"), idle=1.5))
    codes = [dict(m.headers() or [])["x-reason-code"] for m in letters]
    assert codes == [b"invalid_time", b"time_in_future"]
    assert service.state("c-3")["outcome"] == "asking"
    kafka.send("clarify.answers", answer("c-3", 1, ["x"] * len(asked["questions"])), "c-3")
    kafka.wait("clarify.clarified-requests", lambda m: m["conversation_id"] == "c-3")
    late = http.post("/v1/clarify/c-3/outcome", json=outcome("c-3", 1, "accepted"))
    assert late.status_code == 200 and late.json()["conversation"]["outcome"] == "clarified"


def test_bad_input_on_every_topic_is_dead_lettered_and_nothing_is_lost(
    dep: Deployment, service: Service
) -> None:
    kafka = Kafka(dep)
    kafka.send("clarify.requests", b"{not json")
    kafka.send("clarify.answers", b"[1, 2")
    kafka.send("clarify.outcomes", b"")
    kafka.send("clarify.requests", None)  # a tombstone
    kafka.send("clarify.requests", request("big", {"request": "x" * 20_001, "refusal": "no"}))
    kafka.send("clarify.requests", b"{" + b" " * 300_000 + b"}")  # over clarify_max_body_bytes
    kafka.send("clarify.answers", answer("nobody", 1, ["hi", "there"]))
    kafka.send("clarify.requests", request("fin", PASSWORDS))  # not asked: finished at once
    # requests and answers are different topics, read side by side: an answer is "finished"
    # only once its conversation is (else it would be "unknown_conversation")
    deadline = time.monotonic() + 60
    while service.http.get("/v1/clarify/fin").status_code != 200:
        assert time.monotonic() < deadline, "the finished conversation never appeared"
        time.sleep(0.2)
    kafka.send("clarify.answers", answer("fin", 1, ["hi", "there"]))
    kafka.send("clarify.outcomes", outcome("nobody", 1, "accepted"))
    # keys: the conversation id, or the message is dead-lettered (ordering depends on it)
    kafka.send("clarify.requests", request("keyed-other", POEM), "someone-else")
    kafka.send("clarify.requests", request("no-key", POEM), None)
    kafka.send("clarify.answers", answer("fin", 1, ["hi", "there"]), "not-fin")
    # an id that could not be reached over HTTP
    kafka.send("clarify.requests", request("../../etc/passwd", POEM), "../../etc/passwd")
    kafka.send("clarify.requests", request("ok-after", POEM))  # still served afterwards
    kafka.wait("clarify.questions", lambda m: m["conversation_id"] == "ok-after")
    letters = list(read_topic(dep.bootstrap, dep.topic("dead-letters"), idle=2.0))
    codes = sorted(dict(m.headers() or [])["x-reason-code"].decode() for m in letters)
    assert codes == sorted(["not_json", "not_json", "not_json", "tombstone", "invalid_request",
                            "oversized", "unknown_conversation", "finished",
                            "unknown_conversation", "key_mismatch", "missing_key",
                            "key_mismatch", "invalid_request"])  # fmt: skip
    for m in letters:  # the reason names the rule, never the key or the id
        reason = str(dict(m.headers() or []).get("x-reason"))
        assert "someone-else" not in reason and "etc/passwd" not in reason
    assert service.http.get("/v1/clarify/keyed-other").status_code == 404
    assert service.http.get("/v1/clarify/no-key").status_code == 404
    assert service.proc is not None and service.proc.poll() is None
    # the same bad input over HTTP: clear errors, never a crash
    http = service.http
    malformed = http.post("/v1/clarify", content=b"{not json")
    assert malformed.json()["error"]["code"] == "malformed_json"
    assert http.post("/v1/clarify/nobody/answer",
                     json=answer("nobody", 1, ["a", "b"])).status_code == 404  # fmt: skip
    finished = http.post("/v1/clarify/fin/answer", json=answer("fin", 1, ["a", "b"]))
    assert finished.json()["error"]["code"] == "finished"
    big = http.post("/v1/clarify", json=request("big", {"request": "x" * 20_001, "refusal": "n"}))
    assert big.status_code == 422
    assert http.post("/v1/clarify", content=b"{" + b" " * 300_000 + b"}").status_code == 413
    assert http.get("/healthz").status_code == 200


def steps_of(dep: Deployment, cids: list[str]) -> dict[str, list[int]]:
    """conversation id -> the revisions ``clarification_steps`` holds, in order."""
    listed = ", ".join(f"'{cid}'" for cid in cids)
    rows = dep.sql(
        "SELECT conversation_id, arraySort(groupArray(revision)) AS revisions "
        f"FROM clarification_steps FINAL WHERE conversation_id IN ({listed}) "
        "GROUP BY conversation_id"
    )
    return {r["conversation_id"]: [int(v) for v in r["revisions"]] for r in rows}


def test_every_step_is_in_the_trail_after_a_sigkill(dep: Deployment, service: Service) -> None:
    """A step's trail row is stored before its 200 and before its input is committed, so a
    SIGKILL right after the last step loses no intermediate revision (the start-up
    reconciliation only knows each conversation's newest state)."""
    kafka = Kafka(dep)
    http = service.http
    # over Kafka: opened and answered
    kafka.send("clarify.requests", request("t-kafka", SUMMARY), "t-kafka")
    opened = last_for(
        kafka.wait("clarify.questions", lambda m: m["conversation_id"] == "t-kafka"), "t-kafka"
    )
    texts = ["The quarterly report"] * len(opened["questions"])
    kafka.send("clarify.answers", answer("t-kafka", 1, texts), "t-kafka")
    kafka.wait("clarify.clarified-requests", lambda m: m["conversation_id"] == "t-kafka")
    # over HTTP: three steps in quick succession, then SIGKILL at once (no time
    # left for a background writer)
    asked = http.post("/v1/clarify", json=request("t-http", POEM))
    assert asked.status_code == 200, asked.text
    n = len(asked.json()["questions"])
    step = http.post("/v1/clarify/t-http/answer", json=answer("t-http", 1, ["Four lines"] * n))
    assert step.status_code == 200, step.text
    step = http.post("/v1/clarify/t-http/outcome", json=outcome("t-http", 1, "refused_again"))
    assert step.status_code == 200, step.text
    service.kill()
    service.start()
    # the HTTP steps were answered, so their rows were stored: no waiting
    assert steps_of(dep, ["t-http"]) == {"t-http": [0, 1, 2]}
    expected = {"t-http": [0, 1, 2], "t-kafka": [0, 1]}
    deadline = time.monotonic() + 60  # a redelivered answer may still be in flight
    while (found := steps_of(dep, list(expected))) != expected:
        assert time.monotonic() < deadline, found
        time.sleep(0.5)
    assert service.state("t-http")["revision"] == 2
    assert service.state("t-kafka")["revision"] == 1


def test_a_second_instance_refuses_to_start(dep: Deployment, service: Service) -> None:
    """Only one instance may serve a state topic: a second ``clarify serve --kafka`` with the
    same settings exits 2 with a clear error while the first one serves, and the first one
    goes on serving."""
    second = Service(dep)
    log = dep.data_dir / "clarify-second.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "refusal_audit.cli", "clarify", "serve", "--kafka",
             "--port", str(second.port)],
            cwd=REPO, env=dep.env(), stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        assert proc.wait(60) == 2, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        second.http.close()
    text = " ".join(log.read_text().split())
    assert "another clarification service is consuming" in text, text[-3000:]
    assert "only one instance may serve a state topic" in text
    Kafka(dep).send("clarify.requests", request("after-refusal", POEM))
    Kafka(dep).wait("clarify.questions", lambda m: m["conversation_id"] == "after-refusal")
    assert service.state("after-refusal")["outcome"] == "asking"
