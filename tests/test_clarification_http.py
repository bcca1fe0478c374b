"""The clarification HTTP service: auth, the loop over HTTP, bad input, durable state."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from processors.clarification.flow import Clarifier
from processors.clarification.local_questions import LocalQuestionEngine
from processors.engines.local import LocalEngine
from refusal_audit.clarification.app import create_app
from refusal_audit.clarification.server import SecretMaskFilter
from refusal_audit.clarification.service import (
    ClarifyService,
    OutputsUnavailableError,
    ServiceError,
    StepResult,
)
from refusal_audit.clarification.store import MemoryStore, SqliteStore, StaleStateError, StateStore
from refusal_audit.clarification.trail import StepTrail
from schemas.clarification import ClarificationAnswer, ClarificationRequest
from schemas.policy import PolicyBundle
from warehouse import Warehouse
from warehouse.clarification import conversation_steps
from warehouse.client import WarehouseError

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
    bundle: PolicyBundle,
    store: StateStore | None = None,
    outputs: RecordedOutputs | None = None,
    trail: StepTrail | None = None,
) -> TestClient:
    clarifier = Clarifier(LocalEngine(), LocalQuestionEngine(), {"default": bundle})
    service = ClarifyService(
        clarifier, store if store is not None else MemoryStore(), clock=lambda: T0,
        outputs=outputs, trail=trail,
    )  # fmt: skip
    return TestClient(create_app(service, TOKEN, max_body_bytes=64 * 1024))


class FlakyWarehouse:
    """Makes ``warehouse``'s inserts fail while ``down`` (as an unreachable store would,
    after its retries); ``gate``, when set, holds every insert until it is opened."""

    def __init__(self, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch) -> None:
        self.warehouse = warehouse
        self.down = False
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.inserts: list[int] = []
        real = warehouse.insert_rows

        def insert_rows(table: str, columns: Any, rows: list[list[Any]]) -> None:
            self.entered.set()
            if self.gate is not None:
                self.gate.wait(30)
            if self.down:
                raise WarehouseError("the warehouse is unreachable")
            real(table, columns, rows)
            self.inserts.append(len(rows))

        monkeypatch.setattr(warehouse, "insert_rows", insert_rows)

    def revisions(self, cid: str) -> list[int]:
        return [int(r["revision"]) for r in conversation_steps(self.warehouse, cid)]


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


def test_secret_mask_filter_keeps_the_arguments_shape() -> None:
    masker = SecretMaskFilter([TOKEN])
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1,
                               '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5000", "POST", f"/v1/clarify?token={TOKEN}", "1.1", 401),
                               None)  # fmt: skip
    assert masker.filter(record)
    assert isinstance(record.args, tuple) and len(record.args) == 5
    assert record.args[2] == "/v1/clarify?token=***" and record.args[4] == 401
    mapping = logging.LogRecord("x", logging.INFO, __file__, 1, "%(t)s %(n)d",
                                None, None)  # fmt: skip
    mapping.args = {"t": TOKEN, "n": 3}
    masker.filter(mapping)
    assert mapping.getMessage() == "*** 3"
    # an argument whose text shows the token, under %d: the masked text, without arguments
    odd = logging.LogRecord("x", logging.INFO, __file__, 1, "n=%d %s", (1, ValueError(TOKEN)),
                            None)  # fmt: skip
    masker.filter(odd)
    assert odd.getMessage() == "n=1 ***"


@pytest.fixture
def uvicorn_logging() -> Iterator[None]:
    """Restore the uvicorn loggers (uvicorn's dictConfig replaces their handlers)."""
    names = ("refusal_audit", "uvicorn", "uvicorn.error", "uvicorn.access", "openai", "httpx")
    saved = {n: (lg.handlers[:], lg.filters[:], lg.level, lg.propagate)
             for n in names for lg in [logging.getLogger(n)]}  # fmt: skip
    yield
    for name, (handlers, filters, level, propagate) in saved.items():
        logger = logging.getLogger(name)
        logger.handlers[:], logger.filters[:] = handlers, filters
        logger.setLevel(level)
        logger.propagate = propagate


def test_a_token_in_the_query_string_is_logged_masked_by_uvicorn(
    example_bundle: PolicyBundle, capsys: pytest.CaptureFixture[str], uvicorn_logging: None
) -> None:
    """``curl "$B/v1/clarify?token=$TOKEN"``: 401, and uvicorn's access line is written with
    the token masked (the filter keeps the five arguments its formatter unpacks), without a
    ``--- Logging error ---``."""
    import socket

    import httpx
    import uvicorn

    from refusal_audit.clarification.server import install_secret_filter

    clarifier = Clarifier(LocalEngine(), LocalQuestionEngine(), {"default": example_bundle})
    app = create_app(ClarifyService(clarifier, MemoryStore()), TOKEN)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="info")  # dictConfig
    install_secret_filter([TOKEN])  # as serve() does, after uvicorn's logging is configured
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.05)
        reply = httpx.post(f"http://127.0.0.1:{port}/v1/clarify?token={TOKEN}", content=b"{}")
        assert reply.status_code == 401
    finally:
        server.should_exit = True
        thread.join(10)
    out, err = capsys.readouterr()
    assert "Logging error" not in out + err and "TypeError" not in out + err
    assert TOKEN not in out + err
    assert '"POST /v1/clarify?token=*** HTTP/1.1" 401' in out + err


