"""The owner channel (warehouse.remote, refusal_audit.streaming.owner): other processes reach an
embedded
store through the process that owns it.

The codec and ``serve_request`` run here against the session's chDB store. Owners of other
stores run in subprocesses (tests/owner_server.py, the worker): chDB allows one data path
per process, so this process never opens theirs; it talks to them with ``RemoteClient``
(plain HTTP) and runs the CLI in subprocesses.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from datetime import time as dtime
from decimal import Decimal
from ipaddress import IPv4Address, IPv6Address
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import orjson
import pyarrow as pa
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError, InterfaceError, OperationalError
from streaming import Deployment, stop, wait_for_web

from warehouse.remote.client import RemoteClient
from warehouse.remote.codec import CodecError, decode_value, encode_value
from warehouse.remote.discovery import find_owner, owner_file, publish_owner, withdraw_owner
from warehouse.remote.server import OWNER_PATH, check_bearer, serve_request
from warehouse.retryable import is_transient

REPO = Path(__file__).resolve().parents[1]
OWNER_SERVER = REPO / "tests" / "owner_server.py"
EXAMPLE_LOG = REPO / "examples" / "refusal_log.jsonl"

pytestmark = pytest.mark.integration

# One literal of each ClickHouse type whose Python value the channel must carry.
LITERALS = """SELECT
 toInt8(-5) AS i8, toUInt64(18446744073709551615) AS u64,
 toInt128('-170141183460469231731687303715884105728') AS i128,
 toUInt256('115792089237316195423570985008687907853269984665640564039457584007913129639935')
   AS u256,
 toFloat64(nan) AS nan, toFloat64(inf) AS inf, toFloat32(-inf) AS ninf, toFloat64(0.1) AS f,
 toDecimal128('-12345678901234567890.123456789', 9) AS dec,
 'x\\0y' AS s, toFixedString('ab', 4) AS fs, toDate('2024-02-29') AS d,
 toDate32('1900-01-01') AS d32, toDateTime('2024-01-02 03:04:05', 'UTC') AS dt,
 toDateTime64('2024-01-02 03:04:05.123456', 6, 'Asia/Kolkata') AS dt64,
 toUUID('61f0c404-5cb3-11e7-907b-a6006ad3dba0') AS uuid, toIPv4('1.2.3.4') AS ip4,
 toIPv6('2001:db8::1') AS ip6, [1, NULL, 3]::Array(Nullable(Int32)) AS arr,
 (1, 'a')::Tuple(Int32, String) AS tup, map('k', 1, '$t', 2) AS tagged_map,
 map(1, 'one') AS int_map, NULL AS null, true AS b, CAST('a', 'Enum8(\\'a\\' = 1)') AS enum,
 toLowCardinality('lc') AS lc, [(1, 'x')] AS arr_tup, toTime('12:34:56') AS t,
 CAST('{"a": {"b": [1, 2]}}', 'JSON') AS json
