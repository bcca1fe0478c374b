"""Producing a JSONL file onto a topic (``calibrate produce``, ``ab produce``): every line byte
for byte, keyed by its request's log id or its event's id; a line that is not a request or an
event is reported, not sent (unless raw).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from refusal_audit.calibration.decoders import Rejected, decode_event, decode_request
from streams.producer import DeliveryError, TopicWriter


@dataclass
class ProduceReport:
    """What ``produce_file`` did: lines ``sent``, ``delivered`` (acknowledged),
    ``undelivered`` (failed or unconfirmed), ``rejected`` lines (line number, reason; not
    sent) and the delivery errors."""

    sent: int = 0
    delivered: int = 0
    undelivered: int = 0
    rejected: list[tuple[int, str]] = field(default_factory=list)
    delivery_errors: list[str] = field(default_factory=list)


def request_key(line: bytes) -> bytes | None:
    """The key of a calibration request line (its log id, else none). Raises ``ValueError``
    with the reason (fields, never values) when the line is not a request."""
    try:
        request = decode_request(line)
    except Rejected as rejected:
        raise ValueError(f"{rejected.code}: {rejected.reason}") from None
    return request.log_id.encode() if request.log_id else None


def event_key(line: bytes) -> bytes | None:
    """The key of an A/B event line (its event id). Raises ``ValueError`` with the reason
    when the line is not an event."""
    try:
        return decode_event(line).event_id.encode()
    except Rejected as rejected:
        raise ValueError(f"{rejected.code}: {rejected.reason}") from None


def produce_file(
    path: Path,
    writer: TopicWriter,
    topic: str,
    key_of: Callable[[bytes], bytes | None],
    *,
    raw: bool = False,
    confirm_every: int = 10_000,
) -> ProduceReport:
    """Send every non-blank line of the JSONL file ``path`` to ``topic`` byte for byte, keyed
    by ``key_of(line)``; a line ``key_of`` refuses (``ValueError``) is reported, not sent,
    unless ``raw`` (then it is sent without a key, for the consumer to dead-letter). Raises
    ``OSError``."""
    report = ProduceReport()

    def confirm() -> None:
        try:
            report.delivered += writer.confirm()
        except DeliveryError as exc:
            report.delivered += exc.delivered
            report.delivery_errors.append(str(exc))
        report.undelivered = report.sent - report.delivered

    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            body = line.rstrip(b"\r\n")
            if not body.strip():
                continue
            try:
                key = key_of(body)
            except ValueError as exc:
                if not raw:
                    report.rejected.append((lineno, str(exc)))
                    continue
                key = None
            writer.send(topic, body, key)
            report.sent += 1
            if report.sent % confirm_every == 0:
                confirm()
    confirm()
    return report


__all__ = ["ProduceReport", "event_key", "produce_file", "request_key"]