def test_an_unsafe_conversation_id_is_refused_over_http(client: TestClient) -> None:
    for cid in ("../../etc/passwd", "a/b", "nul\x00byte", "tab\there"):
        r = client.post("/v1/clarify", headers=AUTH, json={**GRAY, "conversation_id": cid})
        assert r.status_code == 422, cid
        body = r.json()["error"]
        assert body["code"] == "invalid_request" and "conversation_id" in r.text
        assert cid not in r.text
        for route in ("answer", "outcome"):
            payload = answers(1, ["a"]) if route == "answer" else verdict(1, "accepted")
            r = client.post(f"/v1/clarify/conv-1/{route}", headers=AUTH,
                            json={**payload, "conversation_id": cid})  # fmt: skip
            assert r.status_code == 422, (cid, route)


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


def test_a_time_ahead_of_the_service_clock_is_refused_over_http(client: TestClient) -> None:
    """An answer dated 9999-12-31 used to be stored, after which every outcome was refused as
    ``invalid_time`` (the conversation stuck): a time ahead of the service's clock (T0) by
    more than the allowed skew (300 s by default) is a 422 naming the field."""
    n = len(client.post("/v1/clarify", headers=AUTH, json=GRAY).json()["questions"])  # at T0
    for when in ("9999-12-31T00:00:00Z", "2026-02-01T09:05:01Z"):
        ahead = {**answers(1, ["a"] * n), "answered_at": when}
        r = client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=ahead)
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert (error["code"], error["field"]) == ("time_in_future", "answered_at")
        assert f"answered_at {when[:10]}" in error["message"]
    assert client.get("/v1/clarify/conv-1", headers=AUTH).json()["outcome"] == "asking"
    skewed = {**answers(1, ["a"] * n), "answered_at": "2026-02-01T09:05:00Z"}  # 300 s ahead
    assert client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=skewed).status_code == 200
    far = {**verdict(1, "accepted"), "decided_at": "9999-12-31T00:00:00Z"}
    r = client.post("/v1/clarify/conv-1/outcome", headers=AUTH, json=far)
    assert (r.status_code, r.json()["error"]["field"]) == (422, "decided_at")
    r = client.post("/v1/clarify/conv-1/outcome", headers=AUTH, json=verdict(1, "accepted"))
    assert r.status_code == 200 and r.json()["conversation"]["outcome"] == "clarified"


