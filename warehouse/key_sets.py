"""Long lists of string keys bound to a query as one JSON text (issue 27).

``WHERE log_id IN {ids:Array(String)}`` makes clickhouse-connect format and escape every key
in Python, character by character (5-14 us per key on the project's 2-core machine), and
ClickHouse parse an array literal of them; on embedded chDB such a list longer than about
25,000 keys falls off a cliff (``warehouse.store.LOOKUP_CHUNK``). Here the keys travel as one
JSON array instead (``orjson``: one C call for the whole list), spliced into the query text as
a heredoc string literal (``$ids$...$ids$``: clickhouse-connect's binary query parameter,
whose bytes are not escaped; ClickHouse takes a heredoc's text as it is), and the query reads
them back with ``JSONExtract(..., 'Array(String)')`` in an ``IN`` subquery
(:func:`in_json_keys`), which ClickHouse's primary-key analysis uses like a literal set
(``use_index_for_in_with_subqueries``, on by default). The answer is the same as the array
parameter's, key for key (tests/test_key_sets.py); measured in ``benchmarks/sink_lookup.py``.

A heredoc ends at the first ``$ids$`` in it: in the JSON text every ``$`` is written as the
JSON escape ``\\u0024`` (in a JSON array of strings a ``$`` can only stand inside a string),
so no key can end it early, whatever it holds. The keys count towards ``max_query_size``
(256 KiB by default), so the query is sent with that setting raised to the text's size
(:func:`key_set_settings`: a per-query setting, in the ``SETTINGS`` clause on chDB and a URL
parameter to a server, which must know heredoc literals).

Works the same through clickhouse-connect on chDB and on a ClickHouse server over HTTP(S).
The owner channel (``warehouse.remote``) refuses binary parameters (its statement guard,
``warehouse.sql_guard``, checks text statements only): over it, the caller binds the keys
as the array parameter (:func:`takes_binary_parameters`).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from warehouse.remote.client import RemoteClient

__all__ = [
    "KEYS_PARAMETER",
    "in_json_keys",
    "json_keys",
    "key_set_settings",
    "takes_binary_parameters",
]

#: The name of the binary query parameter the keys are bound to (a heredoc tag).
KEYS_PARAMETER = "$ids$"

# the query around the keys: a few hundred bytes (FIRST_FINGERPRINTS is about 260)
_QUERY_ROOM = 64 * 1024


def in_json_keys(column_type: str = "String") -> str:
    """The SQL text of an ``IN`` operand that reads the keys bound to :data:`KEYS_PARAMETER`
    (a JSON array of values of ClickHouse type ``column_type``): ``(SELECT arrayJoin(
    JSONExtract($ids$, 'Array(String)')))``."""
    return f"(SELECT arrayJoin(JSONExtract({KEYS_PARAMETER}, 'Array({column_type})')))"


def json_keys(keys: Sequence[str]) -> bytes | None:
    """``keys`` as the JSON array bound to :data:`KEYS_PARAMETER` (UTF-8, every ``$`` escaped
    as ``\\u0024``); None when a key cannot be written as JSON (a lone surrogate: the caller
    then binds the keys as an array parameter, the driver's way)."""
    try:
        text = orjson.dumps(list(keys))
    except orjson.JSONEncodeError:
        return None
    return text.replace(b"$", b"\\u0024")


def key_set_settings(payload: bytes) -> dict[str, int]:
    """The query settings that let a query carry ``payload`` (:func:`json_keys`):
    ``max_query_size`` raised to its length plus room for the query around it."""
    return {"max_query_size": len(payload) + _QUERY_ROOM}


def takes_binary_parameters(client: object) -> bool:
    """Whether queries on ``client`` may carry binary parameters: clickhouse-connect's own
    clients (chDB, a server) do; the owner channel's ``RemoteClient``, and a
    ``warehouse.follow.FollowingClient`` while it is on one, do not (module docstring)."""
    return not isinstance(getattr(client, "current", client), RemoteClient)
