"""The clarification service's HTTP interface (Starlette), for synchronous callers.

Routes (JSON in, JSON out; every route but ``/healthz`` needs ``Authorization: Bearer
<token>``, the shared API token):

- ``POST /v1/clarify``: a ``ClarificationRequest``; 200 with a ``ClarificationResponse`` (the
  route, the decision, the questions when asking; an existing conversation id with the same
  request answers again).
- ``POST /v1/clarify/{conversation_id}/answer``: a ``ClarificationAnswer``; 200 with
  ``{"conversation", "clarified_request", "escalation"}``.
- ``POST /v1/clarify/{conversation_id}/outcome``: a ``ReevaluationOutcome``; 200 as above.
- ``GET /v1/clarify/{conversation_id}``: the ``ConversationState``.
- ``GET /healthz``: ``{"status": "ok"}`` (no data, no token).

Errors are ``{"error": {"code", "message"[, "details"]}}``: 400 ``malformed_json``, 401
``unauthorized``, 404 ``unknown_conversation`` / ``not_found``, 405 ``method_not_allowed``,
409 (``finished``, ``not_asking``, ``not_awaiting``, ``wrong_round``, ``conflict``,
``conversation_exists``, ``concurrent_update``), 413 ``too_large``, 422
``invalid_request`` (schema; ``details`` list the fields, never their values),
``unknown_question``, ``unknown_bundle``, ``wrong_conversation``, ``invalid_time`` (an
answer dated before its round was asked, an outcome before its answer), ``time_in_future``
(``field`` names ``answered_at`` or ``decided_at``, ahead of the service's clock by more
than ``clarify_max_clock_skew_seconds``); 500
``internal_error`` (logged, no detail in the answer); 503 ``store_unavailable`` (nothing
stored), ``trail_unavailable`` (stored, but its audit trail row was not) and
``outputs_unavailable`` (stored, but the Kafka outputs were not confirmed): send the same
call again.

With ``clarify serve --kafka`` every step's outputs are on the Kafka output topics before
its 200 is sent (``ClarifyService.outputs``); with ``clarify_audit_trail`` its
``clarification_steps`` row is stored before it too (``ClarifyService.trail``).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from refusal_audit.clarification.service import ClarifyService, ServiceError
from schemas.clarification import ClarificationAnswer, ClarificationRequest, ReevaluationOutcome

DEFAULT_MAX_BODY_BYTES = 256 * 1024
"""Largest request body read: a request and a refusal of ``MAX_TEXT_CHARS`` (20,000)
characters each fit in 256 KiB unless most characters need 4 UTF-8 bytes."""

log = logging.getLogger("refusal_audit.clarify")

_M = TypeVar("_M", bound=BaseModel)
Endpoint = Callable[[Request], Awaitable[Response]]


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """``body`` as an ``application/json`` response (orjson)."""
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def error_response(status: int, code: str, message: str, **extra: Any) -> Response:
    """The error body ``{"error": {"code", "message", ...}}`` with ``status``."""
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return json_response({"error": {"code": code, "message": message, **extra}}, status, headers)


class _TooLarge(Exception):
    pass


async def _body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _TooLarge
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _parse(model: type[_M], raw: bytes) -> _M:
    """Validate ``raw`` JSON as ``model``; raises ``ServiceError`` 400/422."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        if any(e["type"] == "json_invalid" for e in errors) or not raw.strip():
            raise ServiceError(400, "malformed_json", "the body is not valid JSON") from None
        details = [{"loc": ".".join(str(p) for p in e["loc"]), "msg": e["msg"]} for e in errors]
        raise _Invalid(details) from None


class _Invalid(Exception):
    def __init__(self, details: list[dict[str, str]]) -> None:
        super().__init__("invalid request")
        self.details = details


def create_app(
    service: ClarifyService,
    token: str,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    extra_routes: list[Route] | None = None,
    lifespan: Any = None,
) -> Starlette:
    """The ASGI app over ``service``; ``token`` is the shared API token (at least 16
    characters). ``extra_routes`` are mounted first, unguarded (the embedded store's owner
    channel, which checks its own token); ``lifespan`` is Starlette's (the Kafka loop runs
    in it). Raises ``ValueError`` for a shorter token."""
    if len(token) < 16:
        raise ValueError("the clarify API token must have at least 16 characters")
    expected = f"Bearer {token}".encode()

    def guarded(handler: Callable[[Request], Awaitable[Response]]) -> Endpoint:
        async def endpoint(request: Request) -> Response:
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                return error_response(401, "unauthorized", "a valid API token is required")
            try:
                return await handler(request)
            except _TooLarge:
                return error_response(413, "too_large", f"the body exceeds {max_body_bytes} bytes")
            except _Invalid as exc:
                return error_response(
                    422, "invalid_request", "the body does not match the contract",
                    details=exc.details,
                )  # fmt: skip
            except ServiceError as exc:
                extra = {"field": exc.field} if exc.field is not None else {}
                return error_response(exc.status, exc.code, exc.message, **extra)

        return endpoint

    async def clarify(request: Request) -> Response:
        body = _parse(ClarificationRequest, await _body(request, max_body_bytes))
        response, _ = await service.open(body)
        return json_response(response.model_dump(mode="json"))

    async def answer(request: Request) -> Response:
        body = _parse(ClarificationAnswer, await _body(request, max_body_bytes))
        result = await service.answer(request.path_params["conversation_id"], body)
        return json_response(result.body())

    async def outcome(request: Request) -> Response:
        body = _parse(ReevaluationOutcome, await _body(request, max_body_bytes))
        result = await service.outcome(request.path_params["conversation_id"], body)
        return json_response(result.body())

    async def state(request: Request) -> Response:
        found = service.get(request.path_params["conversation_id"])
        return json_response(found.model_dump(mode="json"))

    async def healthz(request: Request) -> Response:
        return json_response({"status": "ok"})

    async def http_error(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        code = {404: "not_found", 405: "method_not_allowed"}.get(status, "http_error")
        return error_response(status, code, str(getattr(exc, "detail", "")) or code)

    async def internal_error(request: Request, exc: Exception) -> Response:
        log.exception("clarify: internal error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error")

    routes = [
        *(extra_routes or []),
        Route("/healthz", healthz, methods=["GET"]),
        Route("/v1/clarify", guarded(clarify), methods=["POST"]),
        Route("/v1/clarify/{conversation_id}/answer", guarded(answer), methods=["POST"]),
        Route("/v1/clarify/{conversation_id}/outcome", guarded(outcome), methods=["POST"]),
        Route("/v1/clarify/{conversation_id}", guarded(state), methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: internal_error},
        lifespan=lifespan,
    )