"""


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types, all the way down (nan equals nan)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        if math.isnan(a):
            return math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, Decimal) and a.is_nan():
        return bool(b.is_nan())
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, datetime):
        return a == b and a.utcoffset() == b.utcoffset()
    return bool(a == b)


def roundtrip(value: Any) -> Any:
    return decode_value(orjson.loads(orjson.dumps(encode_value(value))))


def call(client: Any, **request: Any) -> tuple[int, dict[str, Any]]:
    status, body = serve_request(client, orjson.dumps(request))
    return status, orjson.loads(body)


# ---- codec ------------------------------------------------------------------------------


def test_codec_round_trips_every_value_chdb_returns(warehouse_db: tuple[Any, str]) -> None:
    client, _ = warehouse_db
    result = client.query(LITERALS)
    row = list(result.result_rows[0])
    values = dict(zip(result.column_names, row, strict=True))
    # the literals really produce the awkward values the codec has to tag
    assert values["u256"] > 2**64 and math.isnan(values["nan"]) and values["inf"] == math.inf
    assert isinstance(values["fs"], bytes) and isinstance(values["tup"], tuple)
    assert "$t" in values["tagged_map"] and 1 in values["int_map"]
    assert values["dt64"].utcoffset() == timedelta(hours=5, minutes=30)
    back = roundtrip(row)
    names = result.column_names
    assert [n for n, a, b in zip(names, row, back, strict=True) if not same(a, b)] == []


def test_codec_round_trips_values_callers_send() -> None:
    values = [
        datetime(2026, 1, 2, 3, 4, 5, 6),  # naive stays naive
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
        date(1, 1, 1),
        dtime(23, 59, 59, 999999),
        timedelta(days=-2, seconds=5, microseconds=7),
        Decimal("-0.000000000000000000000000000001"),
        Decimal("NaN"),
        UUID(int=2**128 - 1),
        IPv4Address("255.255.255.255"),
        IPv6Address("::ffff:1.2.3.4"),
        bytes(range(256)),
        2**64 - 1,
        2**64,
        -(2**63),
        -(2**63) - 1,
        -0.0,
        float("nan"),
        ("a", ("b", [1, (2,)])),
        {"$t": "dt", "v": "not a tag"},  # a real dict holding the tag key
        {"$t": {"$t": 1}, "x": [{"$t": None}]},
        {(1, 2): "tuple key", 3: "int key"},
        {"plain": {"nested": [None, True, "s", 1.5]}},
        [],
        {},
        "",
    ]
    for value in values:
        assert same(roundtrip(value), value), value
    assert same(roundtrip(values), values)


def test_codec_refuses_what_it_cannot_carry() -> None:
    with pytest.raises(CodecError, match="cannot encode a object"):
        encode_value([object()])
    with pytest.raises(CodecError, match="unknown tagged value"):
        decode_value({"$t": "pickle", "v": "x"})
    with pytest.raises(CodecError, match="unknown tagged value"):
        decode_value({"$t": "int", "v": "1", "extra": 2})
    with pytest.raises(CodecError, match="bad int value"):
        decode_value({"$t": "int", "v": "one"})
    with pytest.raises(CodecError, match="bad bytes value"):
        decode_value({"$t": "bytes", "v": "***"})


# ---- serve_request against the session's store -----------------------------------------


def test_served_query_returns_what_the_local_client_returns(
    warehouse_db: tuple[Any, str],
) -> None:
    client, database = warehouse_db
    sql = (
        "SELECT {pairs:Array(Tuple(String, String))} AS pairs, {when:DateTime64(3, 'UTC')} AS w,"
        " {big:UInt128} AS big, {day:Date} AS day, {ids:Array(String)} AS ids, currentDatabase()"
        " AS db, 1.0 AS x"
    )
    params = {
        "pairs": [("a", "b"), ("c", "'quoted'")],
        "when": datetime(2026, 3, 4, 5, 6, 7, 8000, tzinfo=UTC),
        "big": 2**100,
        "day": date(2026, 1, 31),
        "ids": ["x", "y"],
    }
    local = client.query(sql, parameters=params, column_formats={"x": "string"})
    status, out = call(
        client,
        op="query",
        database=database,
        sql=sql,
        parameters=encode_value(params),
        settings={"readonly": 1},
        column_formats={"x": "string"},
    )
    assert status == 200, out
    assert out["column_names"] == list(local.column_names)
    assert out["column_types"] == [t.name for t in local.column_types]
    rows = [tuple(r) for r in decode_value(out["rows"])]
    assert same(rows, [tuple(r) for r in local.result_rows])
    assert rows[0][5] == database  # the request's database is the session's default


def test_served_command_and_insert(warehouse_db: tuple[Any, str]) -> None:
    client, database = warehouse_db
    status, out = call(
        client,
        op="command",
        database=database,
        sql="CREATE TABLE owner_t (k String, at DateTime64(6, 'UTC'), m Map(String, String), "
        "n Nullable(Int64), u UInt256) ENGINE = MergeTree ORDER BY k",
    )
    assert status == 200, out
    rows = [
        ["a", datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC), {"$t": "x"}, None, 2**255],
        ["b", datetime(2026, 1, 1, 1, tzinfo=timezone(timedelta(hours=1))), {}, -5, 0],
    ]
    status, out = call(
        client,
        op="insert",
        database="default",
        table="owner_t",
        table_database=database,
        rows=encode_value(rows),
        column_names=["k", "at", "m", "n", "u"],
        settings={"insert_deduplication_token": "t1"},
    )
    assert status == 200, out
    status, out = call(client, op="command", database=database, sql="SELECT count() FROM owner_t")
    assert status == 200 and decode_value(out["result"]) == 2
    stored = client.query(f"SELECT k, at, m, n, u FROM `{database}`.owner_t ORDER BY k")
    expected = [rows[0], ["b", datetime(2026, 1, 1, 0, tzinfo=UTC), {}, -5, 0]]
    assert same([list(r) for r in stored.result_rows], expected)


def test_served_arrow_insert(warehouse_db: tuple[Any, str]) -> None:
    """``insert_arrow`` (the columnar inserts, ``warehouse.columnar``): the rows travel as an
    Arrow IPC stream and are stored once per deduplication token."""
    client, database = warehouse_db
    client.command(f"CREATE TABLE `{database}`.arrow_t (k String, at DateTime64(3, 'UTC'), "
                   "m Map(String, UInt32)) ENGINE = MergeTree ORDER BY k "
                   "SETTINGS non_replicated_deduplication_window = 10")  # fmt: skip
    counts = pa.map_(pa.string(), pa.uint32())
    table = pa.table({"k": pa.array([b"a", "b 🙂".encode()]),
                      "at": pa.array([0, 1_700_000_000_123], pa.timestamp("ms", tz="UTC")),
                      "m": pa.array([{"x": 1}, {}], counts)})  # fmt: skip
    stream = pa.BufferOutputStream()
    with pa.ipc.new_stream(stream, table.schema) as writer:
        writer.write_table(table)
    request = {"op": "insert_arrow", "database": "default", "table": "arrow_t",
               "table_database": database, "arrow": encode_value(stream.getvalue().to_pybytes()),
               "settings": {"insert_deduplication_token": "t1"}}  # fmt: skip
    for _ in range(2):  # the same token twice: stored once
        status, out = call(client, **request)
        assert status == 200, out
    stored = client.query(f"SELECT k, at, m FROM `{database}`.arrow_t ORDER BY k").result_rows
    assert [list(r) for r in stored] == [
        ["a", datetime(1970, 1, 1, tzinfo=UTC), {"x": 1}],
        ["b 🙂", datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC), {}],
    ]
    status, out = call(client, **{**request, "arrow": encode_value(b"not arrow")})
    assert status == 400 and "not an Arrow IPC stream" in out["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "malformed"),
        (b"{not json", "malformed"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"op": "drop_everything"}', "unknown op"),
        (b'{"op": "query"}', "missing field 'sql'"),
        (b'{"op": "query", "sql": 5}', "wrong type"),
        (b'{"op": "query", "sql": "SELECT 1", "database": "x; DROP"}', "invalid database"),
        (b'{"op": "query", "sql": "SELECT {a:Int8}", "parameters": {"a": {"$t": "?"}}}', "tag"),
        (b'{"op": "insert", "table": "t", "rows": [1, 2]}', "list of rows"),
        (b'{"op": "insert_arrow", "table": "t", "arrow": "x"}', "wrong type"),
        (b'{"op": "insert_arrow", "table": "t; DROP", "arrow": {}}', "table name"),
        (b"[" * 100_000 + b"]" * 100_000, "malformed"),
    ],
)
def test_malformed_requests_are_400(
    warehouse_db: tuple[Any, str], body: bytes, message: str
) -> None:
    client, _ = warehouse_db
    status, raw = serve_request(client, body)
    assert status == 400
    error = orjson.loads(raw)["error"]
    assert message in error["message"] and error["class"] == "ProgrammingError"


def test_failed_statements_carry_the_clickhouse_error(warehouse_db: tuple[Any, str]) -> None:
    client, database = warehouse_db
    status, out = call(client, op="query", database=database, sql="SELECT * FROM nowhere")
    assert status == 422
    assert out["error"]["code"] == 60 and out["error"]["name"] == "UNKNOWN_TABLE"
    assert "nowhere" in out["error"]["message"] and "Traceback" not in out["error"]["message"]
    status, out = call(client, op="command", database=database, sql="SELEC 1")
    assert status == 422 and out["error"]["code"] == 62
    status, out = call(
        client, op="insert", database=database, table="nowhere", rows=[["x"]], column_names=["k"]
    )
    assert status == 422 and out["error"]["code"] == 60
    # a write with readonly=1 is refused before it can leave the shared client read-only
    for op in ("query", "command"):
        status, out = call(
            client, op=op, database=database, sql="INSERT INTO t VALUES (1)",
            settings={"readonly": 1},
        )  # fmt: skip
        assert status == 422 and out["error"]["code"] == 164
    status, out = call(client, op="command", database=database, sql="SELECT getSetting('readonly')")
    assert status == 200 and decode_value(out["result"]) == 0
    # the client still works after the failures
    status, out = call(client, op="query", database=database, sql="SELECT 41 + 1")
    assert status == 200 and decode_value(out["rows"]) == [[42]]


def test_check_bearer() -> None:
    assert check_bearer("Bearer s3cret", "s3cret")
    assert check_bearer("bearer  s3cret ", "s3cret")
    assert not check_bearer("Bearer s3cre", "s3cret")
    assert not check_bearer("Basic s3cret", "s3cret")
    assert not check_bearer(None, "s3cret")
    assert not check_bearer("Bearer ", "")


# ---- the owner file ---------------------------------------------------------------------


def test_owner_file_is_private_and_stale_files_are_ignored(tmp_path: Path) -> None:
    dsn = f"chdb://{tmp_path}/store"
    assert owner_file("chdb://memory") is None and owner_file("http://h:8123") is None
    path = owner_file(dsn)
    assert path == tmp_path / "store.owner.json"
    assert find_owner(dsn) is None  # no file
    token = publish_owner(dsn, "http://127.0.0.1:9/x")
    assert path is not None and path.stat().st_mode & 0o777 == 0o600
    assert find_owner(dsn) is None  # this process: it opens the store itself
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        doc = orjson.loads(path.read_bytes())
        path.write_bytes(orjson.dumps({**doc, "pid": other.pid}))
        info = find_owner(f"chdb://{tmp_path}/./store/")  # another spelling, same store
        assert info is not None
        assert (info.pid, info.url, info.token) == (other.pid, "http://127.0.0.1:9/x", token)
    finally:
        other.kill()
        other.wait()
    assert find_owner(dsn) is None  # its process is gone: stale
    path.write_bytes(b"{garbage")
    assert find_owner(dsn) is None
    token = publish_owner(dsn, "http://127.0.0.1:9/x")  # replaces the unreadable file
    withdraw_owner(dsn, "another owner's token")
    assert path.exists()
    withdraw_owner(dsn, token)
    assert not path.exists()
    assert [p.name for p in tmp_path.iterdir()] == []  # no temporary files left


def test_an_unreachable_owner_is_a_transient_error() -> None:
    client = RemoteClient(f"http://127.0.0.1:{unused_port()}{OWNER_PATH}", "t", connect_timeout=2)
    with pytest.raises(OperationalError, match="cannot reach the warehouse owner") as caught:
        client.query("SELECT 1")
    assert is_transient(caught.value)
    assert client.ping() is False
    client.close()


def unused_port() -> int:
    """A port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- a real owner in another process ----------------------------------------------------


