"""Settings to a running clarification service: engines, store, token, uvicorn.

``build_service`` is what ``refusal-audit clarify serve`` and ``clarify eval`` use; tests
and the benchmark build the same objects. The API token comes from ``clarify_api_token`` or,
when unset, a random token kept in ``<data_dir>/clarify-api.token`` (mode 0600; callers on
the same machine read it from there). The token is never logged: a log filter replaces it
(and the OpenAI key) with ``***`` in every record of the service's loggers.
"""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from processors.clarification.base import QuestionEngine
from processors.clarification.circumvention_model import CircumventionCheck
from processors.clarification.flow import Clarifier
from processors.clarification.judge import CircumventionJudge
from processors.clarification.local_questions import LocalQuestionEngine
from processors.engines.base import AuditEngine
from refusal_audit.audit.engine_setup import (
    configured_redactor,
    llm_call_options,
    make_engine,
    openai_client,
)
from refusal_audit.bundles import load_bundles
from refusal_audit.clarification.circumvention_check import build_circumvention_check
from refusal_audit.clarification.service import ClarifyService
from refusal_audit.clarification.store import MemoryStore, SqliteStore, StateStore
from refusal_audit.config import ConfigError, Settings
from refusal_audit.secret_files import random_secret_file

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from contextlib import AbstractAsyncContextManager

    from starlette.applications import Starlette

    from inference.questions import OpenAIQuestionEngine
    from refusal_audit.clarification.kafka import KafkaOutputs
    from refusal_audit.clarification.trail import StepTrail
    from refusal_audit.streaming.owner import OwnerSlot
    from streams.topics import Topics
    from warehouse.store import Warehouse

TOKEN_FILE = "clarify-api.token"
STORE_FILE = "clarify.sqlite3"


def api_token(cfg: Settings) -> tuple[str, str]:
    """The API token and where it comes from (``setting clarify_api_token`` or the file's
    path). Raises ``ConfigError`` when the token file cannot be read or written."""
    if cfg.clarify_api_token is not None:
        return cfg.clarify_api_token.get_secret_value(), "setting clarify_api_token"
    path = Path(cfg.data_dir) / TOKEN_FILE
    return random_secret_file(path, "clarify API token"), str(path)


def store_path(cfg: Settings) -> Path:
    """The SQLite file of the conversation states."""
    return cfg.clarify_store_path or Path(cfg.data_dir) / STORE_FILE


def store_kind(cfg: Settings, kafka: bool = False) -> str:
    """The state store to use: ``clarify_store``, else ``kafka`` with the Kafka interface,
    else ``sqlite``."""
    return cfg.clarify_store or ("kafka" if kafka else "sqlite")


def build_store(cfg: Settings, kafka: bool = False) -> StateStore:
    """The configured state store (``store_kind``). Raises ``ConfigError`` when the SQLite
    file cannot be opened, ``streams.topics.TopicError`` when the state topic is missing."""
    kind = store_kind(cfg, kafka)
    if kind == "memory":
        return MemoryStore()
    if kind == "kafka":
        from refusal_audit.clarification.kafka import KafkaStateStore
        from streams.topics import Topics

        topic = Topics.from_prefix(cfg.kafka_topic_prefix).clarify_state
        return KafkaStateStore(cfg.kafka(), topic)
    path = store_path(cfg)
    try:
        return SqliteStore(path)
    except Exception as exc:  # sqlite3.Error, OSError
        raise ConfigError(f"cannot open the clarification store {path}: {exc}") from exc


def build_classifier(cfg: Settings, name: str | None = None) -> AuditEngine:
    """The classifier engine: ``name``, else ``clarify_classifier_engine``, else the audit
    engine's choice; an openai classifier uses ``clarify_classifier_model`` when set.
    Raises ``ConfigError``."""
    chosen = name or cfg.clarify_classifier_engine or cfg.resolved_engine
    if chosen == "openai" and cfg.clarify_classifier_model:
        cfg = cfg.model_copy(update={"openai_model": cfg.clarify_classifier_model})
    return make_engine(cfg, chosen)


def build_question_engine(
    cfg: Settings, name: str | None = None, check: CircumventionCheck | None = None
) -> QuestionEngine:
    """The question engine: ``name``, else ``clarify_question_engine``, else the audit
    engine's choice, running ``check`` (default: the configured one,
    :func:`refusal_audit.clarification.circumvention_check.build_circumvention_check`). Raises
    ``ConfigError`` for an unknown name, a missing openai key or circumvention model."""
    engine = _question_engine(cfg, name)
    engine.check = check if check is not None else build_circumvention_check(cfg)
    return engine


def _question_engine(cfg: Settings, name: str | None) -> LocalQuestionEngine | OpenAIQuestionEngine:
    chosen = name or cfg.clarify_question_engine or cfg.resolved_engine
    if chosen == "local":
        return LocalQuestionEngine()
    if chosen == "openai":
        from inference.questions import OpenAIQuestionEngine

        model = cfg.clarify_question_model or cfg.openai_model
        return OpenAIQuestionEngine(openai_client(cfg), model, **llm_call_options(cfg, model))
    raise ConfigError(f"unknown question engine {chosen!r} (available: local, openai)")


