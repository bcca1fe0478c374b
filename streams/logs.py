"""The worker's logging: one JSON line per record on stderr, repeated client errors folded.

While the broker is down, aiokafka logs "Unable connect to node with id 1" about ten times a
second (669 ERROR lines in 17 s were measured): the log of an outage becomes unreadable.
``RepeatFilter`` lets the first record of a kind through, drops the repeats for
``interval_seconds``, and then lets the next one through with the count of those it dropped
(``repeated`` field, and ``[N similar lines suppressed in the last S s]`` appended to the
message). Only the Kafka client libraries' loggers are folded; the worker's own records
(one per dead letter, per window) always pass.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FOLDED_LOGGERS = ("aiokafka", "faust")
REPEAT_INTERVAL_SECONDS = 30.0
MAX_REMEMBERED = 1000
_TIMING = re.compile(r"\d+ms\b")


@dataclass
class _Seen:
    since: float
    suppressed: int = 0


_TRANSIENT_RETRY = re.compile(
    r"(Coordinator load in progress|Not coordinator|Coordinator not available)"
    r"[^\n]*: retrying$"
)


class TransientRetryFilter(logging.Filter):
    """Demotes librdkafka's warnings about a coordinator that is not ready yet and that it
    retries by itself ("GETPID ... Failed to acquire transactional PID from broker ...:
    Broker: Not coordinator: retrying", "... Coordinator load in progress: retrying") to
    DEBUG: every fresh broker or group gives them at start-up, and nothing is wrong unless
    the retries fail, which is reported on its own. Other records pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Lowers the level of a transient coordinator retry to DEBUG and lets it through only
        when its logger shows DEBUG (the logger checked WARNING before the filter ran);
        True for every other record."""
        if record.levelno == logging.WARNING and _TRANSIENT_RETRY.search(record.getMessage()):
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


class RepeatFilter(logging.Filter):
    """Rate-limits repeated log records to one per ``interval_seconds`` per kind.

    A kind is (logger name, level, message) with timings (``after 0ms``) blanked, so
    librdkafka's "Connect ... failed (after 0ms ...)" and "(after 1ms ...)" are one kind,
    while the same error from another client (another name in the message) is another.
    With ``prefixes`` only records of those loggers (or their children) are folded; None
    folds every record the filter sees (as a filter on one logger). ``clock`` returns
    seconds (monotonic). The record let through after a quiet interval carries
    ``record.repeated`` = the number of records dropped since the previous one of its kind,
    also appended to its message. Thread-safe (librdkafka logs from its own threads).
    """

    def __init__(
        self,
        interval_seconds: float = REPEAT_INTERVAL_SECONDS,
        prefixes: tuple[str, ...] | None = FOLDED_LOGGERS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.interval = interval_seconds
        self.prefixes = prefixes
        self.clock = clock
        self._seen: dict[tuple[str, int, str], _Seen] = {}
        self._lock = threading.Lock()

    def _folded(self, name: str) -> bool:
        if self.prefixes is None:
            return True
        return any(name == p or name.startswith(p + ".") for p in self.prefixes)

    def filter(self, record: logging.LogRecord) -> bool:
        """True to emit ``record``; False to drop it as a repeat within the interval."""
        if not self._folded(record.name):
            return True
        key = (record.name, record.levelno, _TIMING.sub("ms", record.getMessage()))
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
            if seen is not None and now - seen.since < self.interval:
                seen.suppressed += 1
                return False
            if len(self._seen) >= MAX_REMEMBERED:  # forget kinds quiet for a whole interval
                self._seen = {k: v for k, v in self._seen.items() if now - v.since < self.interval}
            self._seen[key] = _Seen(now)
        if seen is not None and seen.suppressed:
            record.repeated = seen.suppressed
            record.msg = (
                f"{record.msg} [{seen.suppressed} similar lines suppressed in the last "
                f"{now - seen.since:.0f} s]"
            )
        return True


def json_logging_config(
    level: str, repeat_interval_seconds: float = REPEAT_INTERVAL_SECONDS
) -> dict[str, Any]:
    """dictConfig for one JSON line per log record (python-json-logger) on stderr, with the
    Kafka clients' repeated records folded by ``RepeatFilter`` (one per interval)."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"repeats": {"()": RepeatFilter, "interval_seconds": repeat_interval_seconds}},
        "formatters": {
            "json": {
                "()": "pythonjsonlogger.json.JsonFormatter",
                "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
                "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            }
        },
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "filters": ["repeats"],
                "stream": "ext://sys.stderr",
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
    }