@dataclass
class Owner:
    dsn: str
    database: str
    url: str
    token: str
    proc: subprocess.Popen[str]
    data_dir: Path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REFUSAL_AUDIT_")}
        env.update(
            REFUSAL_AUDIT_WAREHOUSE_DSN=self.dsn,
            REFUSAL_AUDIT_WAREHOUSE_DATABASE=self.database,
            REFUSAL_AUDIT_DATA_DIR=str(self.data_dir),
        )
        return env

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "refusal_audit.cli", *args],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def remote(self, token: str | None = None) -> RemoteClient:
        return RemoteClient(self.url, token or self.token, database=self.database)


def start_owner(tmp: Path) -> Owner:
    dsn, database = f"chdb://{tmp / 'store'}", f"own_{uuid.uuid4().hex[:10]}"
    proc = subprocess.Popen(
        [sys.executable, str(OWNER_SERVER), dsn, database],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(120)
    if not lines or not lines[0].startswith("READY "):
        proc.kill()
        raise AssertionError(f"owner did not start: {lines} {proc.stderr.read()[-3000:]}")
    path = owner_file(dsn)
    assert path is not None
    doc = orjson.loads(path.read_bytes())
    assert doc["pid"] == proc.pid and doc["url"] == lines[0].split()[1]
    return Owner(dsn, database, doc["url"], doc["token"], proc, tmp / "data")


@pytest.fixture(scope="module")
def owner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Owner]:
    started = start_owner(tmp_path_factory.mktemp("owner"))
    yield started
    started.proc.terminate()
    started.proc.wait(30)


