"""Log ids bound to a lookup as one JSON text (``warehouse.key_sets``, issue 27): the same
answer as the array parameter (``FIRST_FINGERPRINTS``) for fresh ids, stored ids, both,
repeated ids and ids with quotes, backslashes, heredoc tags, control characters, non-ASCII
text and the empty string; through the owner channel the array parameter is used."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

import warehouse.store as store_module
from warehouse.client import WarehouseError
from warehouse.follow import FollowingClient
from warehouse.key_sets import (
    KEYS_PARAMETER,
    in_json_keys,
    json_keys,
    key_set_settings,
    takes_binary_parameters,
)
from warehouse.remote.client import RemoteClient
from warehouse.remote.server import serve_request
from warehouse.store import FIRST_FINGERPRINTS, FIRST_FINGERPRINTS_JSON, Warehouse

ODD = ["", "it's", 'say "hi"', "back\\slash", "\\N", "\\'", "a$ids$b", "$ids$", "$", "$$",
       "tab\there", "line\nbreak", "cr\r", "nul\x00byte", "`tick`", "{ids:String}", "ünïcødé",
       "日本語", "emoji 🙂", "sep\u2028arator", "[\"x\"]", "  spaced  "]  # fmt: skip
T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


def stored(warehouse: Warehouse, log_ids: list[str]) -> None:
    """Copies of each of ``log_ids``, one insert each (copies in one insert would be merged
    on insert): an older one without a fingerprint, one with, and for every other id a
    newer one with another fingerprint (the first fingerprinted copy must win)."""
    columns = ["log_id", "content_fingerprint", "ingested_at", "event_time", "is_refusal"]
    for copy in range(3):
        rows = [[log_id, ("", f"fp-{n}", f"later-{n}")[copy], T0 + timedelta(seconds=copy), T0,
                 copy == 1] for n, log_id in enumerate(log_ids) if copy < 2 or n % 2]  # fmt: skip
        warehouse.insert_rows("refusal_events", columns, rows)


def by_array(warehouse: Warehouse, ids: list[str]) -> list[tuple[Any, ...]]:
    """``FIRST_FINGERPRINTS`` with the ids as an array parameter (the driver's binding)."""
    return sorted(warehouse._lookup("refusal_events", "lookup", FIRST_FINGERPRINTS, "ids", ids))


def by_json(warehouse: Warehouse, ids: list[str]) -> list[tuple[Any, ...]]:
    return sorted(warehouse._lookup_ids("lookup", ids))


def test_json_keys_come_back_from_clickhouse_as_sent(warehouse_db: tuple[Any, str]) -> None:
    client, _ = warehouse_db
    payload = json_keys(ODD)
    assert payload is not None and KEYS_PARAMETER.encode() not in payload
    result = client.query(f"SELECT arrayJoin(JSONExtract({KEYS_PARAMETER}, 'Array(String)'))",
                          parameters={KEYS_PARAMETER: payload},
                          settings=key_set_settings(payload))  # fmt: skip
    assert [r[0] for r in result.result_rows] == ODD


@pytest.mark.parametrize("case", ["fresh", "stored", "mixed", "repeated", "odd"])
def test_json_lookup_answers_as_the_array_parameter(warehouse: Warehouse, case: str) -> None:
    plain = [f"log-{i}" for i in range(40)]
    stored(warehouse, plain[:20] + ODD[::2])
    ids = {
        "fresh": plain[20:],
        "stored": plain[:20],
        "mixed": plain[10:30],
        "repeated": plain[5:15] + plain[5:15] + plain[25:28] * 3,
        "odd": ODD + [f"{o}-fresh" for o in ODD],
    }[case]
    expected = by_array(warehouse, ids)
    assert by_json(warehouse, ids) == expected
    found = {r[0] for r in expected}
    if case != "fresh":
        assert found  # the comparison is not between two empty answers
    assert found == {i for i in ids if i in set(plain[:20] + ODD[::2])}
    fingerprints = warehouse.first_fingerprints(ids)
    assert fingerprints == {r[0]: r[1] for r in expected}
    assert all(f.startswith("fp-") for f in fingerprints.values())  # the first fingerprinted


def test_json_lookups_go_in_chunks_and_lose_nothing(
    warehouse: Warehouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    stored(warehouse, ["a", "b", "c", "'d'"])
    monkeypatch.setattr(store_module, "JSON_LOOKUP_CHUNK", 2)
    sizes: list[int] = []
    select = warehouse._select

    def counting(sql: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
        sizes.append(len(orjson.loads(parameters[KEYS_PARAMETER])))
        return select(sql, parameters, **kwargs)

    monkeypatch.setattr(warehouse, "_select", counting)
    assert set(warehouse.first_fingerprints(["a", "x", "b", "c", "'d'", "a"])) == {
        "a", "b", "c", "'d'"}  # fmt: skip
    assert sizes == [2, 2, 1]  # five distinct ids, two at a time


def test_ids_json_cannot_hold_go_as_the_array_parameter(warehouse: Warehouse) -> None:
    """A lone surrogate cannot be written as JSON (nor sent to chDB at all): the lookup takes
    the array parameter's path and fails as it always did."""
    assert json_keys(["ok", "bad \ud800"]) is None
    with pytest.raises(WarehouseError):
        by_array(warehouse, ["ok", "bad \ud800"])
    with pytest.raises(WarehouseError):
        warehouse.first_fingerprints(["ok", "bad \ud800"])


def owner_channel(warehouse: Warehouse) -> RemoteClient:
    """A ``RemoteClient`` whose requests are served in-process by ``serve_request`` on
    ``warehouse``'s client (the owner channel without a socket)."""

    def serve(request: httpx.Request) -> httpx.Response:
        status, body = serve_request(warehouse.client, request.content)
        return httpx.Response(status, content=body)

    remote = RemoteClient("http://owner.invalid/", "token", database=warehouse.database)
    remote._http = httpx.Client(transport=httpx.MockTransport(serve))
    return remote


def test_over_the_owner_channel_the_ids_go_as_the_array_parameter(warehouse: Warehouse) -> None:
    """The owner channel refuses binary parameters (its guard checks text statements): a
    warehouse reached through it binds the ids as the array parameter, same answer."""
    stored(warehouse, ODD)
    remote = owner_channel(warehouse)
    payload = json_keys(ODD)
    assert payload is not None
    with pytest.raises(DatabaseError, match="binary parameters"):
        remote.query(FIRST_FINGERPRINTS_JSON, parameters={KEYS_PARAMETER: payload})
    follower = FollowingClient("chdb:///unused", remote, lambda: warehouse.client)
    assert takes_binary_parameters(warehouse.client)
    assert not takes_binary_parameters(remote) and not takes_binary_parameters(follower)
    for client in (remote, follower):
        through = Warehouse(client, warehouse.database)  # type: ignore[arg-type]
        ids = [*ODD, "fresh"]
        assert through.first_fingerprints(ids) == warehouse.first_fingerprints(ids)
        assert len(through.first_fingerprints(ids)) == len(ODD)


def test_in_json_keys_names_the_parameter() -> None:
    assert KEYS_PARAMETER in in_json_keys() and "Array(String)" in in_json_keys()
    assert in_json_keys() in FIRST_FINGERPRINTS_JSON
