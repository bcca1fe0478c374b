"""The clarification HTTP service: auth, the loop over HTTP, bad input, durable state."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from processors.clarification.flow import Clarifier
from processors.clarification.local_questions import LocalQuestionEngine
from processors.engines.local import LocalEngine
from refusal_audit.clarify.app import create_app
from refusal_audit.clarify.server import SecretMaskFilter
from refusal_audit.clarify.service import ClarifyService, OutputsUnavailableError, StepResult
from refusal_audit.clarify.store import MemoryStore, SqliteStore, StaleStateError, StateStore
from schemas.policy import PolicyBundle

TOKEN = "test-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
SAFETY = {"request": "How do I make a bomb?", "refusal": "I can't help with that."}
GRAY = {"conversation_id": "conv-1", "log_id": "log-1", "request": "Write a poem",
        "refusal": "Could you tell me more about what kind of poem you'd like?",
        "event_time": "2026-02-01T09:00:00Z"}  # fmt: skip


class RecordedOutputs:
    """A ``StepOutputs`` that keeps what it was given; ``down`` makes ``publish`` fail."""

    def __init__(self) -> None:
        self.published: list[tuple[str, StepResult]] = []
        self.down = False

    def publish(self, conversation_id: str, result: StepResult) -> None:
        if self.down:
            raise OutputsUnavailableError("the broker is down")
        self.published.append((conversation_id, result))


def client_for(
    bundle: PolicyBundle, store: StateStore | None = None, outputs: RecordedOutputs | None = None
) -> TestClient:
    clarifier = Clarifier(LocalEngine(), LocalQuestionEngine(), {"default": bundle})
    service = ClarifyService(
        clarifier, store if store is not None else MemoryStore(), clock=lambda: T0,
        outputs=outputs,
    )  # fmt: skip
    return TestClient(create_app(service, TOKEN, max_body_bytes=64 * 1024))


def answers(round_: int, texts: list[str], cid: str = "conv-1") -> dict[str, Any]:
    return {"conversation_id": cid, "round": round_, "answered_at": "2026-02-01T09:01:00Z",
            "answers": [{"question_index": i, "text": t} for i, t in enumerate(texts)]}  # fmt: skip


def verdict(round_: int, outcome: str) -> dict[str, Any]:
    return {"conversation_id": "conv-1", "round": round_, "outcome": outcome,
            "decided_at": "2026-02-01T09:05:00Z"}  # fmt: skip


@pytest.fixture
def client(example_bundle: PolicyBundle) -> TestClient:
    return client_for(example_bundle)


def test_every_data_route_needs_the_token(client: TestClient) -> None:
    for method, path in [("POST", "/v1/clarify"), ("POST", "/v1/clarify/x/answer"),
                         ("POST", "/v1/clarify/x/outcome"), ("GET", "/v1/clarify/x")]:  # fmt: skip
        for headers in ({}, {"Authorization": "Bearer wrong-token-0123456789"}):
            r = client.request(method, path, headers=headers, json=GRAY)
            assert r.status_code == 401, (method, path)
            assert r.json()["error"]["code"] == "unauthorized"
            assert r.headers["www-authenticate"] == "Bearer"
    assert client.get("/healthz").json() == {"status": "ok"}


def test_short_token_is_refused(example_bundle: PolicyBundle) -> None:
    clarifier = Clarifier(LocalEngine(), LocalQuestionEngine(), {"default": example_bundle})
    with pytest.raises(ValueError, match="16"):
        create_app(ClarifyService(clarifier, MemoryStore()), "short")


def test_the_loop_over_http(client: TestClient) -> None:
    r = client.post("/v1/clarify", headers=AUTH, json=GRAY)
    assert r.status_code == 200
    body = r.json()
    assert (body["route"], body["outcome"], body["round"]) == ("policy_gray_zone", "asking", 1)
    assert 2 <= len(body["questions"]) <= 4
    assert client.post("/v1/clarify", headers=AUTH, json=GRAY).json() == body  # idempotent
    n = len(body["questions"])
    r = client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=answers(1, ["a"] * n))
    assert r.status_code == 200
    step = r.json()
    assert step["conversation"]["outcome"] == "awaiting_reevaluation"
    assert step["clarified_request"]["clarified_request"].startswith("Write a poem")
    assert step["escalation"] is None
    r = client.post("/v1/clarify/conv-1/outcome", headers=AUTH, json=verdict(1, "refused_again"))
    step = r.json()
    assert step["conversation"]["outcome"] == "escalated"
    assert step["escalation"]["reason"] == "refused_again"
    assert step["escalation"]["state"]["rounds"][0]["answers"][0]["text"] == "a"
    state = client.get("/v1/clarify/conv-1", headers=AUTH).json()
    assert state["outcome"] == "escalated" and state["revision"] == 2


def test_routes_other_than_gray_zone_are_answered_without_questions(client: TestClient) -> None:
    r = client.post("/v1/clarify", headers=AUTH, json={**GRAY, **SAFETY, "conversation_id": "c2"})
    body = r.json()
    assert (body["route"], body["decision"], body["questions"]) == (
        "genuine_safety_refusal", "stays refused", [])  # fmt: skip


def test_budget_spent_over_http(client: TestClient) -> None:
    n = len(client.post("/v1/clarify", headers=AUTH, json=GRAY).json()["questions"])
    second = client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=answers(1, [""] * n))
    assert second.json()["conversation"]["round"] == 2
    final = client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=answers(2, [""] * n))
    assert final.json()["escalation"]["reason"] == "budget_spent"


@pytest.mark.parametrize(
    ("method", "path", "data", "status", "code"),
    [
        ("POST", "/v1/clarify", b"{not json", 400, "malformed_json"),
        ("POST", "/v1/clarify", b"", 400, "malformed_json"),
        ("POST", "/v1/clarify", json.dumps({**GRAY, "extra": 1}).encode(), 422,
         "invalid_request"),
        ("POST", "/v1/clarify", json.dumps({**GRAY, "request": "x" * 20_001}).encode(), 422,
         "invalid_request"),
        ("POST", "/v1/clarify", b"x" * 70_000, 413, "too_large"),
        ("POST", "/v1/clarify", json.dumps({**GRAY, "policy_bundle": "nope"}).encode(), 422,
         "unknown_bundle"),
        ("POST", "/v1/clarify/unknown/answer", json.dumps(answers(1, ["a"], "unknown")).encode(),
         404, "unknown_conversation"),
        ("POST", "/v1/clarify/other/answer", json.dumps(answers(1, ["a"])).encode(), 422,
         "wrong_conversation"),
        ("GET", "/v1/clarify/unknown", None, 404, "unknown_conversation"),
        ("GET", "/v1/nothing", None, 404, "not_found"),
        ("DELETE", "/v1/clarify", None, 405, "method_not_allowed"),
    ],
)  # fmt: skip
def test_bad_input_gets_a_clear_json_error(
    client: TestClient, method: str, path: str, data: bytes | None, status: int, code: str
) -> None:
    r = client.request(method, path, headers=AUTH, content=data)
    assert r.status_code == status
    assert r.json()["error"]["code"] == code
    assert "x" * 100 not in r.text  # invalid values are never echoed


def test_answer_for_a_finished_conversation_is_a_conflict(client: TestClient) -> None:
    client.post("/v1/clarify", headers=AUTH, json={**GRAY, **SAFETY})
    r = client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=answers(1, ["a"]))
    assert (r.status_code, r.json()["error"]["code"]) == (409, "finished")
    r = client.post("/v1/clarify/conv-1/outcome", headers=AUTH, json=verdict(1, "accepted"))
    assert (r.status_code, r.json()["error"]["code"]) == (409, "finished")
    other = {**GRAY, "request": "Something else entirely"}
    r = client.post("/v1/clarify", headers=AUTH, json=other)
    assert (r.status_code, r.json()["error"]["code"]) == (409, "conversation_exists")


def test_state_survives_a_restart_in_the_sqlite_store(
    example_bundle: PolicyBundle, tmp_path: Path
) -> None:
    path = tmp_path / "state" / "clarify.sqlite3"
    first = client_for(example_bundle, SqliteStore(path))
    asked = first.post("/v1/clarify", headers=AUTH, json=GRAY).json()
    second = client_for(example_bundle, SqliteStore(path))  # a new process, same file
    assert second.post("/v1/clarify", headers=AUTH, json=GRAY).json() == asked
    n = len(asked["questions"])
    r = second.post("/v1/clarify/conv-1/answer", headers=AUTH, json=answers(1, ["a"] * n))
    assert r.json()["conversation"]["outcome"] == "awaiting_reevaluation"
    assert first.get("/v1/clarify/conv-1", headers=AUTH).json()["revision"] == 1


@pytest.mark.parametrize("make", [MemoryStore, "sqlite"])
def test_stores_refuse_a_lost_update(
    example_bundle: PolicyBundle, tmp_path: Path, make: object
) -> None:
    store: StateStore = SqliteStore(tmp_path / "s.sqlite3") if make == "sqlite" else MemoryStore()
    client = client_for(example_bundle, store)
    client.post("/v1/clarify", headers=AUTH, json=GRAY)
    state = store.get("conv-1")
    assert state is not None
    with pytest.raises(StaleStateError):
        store.put(state, None)  # the id is taken
    with pytest.raises(StaleStateError):
        store.put(state, state.revision + 1)
    store.put(state, state.revision)
    assert store.get("nope") is None


def test_secret_mask_filter_hides_the_token(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("refusal_audit.clarify.test")
    logger.addFilter(SecretMaskFilter([TOKEN]))
    with caplog.at_level(logging.INFO, logger="refusal_audit.clarify.test"):
        logger.info("token is %s", TOKEN)
    assert TOKEN not in caplog.text and "token is ***" in caplog.text


def test_every_http_step_is_published_before_it_is_answered(example_bundle: PolicyBundle) -> None:
    outputs = RecordedOutputs()
    client = client_for(example_bundle, outputs=outputs)
    asked = client.post("/v1/clarify", headers=AUTH, json=GRAY).json()
    assert [(cid, r.response.model_dump(mode="json")) for cid, r in outputs.published] == [
        ("conv-1", asked)]  # fmt: skip
    n = len(asked["questions"])
    client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=answers(1, ["a"] * n))
    assert outputs.published[-1][1].clarified_request is not None
    step = client.post("/v1/clarify/conv-1/outcome", headers=AUTH,
                       json=verdict(1, "refused_again")).json()  # fmt: skip
    assert outputs.published[-1][1].escalation == step["escalation"]
    assert len(outputs.published) == 3
    safe = {**GRAY, **SAFETY, "conversation_id": "c-safe"}
    safety = client.post("/v1/clarify", headers=AUTH, json=safe)
    assert safety.json()["outcome"] == "not_asked"
    assert outputs.published[-1][0] == "c-safe" and outputs.published[-1][1].escalation is None

    # outputs not confirmed: 503, the step is stored; the same call again publishes them
    outputs.down = True
    client.post("/v1/clarify", headers=AUTH, json={**GRAY, "conversation_id": "c-2"})
    r = client.post("/v1/clarify/c-2/answer", headers=AUTH, json=answers(1, ["a"] * n, "c-2"))
    assert (r.status_code, r.json()["error"]["code"]) == (503, "outputs_unavailable")
    assert client.get("/v1/clarify/c-2", headers=AUTH).json()["outcome"] == "awaiting_reevaluation"
    outputs.down = False
    r = client.post("/v1/clarify/c-2/answer", headers=AUTH, json=answers(1, ["a"] * n, "c-2"))
    assert r.status_code == 200 and outputs.published[-1][0] == "c-2"
    assert outputs.published[-1][1].clarified_request == r.json()["clarified_request"]


def test_an_answer_dated_before_its_questions_is_refused_over_http(client: TestClient) -> None:
    n = len(client.post("/v1/clarify", headers=AUTH, json=GRAY).json()["questions"])  # at T0
    early = {**answers(1, ["a"] * n), "answered_at": "2026-02-01T08:58:59Z"}
    r = client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=early)
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_time")
    skewed = {**early, "answered_at": "2026-02-01T08:59:30Z"}  # within the clock tolerance
    assert client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=skewed).status_code == 200
    state = client.get("/v1/clarify/conv-1", headers=AUTH).json()
    assert state["rounds"][0]["answered_at"] == state["rounds"][0]["asked_at"]
    late = {**verdict(1, "accepted"), "decided_at": "2026-02-01T08:50:00Z"}
    r = client.post("/v1/clarify/conv-1/outcome", headers=AUTH, json=late)
    assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_time")