def build_judge(cfg: Settings) -> CircumventionJudge | None:
    """The LLM circumvention judge (``clarify_judge_engine``; None when ``off``), on
    ``clarify_judge_model``, else ``clarify_question_model``, else ``openai_model``. Raises
    ``ConfigError`` for a missing openai key."""
    if cfg.clarify_judge_engine == "off":
        return None
    from inference.judge import OpenAIJudge

    model = cfg.clarify_judge_model or cfg.clarify_question_model or cfg.openai_model
    return OpenAIJudge(openai_client(cfg), model, **llm_call_options(cfg, model))


def build_clarifier(
    cfg: Settings, questions: str | None = None, classifier: str | None = None
) -> Clarifier:
    """Classifier + question engine + the configured bundles + the judge (when on). Raises
    ``ConfigError``."""
    check = build_circumvention_check(cfg)
    return Clarifier(
        build_classifier(cfg, classifier),
        build_question_engine(cfg, questions, check),
        load_bundles(cfg.policy_bundles, cfg.data_dir),
        build_judge(cfg),
        check,
    )


def build_service(
    cfg: Settings, store: StateStore | None = None, kafka: bool = False
) -> ClarifyService:
    """The service over the configured engines and store (``store`` overrides it), redacting
    with the audit's settings (``configured_redactor``)."""
    return ClarifyService(
        build_clarifier(cfg),
        store if store is not None else build_store(cfg, kafka),
        redactor=configured_redactor(cfg),
        max_clock_skew=timedelta(seconds=cfg.clarify_max_clock_skew_seconds),
    )


class SecretMaskFilter(logging.Filter):
    """Replaces each of ``secrets`` (4+ characters) by ``***`` in a record's message and
    arguments.

    The arguments keep their shape (a tuple stays a tuple of the same length, a mapping a
    mapping): handlers' formatters may unpack them, e.g. uvicorn's access formatter reads
    its five arguments (client, method, path, HTTP version, status), and a path with
    ``?token=...`` must still be logged, masked. A string argument is masked in place; any
    other argument whose text shows a secret is replaced by its masked text. Should the
    masked arguments no longer format (a ``%d`` given such a text), the record keeps the
    masked message without arguments.
    """

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if len(s) >= 4]

    def _mask(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, "***")
        return text

    def _mask_arg(self, value: object) -> object:
        if isinstance(value, str):
            return self._mask(value)
        if isinstance(value, int | float | bool) or value is None:
            return value  # a secret of 4+ characters cannot hide in a number's text
        try:
            text = str(value)
        except Exception:  # an argument that cannot be shown shows no secret
            return value
        masked = self._mask(text)
        return value if masked == text else masked

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask the record in place; always keep it."""
        if not self.secrets:
            return True
        if isinstance(record.msg, str):
            record.msg = self._mask(record.msg)
        elif self._mask(str(record.msg)) != str(record.msg):
            record.msg = self._mask(str(record.msg))
        args = record.args
        if isinstance(args, tuple):
            record.args = tuple(self._mask_arg(a) for a in args)
        elif isinstance(args, Mapping):
            record.args = {k: self._mask_arg(v) for k, v in args.items()}
        try:
            message = record.getMessage()
        except Exception:  # masked arguments that no longer format: keep the masked text
            message = None
        if message is None or self._mask(message) != message:
            record.msg, record.args = self._mask(self._raw_message(record, args)), ()
        if record.exc_text:
            record.exc_text = self._mask(record.exc_text)
        return True

    @staticmethod
    def _raw_message(record: logging.LogRecord, args: object) -> str:
        """The record's message formatted with its original arguments (or its bare text)."""
        try:
            return str(record.msg) % args if args else str(record.msg)
        except Exception:
            return str(record.msg)


MASKED_LOGGERS = ("refusal_audit", "uvicorn", "uvicorn.error", "uvicorn.access", "openai", "httpx")


def install_secret_filter(secrets: list[str]) -> SecretMaskFilter:
    """Attach a :class:`SecretMaskFilter` to the service's loggers (and their handlers)."""
    masker = SecretMaskFilter(secrets)
    for name in MASKED_LOGGERS:
        logger = logging.getLogger(name)
        logger.addFilter(masker)
        for handler in logger.handlers:
            handler.addFilter(masker)
    return masker


