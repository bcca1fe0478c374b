"""Static consumer-group membership for the worker (KIP-345) and leaving the group on exit.

Without it, a worker killed by SIGKILL (or exiting 70 to be restarted) keeps its
partitions until its session times out: the restarted process joins as a new member and
waits for a rebalance that only comes once the dead member is expired (55-90 s measured).
A static member names itself with ``group.instance.id``: when a process with the same id
joins again, the coordinator hands it the dead member's partitions at once, without a
rebalance.

The price: a static member does not leave the group when it stops (aiokafka sends no
LeaveGroup for one), so after an orderly stop its partitions would sit idle until the
session times out. ``leave_group`` therefore sends the LeaveGroup request of KIP-345 (API
version 3, the member named by its instance id, as Kafka's
``Admin.removeMembersFromConsumerGroup`` does) once the consumer has stopped; aiokafka only
implements versions 0-1, which cannot name a static member. The request lives in
``streams.static_leave``, loaded only then (aiokafka is not needed before).

``group_members`` lists a group's live members through an admin client of
``streams.clients`` (the clarification service refuses to start beside a live instance).
"""

from __future__ import annotations

import hashlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from streams.topics import TopicError

log = logging.getLogger("refusal_audit.worker")

_COORDINATOR_NOT_READY = frozenset({
    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
})  # fmt: skip


class GroupError(TopicError):
    """A consumer group could not be described (the message says which and why); a
    ``streams.topics.TopicError``, as every broker problem met before a service starts."""


def group_members(admin: Any, group: str, timeout: float = 30.0) -> list[str]:
    """The members of consumer group ``group`` (``client_id@host``; empty when the group is
    empty or unknown), asked of ``admin`` (``streams.clients.admin``). A coordinator that is
    not ready yet (a fresh broker, a moved coordinator) is asked again for up to ``timeout``
    seconds. Raises :class:`GroupError` when the broker cannot describe the group."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            future = admin.describe_consumer_groups([group], request_timeout=10.0)[group]
            description = future.result(timeout=15.0)
            return [f"{m.client_id}@{m.host}" for m in description.members or []]
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            code = error.code() if isinstance(error, KafkaError) else None
            if code not in _COORDINATOR_NOT_READY or time.monotonic() > deadline:
                raise GroupError(f"cannot describe consumer group {group!r}: {exc}") from exc
        except Exception as exc:  # TimeoutError
            raise GroupError(f"cannot describe consumer group {group!r}: {exc}") from exc
        time.sleep(0.5)


def group_instance_id(static: bool, given: str | None, data_dir: Path) -> str | None:
    """The worker's ``group.instance.id``, or None when static membership is off.

    ``static``, ``given`` and ``data_dir`` are the settings ``kafka_static_membership``,
    ``kafka_group_instance_id`` and ``data_dir``. The given id when set; else derived from
    the host name and the resolved ``data_dir`` (``<host>-<8 hex>``), stable across restarts
    of the same worker and distinct for two workers on one host (each needs its own data
    directory). Two live members with one id fence each other, so set it explicitly where
    host names are not stable (e.g. the pod name of a Kubernetes StatefulSet).
    """
    if not static:
        return None
    if given:
        return given
    where = str(data_dir.resolve()).encode()
    return f"{socket.gethostname()}-{hashlib.blake2b(where, digest_size=4).hexdigest()}"


async def leave_group(
    bootstrap_servers: str, group: str, instance_id: str, timeout: float = 10.0
) -> bool:
    """Make the static member ``instance_id`` leave ``group`` now (its partitions are
    reassigned to the other members at once): ``streams.static_leave.leave_static_member``,
    imported here so that aiokafka loads only on the way out.

    Returns True when the coordinator confirmed it or the member was already gone
    (``UNKNOWN_MEMBER_ID``); False, with a warning logged, on any other outcome. Never
    raises: it runs on the way out of an orderly stop.
    """
    from streams.static_leave import leave_static_member

    return await leave_static_member(bootstrap_servers, group, instance_id, timeout)


ASSIGNMENT_NOTE_AFTER_SECONDS = 5.0
ASSIGNMENT_NOTE_EVERY_SECONDS = 15.0


def assignment_wait_note(instance: str | None, session_timeout: float, waited: float) -> str:
    """Why a starting worker has no partitions yet, for the log (``waited`` in seconds).

    ``instance``: the worker's ``group.instance.id`` (None: a dynamic member);
    ``session_timeout``: the setting ``kafka_session_timeout_seconds``.
    """
    why = (
        "a member that stopped without leaving the group (SIGKILL, crash, lost host) keeps "
        "its partitions until its session times out "
        f"(kafka_session_timeout_seconds={session_timeout:g})"
    )
    if instance is not None:
        why += (
            f"; this worker is the static member {instance!r}, so a restart of the same "
            "worker gets its partitions back at once: the wait is for another member, a "
            "rebalance in progress, or the group coordinator"
        )
    return f"no partitions assigned {waited:.0f} s after start: {why}"


class AssignmentWatch:
    """Logs why a starting worker waits for partitions, and what every rebalance assigned.

    ``start`` runs a daemon thread (faust starts its own tasks and timers only once the
    consumer has partitions, so the wait cannot be explained from there): until the first
    assignment it logs ``assignment_wait_note`` after ``ASSIGNMENT_NOTE_AFTER_SECONDS``,
    then every ``ASSIGNMENT_NOTE_EVERY_SECONDS``. ``assigned(partitions)`` is called from
    the rebalance callback; it logs "partitions assigned" with the partitions of ``topic``
    and the seconds since ``start``. ``group`` is the consumer group, ``instance`` this
    worker's ``group.instance.id`` (``group_instance_id``; None: a dynamic member),
    ``session_timeout`` the setting ``kafka_session_timeout_seconds``. ``clock`` returns
    seconds (monotonic).
    """

    def __init__(
        self,
        topic: str,
        group: str,
        instance: str | None,
        session_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.topic = topic
        self.group = group
        self.instance = instance
        self.session_timeout = session_timeout
        self.clock = clock
        self.started = clock()
        self._first = threading.Event()

    def start(self) -> None:
        """Start the watching thread (the wait is counted from here)."""
        self.started = self.clock()
        threading.Thread(target=self._watch, name="assignment-watch", daemon=True).start()

    @property
    def joined(self) -> bool:
        """Whether this process was ever assigned partitions (it then is the group's member
        with its instance id, and may leave the group in its name)."""
        return self._first.is_set()

    def assigned(self, partitions: list[int]) -> None:
        """Record a rebalance's assignment (partitions of ``topic``, may be empty)."""
        log.info(
            "partitions assigned",
            extra={
                "topic": self.topic,
                "assigned": partitions,
                "waited_seconds": round(self.clock() - self.started, 1),
                "group_instance_id": self.instance,
            },
        )
        self._first.set()

    def _watch(self) -> None:
        delay = ASSIGNMENT_NOTE_AFTER_SECONDS
        while not self._first.wait(delay):
            log.warning(
                assignment_wait_note(
                    self.instance, self.session_timeout, self.clock() - self.started
                ),
                extra={"topic": self.topic, "group": self.group},
            )
            delay = ASSIGNMENT_NOTE_EVERY_SECONDS