def test_every_http_step_is_in_the_trail_before_it_is_answered(
    example_bundle: PolicyBundle, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trail row is part of the step: stored before the 200; a warehouse that does not
    store it is a 503 ``trail_unavailable`` (the state stored, nothing acknowledged), and the
    same call again -- a repeat -- writes the row."""
    store = FlakyWarehouse(warehouse, monkeypatch)
    trail = StepTrail(warehouse, rate=0.0)
    outputs = RecordedOutputs()
    client = client_for(example_bundle, outputs=outputs, trail=trail)
    try:
        asked = client.post("/v1/clarify", headers=AUTH, json=GRAY)
        assert asked.status_code == 200 and store.revisions("conv-1") == [0]
        n = len(asked.json()["questions"])

        store.down = True
        r = client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=answers(1, ["a"] * n))
        assert (r.status_code, r.json()["error"]["code"]) == (503, "trail_unavailable")
        state = client.get("/v1/clarify/conv-1", headers=AUTH).json()
        assert (state["outcome"], state["revision"]) == ("awaiting_reevaluation", 1)
        assert store.revisions("conv-1") == [0]
        r = client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=answers(1, ["a"] * n))
        assert r.status_code == 503  # still down: still not acknowledged
        store.down = False
        r = client.post("/v1/clarify/conv-1/answer", headers=AUTH, json=answers(1, ["a"] * n))
        assert r.status_code == 200 and r.json()["clarified_request"] is not None
        assert store.revisions("conv-1") == [0, 1]  # the repeat wrote the row

        # an opening whose row was not stored: the same request again writes it
        store.down = True
        other = {**GRAY, "conversation_id": "c-2", "log_id": "log-2"}
        r = client.post("/v1/clarify", headers=AUTH, json=other)
        assert (r.status_code, r.json()["error"]["code"]) == (503, "trail_unavailable")
        store.down = False
        assert client.post("/v1/clarify", headers=AUTH, json=other).status_code == 200
        assert store.revisions("c-2") == [0]

        # a caller that gives up after the 503: the conversation's next step writes the row
        store.down = True
        r = client.post("/v1/clarify/c-2/answer", headers=AUTH, json=answers(1, ["a"] * n, "c-2"))
        assert r.status_code == 503
        store.down = False
        late = {**verdict(1, "accepted"), "conversation_id": "c-2"}
        assert client.post("/v1/clarify/c-2/outcome", headers=AUTH, json=late).status_code == 200
        assert store.revisions("c-2") == [0, 1, 2]
        assert [s["step"] for s in conversation_steps(warehouse, "c-2")] == [
            "opened", "answered", "accepted"]  # fmt: skip
    finally:
        trail.close()


def as_request(body: dict[str, Any]) -> ClarificationRequest:
    return ClarificationRequest.model_validate_json(json.dumps(body))


def as_answer(body: dict[str, Any]) -> ClarificationAnswer:
    return ClarificationAnswer.model_validate_json(json.dumps(body))


def test_the_service_refuses_a_step_whose_row_is_not_stored(
    example_bundle: PolicyBundle, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the Kafka loop sees (it does not commit on a 5xx ``ServiceError``); and a
    trail that does not answer in time is refused too."""
    store = FlakyWarehouse(warehouse, monkeypatch)
    trail = StepTrail(warehouse, rate=0.0)
    clarifier = Clarifier(LocalEngine(), LocalQuestionEngine(), {"default": example_bundle})
    service = ClarifyService(clarifier, MemoryStore(), clock=lambda: T0, trail=trail,
                             trail_timeout=0.5)  # fmt: skip

    async def go() -> None:
        opened, _ = await service.open(as_request(GRAY))
        n = len(opened.questions)
        store.down = True
        with pytest.raises(ServiceError) as refused:
            await service.answer("conv-1", as_answer(answers(1, ["a"] * n)))
        assert (refused.value.status, refused.value.code) == (503, "trail_unavailable")
        store.down = False
        store.gate = threading.Event()  # the warehouse hangs
        with pytest.raises(ServiceError) as slow:
            await service.answer("conv-1", as_answer(answers(1, ["a"] * n)))
        assert slow.value.code == "trail_unavailable"
        store.gate.set()
        store.gate = None
        await service.answer("conv-1", as_answer(answers(1, ["a"] * n)))

    try:
        asyncio.run(go())
    finally:
        trail.close()
    assert store.revisions("conv-1") == [0, 1]


def test_concurrent_steps_share_an_insert(
    example_bundle: PolicyBundle, warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Group commit: while one insert runs, the rows of the steps that arrive meanwhile are
    written together in the next one, and every step waits for its own rows."""
    store = FlakyWarehouse(warehouse, monkeypatch)
    store.gate = threading.Event()
    trail = StepTrail(warehouse, rate=0.0)
    clarifier = Clarifier(LocalEngine(), LocalQuestionEngine(), {"default": example_bundle})
    service = ClarifyService(clarifier, MemoryStore(), clock=lambda: T0, trail=trail)

    async def go() -> None:
        first = asyncio.create_task(service.open(as_request(GRAY)))
        await asyncio.to_thread(store.entered.wait, 30)  # the first insert is in progress
        rest = [
            asyncio.create_task(
                service.open(
                    as_request({**GRAY, "conversation_id": f"g-{i}", "log_id": f"log-g-{i}"})
                )
            )
            for i in range(20)
        ]
        await asyncio.sleep(0.2)
        assert not any(t.done() for t in [first, *rest])  # nobody answered before its row
        assert store.gate is not None
        store.gate.set()
        await asyncio.gather(first, *rest)

    try:
        asyncio.run(go())
    finally:
        trail.close()
    assert store.inserts == [1, 20] and trail.inserts == 2
    assert all(store.revisions(f"g-{i}") == [0] for i in range(20))