def serve(
    cfg: Settings, host: str | None = None, port: int | None = None, kafka: bool = False
) -> None:
    """Run the service with uvicorn until interrupted: the HTTP API and, with ``kafka``,
    the Kafka loop (``refusal_audit.clarification.kafka``) in the same process over the same
    store, and every step (HTTP or Kafka) published on the output topics (``KafkaOutputs``);
    with ``clarify_audit_trail``, every step is logged to the warehouse before it is answered
    or committed (``StepTrail``; an embedded store owned by another process, e.g. the worker,
    is reached through its owner, and taken over when that process stops). With ``kafka`` it
    refuses to start while another instance consumes with the same group
    (``InstanceConflictError``, a ``TopicError``). Raises ``ConfigError``,
    ``WarehouseError``, ``streams.topics.TopicError``,
    ``refusal_audit.http_serving.ListenError``
    (the address cannot be listened on; nothing says the service is up then)."""
    from refusal_audit.clarification.app import create_app
    from refusal_audit.http_serving import HttpLimits, bind_listener, serve_bounded

    host = host or cfg.clarify_web_host
    port = port if port is not None else cfg.clarify_web_port
    logger = logging.getLogger("refusal_audit.clarify")
    token, source = api_token(cfg)
    secrets = [token]
    key = cfg.openai_key()
    if key:
        secrets.append(key)
    install_secret_filter(secrets)
    topics, outputs = _kafka_outputs(cfg) if kafka else (None, None)
    service = build_service(cfg, kafka=kafka)
    service.outputs = outputs
    warehouse, trail, routes, slot = _audit_trail(cfg, service, host, port)
    lifespan = _lifespan(cfg, service, trail, topics, logger)
    app = create_app(service, token, cfg.clarify_max_body_bytes, routes, lifespan)
    try:
        limits = HttpLimits.from_settings(cfg)  # bounds against slow and greedy clients
        # listen before saying so: a port in use is one error
        listener = bind_listener(host, port, limits.backlog)
        logger.info(
            "clarification service on http://%s:%d (API token from %s; engines: classifier %s, "
            "questions %s; store %s%s)",
            host,
            port,
            source,
            service.clarifier.classifier.name,
            service.clarifier.questions.name,
            store_kind(cfg, kafka),
            "; Kafka topics " + cfg.kafka_topic_prefix + "clarify.*" if kafka else "",
        )
        if slot is not None:
            slot.announce_when_listening()
        # uvicorn re-raises the signal that stopped it after its shutdown: leave through the
        # finally below (trail written, owner file withdrawn)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        serve_bounded(app, listener, host, port, limits)
    finally:
        if trail is not None:
            trail.close()
        if slot is not None:
            slot.close()
        if warehouse is not None:
            warehouse.close()
        if outputs is not None:
            outputs.close()
        service.store.close()


def _kafka_outputs(cfg: Settings) -> tuple[Topics, KafkaOutputs]:
    """The clarification topics, checked, and the producer of the outputs (``serve``'s
    ``kafka``). Raises ``streams.topics.TopicError`` (a topic missing, or another instance
    consuming with the same group: ``InstanceConflictError``)."""
    from refusal_audit.clarification.kafka import (
        KafkaOutputs,
        check_single_instance,
        check_topics,
    )

    topics = check_topics(cfg)
    check_single_instance(cfg)  # before the state is read: one instance per state topic
    outputs = KafkaOutputs(cfg.kafka(), topics)
    return topics, outputs


def _audit_trail(
    cfg: Settings, service: ClarifyService, host: str, port: int
) -> tuple[Warehouse | None, StepTrail | None, list[Any], OwnerSlot | None]:
    """With ``clarify_audit_trail``: the warehouse, the step trail (set on ``service``), the
    owner channel's routes on this server (``host``:``port``) and its slot; else nothing.
    Raises ``WarehouseError``."""
    warehouse = trail = slot = None
    routes: list[Any] = []
    if cfg.clarify_audit_trail:
        from refusal_audit.clarification.trail import StepTrail
        from refusal_audit.streaming.owner import owner_routes
        from warehouse.store import Warehouse

        warehouse = Warehouse.open(cfg)
        # the owner channel on this server (owner_routes reads the review_web_* address)
        here = cfg.model_copy(update={"review_web_host": host, "review_web_port": port})
        routes, slot = owner_routes(here, warehouse)
        trail = StepTrail(warehouse, cfg.clarify_review_sample_rate,
                          cfg.clarify_review_accepted_weight)  # fmt: skip
        service.trail = trail
    return warehouse, trail, routes, slot


def _lifespan(
    cfg: Settings,
    service: ClarifyService,
    trail: StepTrail | None,
    topics: Topics | None,
    logger: logging.Logger,
) -> Callable[[Starlette], AbstractAsyncContextManager[None]]:
    """The app's lifespan: at start, write to the ``trail`` the steps a restart left out
    and, with ``topics``, run the Kafka loop (``KafkaLoop``) as a task; at shutdown, stop
    the loop and wait for it."""
    import asyncio
    import contextlib

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        loop_task = kafka_loop = None
        if trail is not None:  # a safety net: steps are logged before they are answered
            states = getattr(service.store, "all_states", None)
            if states is not None:
                written = await asyncio.to_thread(trail.reconcile, states())
                if written:
                    logger.info("clarify: %d conversation step(s) written to the trail after "
                                "a restart", written)  # fmt: skip
        if topics is not None:
            from refusal_audit.clarification.kafka import KafkaLoop

            kafka_loop = KafkaLoop(cfg, service, topics)
            loop_task = asyncio.create_task(kafka_loop.run())
        try:
            yield
        finally:
            if kafka_loop is not None and loop_task is not None:
                kafka_loop.stop()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop_task

    return lifespan