def test_sql_through_the_owner_reads_no_file(owner: Owner, tmp_path: Path) -> None:
    """Issue 23: ``sql "DESCRIBE file('<data_dir>/review-session.key','TSKV')"`` printed the
    key, run by the store's owner. Neither the CLI nor a client holding the channel's token
    gets a file read by the owner now."""
    token = uuid.uuid4().hex
    key = tmp_path / "review-session.key"
    key.write_text(f"key={token}\n")
    for statement in (f"DESCRIBE file('{key}','TSKV')", f"SELECT * FROM file('{key}','TSKV')"):
        result = owner.cli("sql", statement)
        assert result.returncode == 2, result.stdout + result.stderr
        said = " ".join((result.stdout + result.stderr).split())  # rich wraps long lines
        assert token not in said
        assert "refused by the owner channel" in said and "file()" in said
    remote = owner.remote()  # a crafted client: the token, no CLI check
    try:
        for sql in (f"DESCRIBE file('{key}','TSKV')", f"SELECT file('{key}')"):
            with pytest.raises(DatabaseError) as info:
                remote.query(sql)
            assert info.value.code == 497 and token not in str(info.value)
    finally:
        remote.close()
    assert owner.proc.poll() is None


def test_cli_commands_work_while_another_process_owns_the_store(owner: Owner) -> None:
    read = owner.cli("sql", "SELECT 40 + 2 AS answer, currentDatabase() AS db", "-o", "csv")
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["answer,db", f"42,{owner.database}"]
    audit = owner.cli("audit", str(EXAMPLE_LOG))  # inserts events, assessments, batches
    assert audit.returncode == 0, audit.stdout + audit.stderr
    events = sum(1 for line in EXAMPLE_LOG.read_text().splitlines() if line.strip())
    remote = owner.remote()
    try:
        stored = remote.query("SELECT count() FROM refusal_events FINAL").result_rows[0][0]
        assessed = remote.query("SELECT count() FROM current_assessments").result_rows[0][0]
    finally:
        remote.close()
    assert stored == events and assessed > 0
    fpr = owner.cli("query", "false_positive_rate", "-o", "json")
    assert fpr.returncode == 0, fpr.stderr
    rows = [orjson.loads(line) for line in fpr.stdout.splitlines() if line.strip()]
    assert sum(r["audited"] for r in rows) == assessed
    count = owner.cli("sql", "SELECT count() AS n FROM refusal_events FINAL", "-o", "json")
    assert count.returncode == 0 and orjson.loads(count.stdout) == {"n": events}
    stats = owner.cli("review", "stats")
    assert stats.returncode == 0, stats.stdout + stats.stderr
    assert owner.proc.poll() is None  # the owner kept the store throughout


