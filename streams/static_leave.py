"""Leaving a consumer group as a static member (KIP-345): the LeaveGroup request of API
version 3, which names the member by its ``group.instance.id``, sent with aiokafka's client
(aiokafka itself only implements versions 0-1, which cannot name a static member).

Its own module so that aiokafka (about 16 MB of a worker's RSS) loads only when a worker
leaves its group on the way out (``streams.membership.leave_group``), not at start-up.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TypeAlias

from aiokafka import AIOKafkaClient
from aiokafka import errors as kafka_errors
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

log = logging.getLogger("refusal_audit.worker")

GROUP_COORDINATOR = 0  # FindCoordinator key type of a consumer group


class LeaveGroupResponse_v3(Response):  # type: ignore[misc]
    """LeaveGroup response, version 3 (KIP-345)."""

    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        (
            "members",
            Array(
                ("member_id", String("utf-8")),
                ("group_instance_id", String("utf-8")),
                ("error_code", Int16),
            ),
        ),
    )


class LeaveGroupRequest_v3(RequestStruct):  # type: ignore[misc]
    """LeaveGroup request, version 3: a batch of members, each by member id and/or
    instance id (an empty member id names a static member by its instance id alone)."""

    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = LeaveGroupResponse_v3
    SCHEMA = Schema(
        ("group", String("utf-8")),
        ("members", Array(("member_id", String("utf-8")), ("group_instance_id", String("utf-8")))),
    )


LeaveGroupV3Struct: TypeAlias = LeaveGroupRequest_v3


class StaticLeaveGroupRequest(Request[LeaveGroupV3Struct]):  # type: ignore[misc]
    """Remove the static member ``instance_id`` from consumer group ``group``."""

    API_KEY = 13

    def __init__(self, group: str, instance_id: str) -> None:
        self._group = group
        self._instance_id = instance_id

    def build(self, request_struct_class: type[LeaveGroupV3Struct]) -> LeaveGroupV3Struct:
        """The version-3 struct naming the member by its instance id only."""
        return request_struct_class(self._group, [("", self._instance_id)])


async def leave_static_member(
    bootstrap_servers: str, group: str, instance_id: str, timeout: float = 10.0
) -> bool:
    """Make the static member ``instance_id`` leave ``group`` now (its partitions are
    reassigned to the other members at once).

    Returns True when the coordinator confirmed it or the member was already gone
    (``UNKNOWN_MEMBER_ID``); False, with a warning logged, on any other outcome. Never
    raises: it runs on the way out of an orderly stop.
    """
    client = AIOKafkaClient(bootstrap_servers=bootstrap_servers, request_timeout_ms=5000)
    try:
        async with asyncio.timeout(timeout):
            await client.bootstrap()
            node = await client.coordinator_lookup(GROUP_COORDINATOR, group)
            response = await client.send(node, StaticLeaveGroupRequest(group, instance_id))
    except (TimeoutError, kafka_errors.KafkaError, OSError) as exc:
        log.warning(
            "could not leave the consumer group: %r; the partitions stay with this "
            "member until its session times out",
            exc,
            extra={"group": group, "group_instance_id": instance_id},
        )
        return False
    finally:
        await client.close()
    codes = [response.error_code, *(member[2] for member in response.members)]
    unknown = kafka_errors.UnknownMemberIdError.errno
    failed = [c for c in codes if c not in (0, unknown)]
    if failed:
        log.warning(
            "the coordinator refused to remove this member: error codes %s",
            failed,
            extra={"group": group, "group_instance_id": instance_id},
        )
        return False
    log.info("left the consumer group", extra={"group": group, "group_instance_id": instance_id})
    return True
