"""Topic names and specifications, and idempotent provisioning with confluent-kafka's AdminClient.

Every name is ``<kafka_topic_prefix><role>``. The specs follow the role: the input and
output streams are time-retained (``cleanup.policy=delete``); alerts are retained longer;
the dead-letter topic keeps failures for 30 days so they can be replayed. The clarification
service's topics (``clarify_*``, docs/clarification.md) are streams too, but for
``clarify_state``: a compacted topic keyed by conversation id that holds every
conversation's newest state (the service's durable store). Refusal-style calibration
(docs/calibration.md) reads ``calibrate_requests`` and the product's A/B events
(``ab_events``) and writes each run to ``calibrate_runs``; all three are streams.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_exponential

from streams.clients import Brokers, admin

log = logging.getLogger("refusal_audit.kafka")
T = TypeVar("T")

DAY_MS = 24 * 3600 * 1000


class TopicError(RuntimeError):
    """A topic could not be created or is missing (the message says which and why)."""


class BrokerUnreachable(TopicError):
    """The broker did not answer a metadata request in time (it may be starting: worth
    waiting for, unlike a missing topic)."""


@dataclass(frozen=True)
class TopicSpec:
    """One topic: its role, full name, partitions and topic-level configs."""

    role: str
    name: str
    partitions: int
    replication_factor: int
    config: Mapping[str, str] = field(default_factory=dict)


ROLES: dict[str, tuple[str, dict[str, str]]] = {
    # role: (suffix, topic configs)
    "input": ("refusal-events", {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)}),
    "assessments": ("assessments", {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)}),
    "drift_alerts": (
        "alerts.drift",
        {"cleanup.policy": "delete", "retention.ms": str(30 * DAY_MS)},
    ),
    "policy_gap_alerts": (
        "alerts.policy-gap",
        {"cleanup.policy": "delete", "retention.ms": str(30 * DAY_MS)},
    ),
    "review_queue": (
        "review-queue",
        {"cleanup.policy": "delete", "retention.ms": str(14 * DAY_MS)},
    ),
    "dead_letters": (
        "dead-letters",
        {"cleanup.policy": "delete", "retention.ms": str(30 * DAY_MS)},
    ),
    # what a transactional worker writes for the warehouse sink (issue 14): every stored event
    # (redacted, refusal or not) and every audit batch record, beside the assessments
    "stored_events": (
        "stored-events",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
    "audit_batches": (
        "audit-batches",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
    # the trend baseline of each policy bundle (key: bundle name), published by the sink's
    # detector passes for the workers' batch summaries: compacted, the newest per bundle
    "drift_baselines": (
        "drift-baselines",
        {"cleanup.policy": "compact", "min.compaction.lag.ms": str(3600 * 1000)},
    ),
    # the clarification service (issue 12): requests, answers and outcomes in; questions,
    # clarified requests and escalations out; its conversation states (compacted)
    "clarify_requests": (
        "clarify.requests",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
    "clarify_questions": (
        "clarify.questions",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
    "clarify_answers": (
        "clarify.answers",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
    "clarify_clarified": (
        "clarify.clarified-requests",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
    "clarify_outcomes": (
        "clarify.outcomes",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
    "clarify_escalations": (
        "clarify.escalations",
        {"cleanup.policy": "delete", "retention.ms": str(30 * DAY_MS)},
    ),
    "clarify_state": (
        "clarify.state",
        {"cleanup.policy": "compact", "min.compaction.lag.ms": str(3600 * 1000)},
    ),
    # refusal-style calibration (issue 13): calibration requests in (the application's
    # post-refusal hook), every run out (key: its calibration_run_id); the product's A/B events in
    "calibrate_requests": (
        "calibrate.requests",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
    "calibrate_runs": (
        "calibrate.runs",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
    "ab_events": (
        "ab.events",
        {"cleanup.policy": "delete", "retention.ms": str(7 * DAY_MS)},
    ),
}


@dataclass(frozen=True)
class Topics:
    """The project's topic names for one prefix (``Topics.from_prefix``)."""

    input: str
    assessments: str
    drift_alerts: str
    policy_gap_alerts: str
    review_queue: str
    dead_letters: str
    stored_events: str
    audit_batches: str
    drift_baselines: str
    clarify_requests: str
    clarify_questions: str
    clarify_answers: str
    clarify_clarified: str
    clarify_outcomes: str
    clarify_escalations: str
    clarify_state: str
    calibrate_requests: str
    calibrate_runs: str
    ab_events: str

    @classmethod
    def from_prefix(cls, prefix: str) -> Topics:
        """Names for ``prefix`` (e.g. ``refusal-audit.`` gives ``refusal-audit.refusal-events``)."""
        return cls(**{role: prefix + suffix for role, (suffix, _) in ROLES.items()})

    def alert_topics(self, kinds: tuple[str, ...] = ("drift", "policy-gap")) -> list[str]:
        """The alert topic names for the alert ``kinds`` (``drift``, ``policy-gap``)."""
        by_kind = {"drift": self.drift_alerts, "policy-gap": self.policy_gap_alerts}
        unknown = set(kinds) - set(by_kind)
        if unknown:
            raise ValueError(f"unknown alert kind(s) {sorted(unknown)}; use drift or policy-gap")
        return [by_kind[k] for k in kinds]


