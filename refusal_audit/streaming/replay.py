"""Replay log files into the input topic (``refusal-audit produce``) with confluent-kafka.

Records are converted to the event contract with the same adapters as batch mode and keyed
by conversation id (else log id), so one conversation stays on one partition. ``raw=True``
sends JSON Lines records byte for byte instead (to let the worker validate them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from processors.adapters import DecodeFailure, decode_record
from refusal_audit.audit.pipeline import Failure, InputSource
from streams.producer import DeliveryError, TopicWriter


@dataclass
class ReplayReport:
    """What a replay did, counted from the broker's delivery reports.

    ``sent`` messages handed to the producer; of those ``delivered`` (acknowledged by the
    broker), ``failed`` (a failed delivery report) and ``unconfirmed`` (no report before the
    last confirm's timeout), so ``sent == delivered + failed + unconfirmed``;
    ``undelivered`` is ``failed + unconfirmed``. ``rejected`` records did not convert and
    were not sent; ``delivery_errors`` holds the messages of the failed confirms.
    """

    sent: int = 0
    delivered: int = 0
    failed: int = 0
    undelivered: int = 0
    rejected: list[Failure] = field(default_factory=list)
    delivery_errors: list[str] = field(default_factory=list)

    @property
    def unconfirmed(self) -> int:
        """Messages sent with no delivery report (yet) when the replay ended."""
        return self.sent - self.delivered - self.failed


def replay(
    sources: Iterable[InputSource],
    writer: TopicWriter,
    topic: str,
    *,
    raw: bool = False,
    confirm_every: int = 10_000,
    on_record: Callable[[], None] | None = None,
) -> ReplayReport:
    """Send every record of ``sources`` to ``topic``; return what was sent and delivered.

    Records that do not convert are reported (with source and location), not sent.
    Delivery is confirmed every ``confirm_every`` messages and at the end.
    """
    report = ReplayReport()
    for source in sources:
        for record in source.records:
            if on_record is not None:
                on_record()
            if raw:
                writer.send(topic, record.raw)
            else:
                event = decode_record(record, source.fmt, source.options)
                if isinstance(event, DecodeFailure):
                    report.rejected.append(
                        Failure(record.source, record.location, event.reason_code, event.reason)
                    )
                    continue
                key = (event.conversation_id or event.log_id).encode()
                writer.send(topic, event.model_dump_json().encode(), key)
            report.sent += 1
            if report.sent % confirm_every == 0:
                _confirm(writer, report)
    _confirm(writer, report)
    return report


def _confirm(writer: TopicWriter, report: ReplayReport) -> None:
    """Confirm what was sent so far; count its delivery reports, failed ones included."""
    try:
        report.delivered += writer.confirm()
    except DeliveryError as exc:
        report.delivered += exc.delivered
        report.failed += exc.failed
        report.delivery_errors.append(str(exc))
    report.undelivered = report.sent - report.delivered
