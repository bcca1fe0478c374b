"""Group refusal events into audit batches, per policy bundle, bounded by count and tokens.

A batch closes when adding the next event would exceed ``max_events`` or ``token_budget``
(o200k_base tokens of the events as they are serialised into the audit prompt). An event
that alone exceeds the budget is audited in a batch of its own rather than rejected:
input limits (``max_text_chars``) bound it upstream. Batches preserve input order, so the
same input always yields the same batches (and the same deterministic batch ids).

A token budget of None bounds batches by ``max_events`` alone and counts no tokens: the
budget exists to fit an LLM's context window, and the local engine has none (counting cost
~8 µs per event and the tokenizer ~66 MB of RSS, ``processors.tokens``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import orjson

from processors.tokens import count_tokens
from schemas.events import RefusalEvent

# Per-event framing in the prompt's JSON array (braces, keys, commas): measured as the
# token count of an event serialised with empty texts, rounded up.
PROMPT_EVENT_FIELDS = ("log_id", "model", "product", "request", "response")


def prompt_view(event: RefusalEvent) -> dict[str, str]:
    """The fields of an event that the audit prompt shows the auditor (already redacted)."""
    return {name: str(getattr(event, name)) for name in PROMPT_EVENT_FIELDS}


def event_tokens(event: RefusalEvent) -> int:
    """o200k_base tokens of the event as serialised into the audit prompt (JSON object)."""
    return count_tokens(orjson.dumps(prompt_view(event)).decode())


@dataclass(frozen=True)
class AuditBatch:
    """A batch of redacted refusal events of one policy bundle, ready for an engine.

    ``tokens`` is the sum of ``event_tokens`` over ``events``, or None when the batcher had
    no token budget (nothing was counted).
    """

    policy_bundle: str
    events: tuple[RefusalEvent, ...]
    tokens: int | None

    @property
    def log_ids(self) -> list[str]:
        """The batch's log ids in order."""
        return [e.log_id for e in self.events]


@dataclass
class _Open:
    events: list[RefusalEvent] = field(default_factory=list)
    tokens: int = 0


class Batcher:
    """Incremental batcher: feed events with ``add``, collect closed batches, ``flush`` at end.

    One open batch per policy bundle. ``max_events`` >= 1 and ``token_budget`` >= 1 (or None:
    no token bound, nothing counted; module docstring) else ``ValueError``. ``count`` maps an
    event to its token cost (default ``event_tokens``).
    """

    def __init__(
        self,
        max_events: int,
        token_budget: int | None,
        count: Callable[[RefusalEvent], int] = event_tokens,
    ) -> None:
        if max_events < 1 or (token_budget is not None and token_budget < 1):
            raise ValueError("max_events and token_budget must be >= 1")
        self.max_events = max_events
        self.token_budget = token_budget
        self._count = count
        self._open: dict[str, _Open] = {}

    def add(self, event: RefusalEvent) -> list[AuditBatch]:
        """Add one event; return the batches this closes (zero or one)."""
        budget = self.token_budget
        cost = self._count(event) if budget is not None else 0
        current = self._open.setdefault(event.policy_bundle, _Open())
        closed: list[AuditBatch] = []
        if current.events and (
            len(current.events) >= self.max_events
            or (budget is not None and current.tokens + cost > budget)
        ):
            closed.append(self._close(event.policy_bundle))
            current = self._open.setdefault(event.policy_bundle, _Open())
        current.events.append(event)
        current.tokens += cost
        if len(current.events) >= self.max_events or (
            budget is not None and current.tokens >= budget
        ):
            closed.append(self._close(event.policy_bundle))
        return closed

    def flush(self) -> list[AuditBatch]:
        """Close and return every open batch (bundles in first-seen order)."""
        return [self._close(name) for name in list(self._open)]

    def pending(self) -> int:
        """Number of events waiting in open batches."""
        return sum(len(o.events) for o in self._open.values())

    def _close(self, bundle: str) -> AuditBatch:
        opened = self._open.pop(bundle)
        tokens = opened.tokens if self.token_budget is not None else None
        return AuditBatch(bundle, tuple(opened.events), tokens)


def make_batches(
    events: Iterable[RefusalEvent], max_events: int, token_budget: int | None
) -> list[AuditBatch]:
    """Batch a finite sequence of events; see ``Batcher`` (``token_budget`` None: by count)."""
    batcher = Batcher(max_events, token_budget)
    batches: list[AuditBatch] = []
    for event in events:
        batches.extend(batcher.add(event))
    batches.extend(batcher.flush())
    return batches