def topic_specs(prefix: str, partitions: int, replication_factor: int) -> list[TopicSpec]:
    """The specs of every topic for ``prefix``; ``partitions`` applies to the input and outputs."""
    return [
        TopicSpec(role, prefix + suffix, partitions, replication_factor, config)
        for role, (suffix, config) in ROLES.items()
    ]


def admin_client(brokers: Brokers, **extra: Any) -> AdminClient:
    """A confluent-kafka AdminClient for ``brokers`` (a ``streams.clients.KafkaConfig`` or a
    bootstrap string), built by ``streams.clients.admin``.

    librdkafka's log lines go to the ``refusal_audit.kafka`` Python logger (not raw to
    stderr) unless ``extra`` names another ``logger``; they are forwarded when the client
    is polled (``existing_topics`` and ``create_topics`` do).
    """
    return admin(brokers, **extra)


def existing_topics(admin: AdminClient, timeout: float = 10.0) -> set[str]:
    """Names of the topics the cluster has. Raises ``TopicError`` when the broker is unreachable."""
    try:
        return set(admin.list_topics(timeout=timeout).topics)
    except KafkaException as exc:
        raise BrokerUnreachable(f"cannot reach the Kafka broker: {exc}") from exc
    finally:
        admin.poll(0)  # forward librdkafka's queued log lines to Python logging


def create_topics(
    admin: AdminClient, specs: list[TopicSpec], timeout: float = 30.0
) -> dict[str, str]:
    """Create the missing topics of ``specs``; return ``{name: "created" | "exists"}``.

    Idempotent: a topic that already exists is left as it is (its config is not altered).
    Raises ``TopicError`` naming every topic that could not be created and why.
    """
    have = existing_topics(admin)
    status = {s.name: "exists" for s in specs if s.name in have}
    new = [
        NewTopic(
            s.name,
            num_partitions=s.partitions,
            replication_factor=s.replication_factor,
            config=dict(s.config),
        )
        for s in specs
        if s.name not in have
    ]
    if not new:
        return status
    failures: list[str] = []
    for name, future in admin.create_topics(new, operation_timeout=timeout).items():
        try:
            future.result()
            status[name] = "created"
        except KafkaException as exc:
            error = exc.args[0]
            if getattr(error, "name", lambda: "")() == "TOPIC_ALREADY_EXISTS":
                status[name] = "exists"
            else:
                failures.append(f"{name}: {error}")
    admin.poll(0)  # forward librdkafka's queued log lines to Python logging
    if failures:
        raise TopicError("could not create topics: " + "; ".join(failures))
    return status


def await_broker(read: Callable[[], T], within: float) -> T:
    """``read()`` (a metadata read that raises ``BrokerUnreachable``), again after 1 s
    doubling to 30 s while the broker does not answer, for up to ``within`` seconds; then
    the last ``BrokerUnreachable`` is raised. Any other error is raised at once."""
    for attempt in Retrying(
        retry=retry_if_exception_type(BrokerUnreachable),
        wait=wait_exponential(multiplier=1, max=30),
        stop=stop_after_delay(within),
        before_sleep=lambda state: log.warning(
            "waiting for the Kafka broker (%s)",
            state.outcome.exception() if state.outcome is not None else "?",
        ),
        reraise=True,
    ):
        with attempt:
            return read()
    raise AssertionError("unreachable: Retrying reraises")  # pragma: no cover


def require_topic(admin: AdminClient, name: str) -> None:
    """Raise ``TopicError`` with a how-to-fix message when topic ``name`` does not exist
    (``BrokerUnreachable`` when the broker does not answer)."""
    require_topics(existing_topics(admin), [name])


def require_topics(existing: set[str], names: Iterable[str]) -> None:
    """Raise ``TopicError`` with a how-to-fix message for the first of ``names`` that is not
    among ``existing`` (one ``existing_topics`` listing checked for several topics)."""
    for name in names:
        if name not in existing:
            raise TopicError(
                f"topic {name!r} does not exist; create the topics with "
                "`refusal-audit topics create` (or check kafka_topic_prefix)"
            )