def test_remote_client_behaves_like_the_driver(owner: Owner) -> None:
    client = owner.remote()
    try:
        at = datetime(2026, 1, 1, tzinfo=UTC)
        result = client.query(
            "SELECT {ids:Array(String)} AS ids, {at:DateTime('UTC')} AS at, "
            "toUInt128({p:String}) AS p",
            parameters={"ids": ["a", "b"], "at": at, "p": str(2**100)},
        )
        assert result.column_names == ("ids", "at", "p")
        assert list(result.named_results()) == [{"ids": ["a", "b"], "at": at, "p": 2**100}]
        types = [t.name for t in result.column_types]  # chDB drops DateTime's zone name
        assert types[0] == "Array(String)" and types[1].startswith("DateTime")
        assert types[2] == "UInt128"
        assert client.command("SELECT 7") == 7
        client.command("CREATE TABLE rc (k String, v UInt8) ENGINE = MergeTree ORDER BY k")
        context = client.create_insert_context("rc", ["k", "v"], database=owner.database)
        client.insert("rc", [("x", 1), ["y", 2]], column_names=["k", "v"],
                      column_types=context.column_types)  # fmt: skip
        assert client.query("SELECT k, v FROM rc ORDER BY k").result_rows == [("x", 1), ("y", 2)]
        with pytest.raises(DatabaseError, match="nowhere") as caught:
            client.query("SELECT * FROM nowhere")
        assert caught.value.code == 60 and not is_transient(caught.value)
    finally:
        client.close()
    with pytest.raises(Exception, match="closed"):
        client.query("SELECT 1")


def test_wrong_token_and_malformed_bodies_are_refused(owner: Owner) -> None:
    intruder = owner.remote(token="not-the-token")
    with pytest.raises(InterfaceError, match="refused the token"):
        intruder.query("SELECT 1")
    assert intruder.ping() is False
    intruder.close()
    with httpx.Client(trust_env=False, timeout=10) as http:
        bare = http.post(owner.url, content=b'{"op": "ping"}')
        assert bare.status_code == 401
        auth = {"Authorization": f"Bearer {owner.token}"}
        for body in (b"\xff\xfe garbage", b'{"op": "query", "sql": null}', b"[" * 50_000):
            answer = http.post(owner.url, content=body, headers=auth)
            assert answer.status_code == 400, answer.text
            assert "malformed" in answer.json()["error"]["message"] or answer.json()["error"]
    assert owner.proc.poll() is None
    client = owner.remote()
    assert client.query("SELECT 1").result_rows == [(1,)]  # still serving
    client.close()


def test_clean_shutdown_withdraws_and_a_crash_leaves_a_stale_file(tmp_path: Path) -> None:
    first = start_owner(tmp_path)
    path = owner_file(first.dsn)
    assert path is not None
    first.proc.send_signal(signal.SIGTERM)
    first.proc.wait(30)
    assert not path.exists()
    second = start_owner(tmp_path)
    doc = orjson.loads(path.read_bytes())
    # an owner that announces itself but does not answer: the lock error names it
    path.write_bytes(orjson.dumps({**doc, "url": f"http://127.0.0.1:1{OWNER_PATH}"}))
    silent = second.cli("sql", "SELECT 1")
    assert silent.returncode == 2
    assert f"process {second.proc.pid} owns this embedded store" in silent.stderr
    second.proc.kill()
    second.proc.wait(30)
    assert path.exists()  # stale: its process is gone
    started = time.monotonic()
    direct = second.cli("sql", "SELECT count() AS n FROM refusal_events", "-o", "csv")
    assert direct.returncode == 0, direct.stderr
    assert direct.stdout.split() == ["n", "0"]
    assert time.monotonic() - started < 60


# ---- the worker -------------------------------------------------------------------------


@pytest.mark.kafka
def test_cli_reaches_the_worker_that_owns_the_embedded_store(
    kafka_bootstrap: str, unique_topic_prefix: str, tmp_path: Path
) -> None:
    dep = Deployment(kafka_bootstrap, unique_topic_prefix, tmp_path)
    dep.cli("topics", "create")
    dep.cli("produce", str(EXAMPLE_LOG))
    events = sum(1 for line in EXAMPLE_LOG.read_text().splitlines() if line.strip())
    path = owner_file(f"chdb://{(tmp_path / 'chdb').resolve()}")
    assert path is not None
    worker = dep.start_worker()
    try:
        wait_for_web(dep, worker)
        dep.wait_drained(worker)
        deadline = time.monotonic() + 30
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert orjson.loads(path.read_bytes())["pid"] == worker.pid
        assert dep.sql("SELECT count() AS n FROM refusal_events FINAL") == [{"n": events}]
        assessed = dep.sql("SELECT count() AS n FROM current_assessments")[0]["n"]
        fpr = dep.cli("query", "false_positive_rate", "-o", "json").stdout
        rows = [orjson.loads(line) for line in fpr.splitlines() if line.strip()]
        assert assessed > 0 and sum(r["audited"] for r in rows) == assessed
        assert worker.poll() is None
        status, health = dep.health()
        assert status == 200 and health["warehouse"]["ok"]
    finally:
        stop(worker)
    assert worker.returncode == 0, dep.worker_logs()
    assert not path.exists()
