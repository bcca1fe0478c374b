"""The guard of ad hoc SQL (issue 23, medium 1): ``refusal-audit sql`` read files and made
HTTP requests (``DESCRIBE file('<data_dir>/review-session.key','TSKV')`` printed the key in
its error, ``DESCRIBE url(...)`` made the request).

The guard asks ClickHouse's own parser (``formatQuerySingleLine``, ``EXPLAIN AST``) and
allow-lists the tree (``processors.sql_policy``). Here: an escape corpus that must all be
refused, with a secret file that must never show and a loopback HTTP server that must never
be hit; the documented examples and every named query's SQL that must still pass with the
same rows; the owner channel refusing the same escapes from a crafted client; and the
allow-lists kept equal to the migrations and the installed chDB.
"""

from __future__ import annotations

import os
import re
import secrets
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
from typer.testing import CliRunner

from processors.clickhouse_ast import AstDumpError, parse_ast_dump
from processors.sql_policy import (
    DENIED_FUNCTIONS,
    PARAMETERIZED_VIEWS,
    SECRET_TABLES,
    TABLE_FUNCTIONS,
    USER_TABLES,
)
from refusal_audit.cli import app
from warehouse import ReadOnlyViolation, WarehouseError, connect, daily, migrate
from warehouse.client import Client
from warehouse.queries import NAMED_QUERIES, run_readonly
from warehouse.remote.server import serve_request

REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


class _Probe(BaseHTTPRequestHandler):
    hits: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        _Probe.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b'{"secret_column": 1}\n')

    def do_POST(self) -> None:
        self.do_GET()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def probe_url() -> Iterator[str]:
    """A loopback HTTP server that records every request (an SSRF would show here)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Probe)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/probe"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A file holding a random secret, shaped like the review session key (TSKV-readable)."""
    token = secrets.token_hex(16)
    path = tmp_path_factory.mktemp("secret") / "review-session.key"
    path.write_text(f"key={token}\n")
    return path, token


@pytest.fixture(scope="module")
def wh(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """A migrated database with one reviewer row (its hash must never be read)."""
    database = f"t_guard_{uuid.uuid4().hex[:8]}"
    client = connect(chdb_dsn, database)
    migrate(client, database)
    client.command(
        f"INSERT INTO {database}.reviewers VALUES "
        "('ana', 'admin', '$argon2id$v=19$SECRET-HASH', true, now64(3))"
    )
    yield client, database
    client.command(f"DROP DATABASE IF EXISTS {database}")
    client.close()


TABLE_FUNCTION_CALLS = [
    "file('{secret}', 'TSKV')",
    "file('{secret}', 'TSVWithNames')",
    "FILE('{secret}', 'LineAsString')",
    "`file`('{secret}', 'LineAsString')",
    "url('{url}', 'JSONEachRow')",
    "urlCluster('default', '{url}', 'JSONEachRow')",
    "s3('{url}', 'JSONEachRow')",
    "hdfs('hdfs://127.0.0.1:9000/x', 'TSV')",
    "remote('127.0.0.1:9000', system.one)",
    "remoteSecure('127.0.0.1:9440', system.one)",
    "cluster('default', system.one)",
    "mysql('127.0.0.1:3306', 'db', 't', 'u', 'p')",
    "postgresql('127.0.0.1:5432', 'db', 't', 'u', 'p')",
    "executable('cat {secret}', 'TSV', 'x String')",
    "input('x String')",
    "jdbc('jdbc:x', 'db', 't')",
    "odbc('DSN=x', 'db', 't')",
    "dictionary('d')",
    "merge('system', 'users')",
    "view(SELECT * FROM reviewers)",
    "python('x')",
    "sqlite('{secret}', 't')",
    "generateRandom('x String')",
    "format(TSV, 'a')",
    "values('x String', 'a')",
]


def _escapes(secret: str, url: str) -> list[str]:
    calls = [c.format(secret=secret, url=url) for c in TABLE_FUNCTION_CALLS]
    f = f"file('{secret}', 'TSKV')"
    u = f"url('{url}', 'JSONEachRow')"
    return [
        # every table function in FROM
        *(f"SELECT * FROM {c}" for c in calls),
        # ... and in every other position
        f"DESCRIBE {f}",
        f"DESCRIBE TABLE {u}",
        f"DESC {u}",
        f"EXPLAIN SELECT * FROM {u}",
        f"EXPLAIN AST SELECT * FROM {f}",
        f"EXPLAIN SYNTAX SELECT * FROM {f}",
        f"EXPLAIN ESTIMATE SELECT * FROM {f}",
        f"SELECT * FROM assessments AS a JOIN {f} AS s ON 1",
        f"SELECT * FROM assessments, {u}",
        f"SELECT * FROM assessments WHERE log_id IN (SELECT * FROM {f})",
        f"SELECT (SELECT any(key) FROM {f}) AS k",
        f"WITH x AS (SELECT * FROM {u}) SELECT * FROM x",
        f"SELECT 1 UNION ALL SELECT count() FROM {u}",
        f"SELECT exists(SELECT 1 FROM {f})",
        f"SELECT * FROM (SELECT * FROM (SELECT * FROM {f}))",
        # scalar functions that read files, dictionaries or other servers
        f"SELECT file('{secret}')",
        f"SELECT arrayMap(x -> file(x), ['{secret}'])",
        f"SELECT log_id FROM assessments WHERE log_id = file('{secret}')",
        "SELECT dictGet('d', 'x', 1)",
        "SELECT joinGet('reviewers', 'password_hash', 'ana')",
        "SELECT hasColumnInTable('127.0.0.1:9000', 'default', '', 'system', 'one', 'dummy')",
        "SELECT getServerSetting('path')",
        "SELECT sleep(3)",
        # comments and unicode tricks
        f"/* SELECT */ SELECT * FROM /* x */ {f} -- ; SELECT 1",
        f"SELECT * FROM\n\t{f}",
        f"SELECT * FROM fi\u200ble('{secret}', 'TSKV')",
        f"SELECT * FROM \uff46\uff49\uff4c\uff45('{secret}', 'TSKV')",
        f"SELECT * FROM fil\u0435('{secret}', 'TSKV')",
        "SELECT 1 AS `a\nTableIdentifier reviewers`, * FROM reviewers",
        # settings overrides and output clauses
        "SELECT 1 SETTINGS readonly = 0",
        f"SELECT * FROM {f} SETTINGS readonly = 0",
        "SELECT * FROM assessments SETTINGS allow_introspection_functions = 1",
        "EXPLAIN header = 1 SELECT 1",
        "SET readonly = 0",
        "SELECT 1 INTO OUTFILE '/tmp/refusal_audit_guard.txt'",
        "SELECT 1 FORMAT TSV",
        # system tables holding secrets, and the reviewers' password hashes
        "SELECT * FROM system.users",
        "SELECT * FROM `system`.`grants`",
        "SELECT * FROM system.query_log",
        "SELECT * FROM system.settings",
        "SELECT * FROM INFORMATION_SCHEMA.TABLES",
        "SELECT * FROM reviewers",
        "SELECT token_hash FROM reviewer_tokens",
        "SELECT password_hash FROM `reviewers`",
        "SELECT * FROM {db}.reviewers",
        "SELECT * FROM assessments WHERE log_id IN reviewers",
        "SELECT * FROM assessments WHERE log_id IN (SELECT password_hash FROM reviewers)",
        "SELECT (SELECT any(password_hash) FROM reviewers)",
        "DESCRIBE reviewers",
        "EXPLAIN SELECT * FROM reviewers",
        "SELECT * FROM assessments AS a LEFT JOIN reviewers AS r ON 1",
        "SELECT * FROM other_db.assessments",
        # a parameterized view of another database, or arguments that reach outside
        "SELECT * FROM system.drift_assessments(window_seconds = 60, grace_seconds = 1)",
        "SELECT * FROM other_db.drift_reviews(window_seconds = 60)",
        f"SELECT * FROM drift_assessments(window_seconds = length(file('{secret}')), "
        "grace_seconds = 1)",
        # other statements
        "SHOW DATABASES",
        "SHOW TABLES FROM system",
        "SHOW GRANTS",
        "SHOW USERS",
        "SHOW CREATE USER default",
        "SHOW CREATE TABLE reviewers",
        "SHOW PROCESSLIST",
        "SHOW SETTINGS LIKE '%'",
        f"INSERT INTO FUNCTION {f} SELECT 1",
        "INSERT INTO assessments (log_id) VALUES ('x')",
        "DROP TABLE assessments",
        "CREATE TABLE t (a String) ENGINE = File(TSV, '/etc/passwd')",
        "BACKUP TABLE assessments TO File('/tmp/refusal_audit_backup')",
        "SYSTEM RELOAD CONFIG",
        "GRANT ALL ON *.* TO default",
        # several statements
        f"SELECT 1; SELECT * FROM {f}",
        "SELECT 1;DROP TABLE assessments",
        "SELECT 1 /* ; */ ; DROP TABLE assessments",
        f"SELECT ';' ; DESCRIBE {f}",
    ]


def test_the_escape_corpus_is_refused_without_reading_or_fetching(
    wh: tuple[Client, str], secret_file: tuple[Path, str], probe_url: str
) -> None:
    client, database = wh
    path, token = secret_file
    corpus = [s.replace("{db}", database) for s in _escapes(str(path), probe_url)]
    assert len(corpus) >= 40
    _Probe.hits.clear()
    admitted = []
    for statement in corpus:
        try:
            result = run_readonly(client, statement)
        except ReadOnlyViolation as exc:
            assert token not in str(exc) and "SECRET-HASH" not in str(exc), statement
            continue
        admitted.append((statement, result.rows[:2]))
    assert admitted == [], "every escape attempt is refused by the guard"
    assert _Probe.hits == [], "no request reached the loopback server"
    assert not Path("/tmp/refusal_audit_guard.txt").exists()
    assert client.query("SELECT getSetting('readonly')").result_rows == [(0,)]


def _bound(sql: str, database: str) -> str:
    """A named query's SQL with its parameters as literals (all days, every model)."""
    values = {
        "db": database,
        "since": "toDate('1970-01-01')",
        "until": "toDate('2149-06-06')",
        "model": "''",
        "product": "''",
    }
    return re.sub(r"\{(\w+):[^}]+\}", lambda m: values[m.group(1)], sql)


@pytest.fixture(scope="module")
def loaded(chdb_dsn: str) -> Iterator[tuple[Client, str]]:
    """The example log audited into a fresh database (so the named queries return rows)."""
    database = f"t_guard_ok_{uuid.uuid4().hex[:8]}"
    env = {"REFUSAL_AUDIT_WAREHOUSE_DSN": chdb_dsn, "REFUSAL_AUDIT_WAREHOUSE_DATABASE": database}
    with pytest.MonkeyPatch.context() as patch:
        for key in list(os.environ):
            if key.startswith("REFUSAL_AUDIT_"):
                patch.delenv(key)
        patch.chdir(REPO)
        result = runner.invoke(app, ["audit", "examples/refusal_log.jsonl"], env=env)
    assert result.exit_code == 0, result.output
    client = connect(chdb_dsn, database)
    yield client, database
    client.command(f"DROP DATABASE IF EXISTS {database}")
    client.close()


LEGITIMATE = [
    "SELECT model, count() FROM assessments FINAL GROUP BY model",  # docs/batch.md
    "SELECT count() AS n FROM refusal_events FINAL",
    "SELECT log_id FROM current_assessments",
    "SELECT log_id, stage FROM dead_letters FINAL",
    "SELECT reviewer, verdict, note FROM current_verdicts",
    "SELECT sum(prompt_tokens) AS p FROM audit_batches FINAL",
    "SELECT alert_id FROM alerts FINAL WHERE kind = 'policy_gap'",
    "SELECT count() AS n FROM refusal_events FINAL WHERE log_id LIKE 'one-%'",
    "SELECT 40 + 2 AS answer, currentDatabase() AS db",
    "WITH 2 AS x SELECT x * 3",
    "WITH per_model AS (SELECT model, count() AS n FROM assessments FINAL GROUP BY model) "
    "SELECT * FROM per_model ORDER BY n DESC",
    "SELECT * FROM numbers(3)",
    "SELECT format('{} of {}', 1, 2) AS s",
    "SELECT log_id FROM assessments WHERE log_id IN (SELECT log_id FROM refusal_events)",
    "SHOW TABLES",
    "SHOW TABLES LIKE 'calibration%'",
    "DESCRIBE TABLE assessments",
    "DESC current_assessments",
    "EXPLAIN SELECT count() FROM assessments",
    "EXPLAIN AST SELECT 1",
    "SELECT toDate(event_time) AS day, count() FROM refusal_events FINAL GROUP BY day "
    "ORDER BY day WITH FILL LIMIT 3",
    "SELECT model, row_number() OVER (PARTITION BY model ORDER BY event_time) AS r "
    "FROM refusal_events FINAL LIMIT 2",
    "SELECT * EXCEPT (log_id) FROM assessments LIMIT 1",
    # the parameterized views, as the drift queries and tests read them
    "SELECT count() FROM drift_assessments(window_seconds = 60, grace_seconds = 240)",
    "SELECT count() FROM {db}.drift_assessments(window_seconds=3600, grace_seconds=300) "
    "WHERE model = 'm' GROUP BY model",
]


@pytest.mark.parametrize("statement", LEGITIMATE)
def test_documented_and_everyday_queries_still_pass(
    loaded: tuple[Client, str], statement: str
) -> None:
    client, database = loaded
    result = run_readonly(client, statement.replace("{db}", database))
    assert result.columns


@pytest.mark.parametrize("name", sorted(NAMED_QUERIES))
def test_every_named_query_passes_the_guard_with_the_same_rows(
    loaded: tuple[Client, str], name: str
) -> None:
    client, database = loaded
    sql = _bound(daily.inline_sql(NAMED_QUERIES[name].sql), database)
    expected = [tuple(r) for r in client.query(sql).result_rows]
    assert run_readonly(client, sql).rows == expected


def test_a_failed_query_never_quotes_the_data(loaded: tuple[Client, str]) -> None:
    """ClickHouse's message for a failed conversion quotes the value it could not parse."""
    client, _ = loaded
    (log_id,) = client.query("SELECT any(log_id) FROM refusal_events").result_rows[0]
    with pytest.raises(WarehouseError) as info:
        run_readonly(
            client, f"SELECT toInt64(log_id) FROM refusal_events WHERE log_id = '{log_id}'"
        )
    message = str(info.value)
    assert "CANNOT_PARSE" in message and "toInt64" not in message
    assert message.count(str(log_id)) == 0


def test_unknown_names_are_reported_as_before(wh: tuple[Client, str]) -> None:
    client, _ = wh
    with pytest.raises(WarehouseError, match="UNKNOWN_TABLE"):
        run_readonly(client, "SELECT * FROM no_such_table")
    with pytest.raises(WarehouseError, match="UNKNOWN_IDENTIFIER"):
        run_readonly(client, "SELECT no_such_column FROM assessments")


# ---- the CLI ------------------------------------------------------------------------------


def test_cli_sql_does_not_print_the_session_key(
    cli_env: dict[str, str], secret_file: tuple[Path, str], probe_url: str
) -> None:
    path, token = secret_file
    _Probe.hits.clear()
    for statement in (
        f"DESCRIBE file('{path}','TSKV')",
        "DESCRIBE file('/etc/passwd','TSVWithNames')",
        f"DESCRIBE url('{probe_url}','JSONEachRow')",
    ):
        result = runner.invoke(app, ["sql", statement], env=cli_env)
        assert result.exit_code == 2, result.output
        assert token not in result.output and "root" not in result.output
        assert "table function" in result.output
    assert _Probe.hits == []


# ---- the owner channel: a crafted client -------------------------------------------------


def _call(client: Client, **request: Any) -> tuple[int, dict[str, Any]]:
    status, body = serve_request(client, orjson.dumps(request))
    return status, orjson.loads(body)


def test_the_owner_channel_refuses_what_reaches_outside_the_store(
    wh: tuple[Client, str], secret_file: tuple[Path, str], probe_url: str, tmp_path: Path
) -> None:
    client, database = wh
    path, token = secret_file
    written = tmp_path / "written.tsv"
    _Probe.hits.clear()
    client.command("CREATE TABLE IF NOT EXISTS owner_ok (k String) ENGINE = Memory")
    for op, sql in [
        ("query", f"DESCRIBE file('{path}', 'TSKV')"),
        ("query", f"SELECT * FROM file('{path}', 'LineAsString')"),
        ("query", f"SELECT file('{path}')"),
        ("query", f"DESCRIBE url('{probe_url}', 'JSONEachRow')"),
        ("query", f"SELECT * FROM assessments WHERE log_id IN (SELECT * FROM url('{probe_url}'))"),
        ("query", "SELECT hasColumnInTable('127.0.0.1:9000', 'default', '', 'a', 'b', 'c')"),
        ("command", f"INSERT INTO FUNCTION file('{written}', 'TSV') SELECT 1"),
        ("command", f"CREATE TABLE leak (line String) ENGINE = File(LineAsString, '{path}')"),
        ("command", f"BACKUP TABLE reviewers TO File('{written}')"),
        ("command", f"SELECT 1; SELECT * FROM file('{path}', 'LineAsString')"),
        # found by a breaking run: a file read into a table, a file written, the store stopped
        ("command", f"INSERT INTO owner_ok FROM INFILE '{path}' FORMAT LineAsString"),
        ("command", f"SELECT 'x' INTO OUTFILE '{written}' TRUNCATE FORMAT TSV"),
        ("command", f"SELECT 1 INTO OUTFILE '{written}'"),
        ("command", "SYSTEM SHUTDOWN"),
        ("command", "SYSTEM FLUSH LOGS"),
        ("command", "CREATE TABLE k (a String) ENGINE = Kafka SETTINGS "
         "kafka_broker_list = '127.0.0.1:1', kafka_topic_list = 'x', "
         "kafka_group_name = 'g', kafka_format = 'TSV'"),
    ]:
        status, out = _call(client, op=op, database=database, sql=sql)
        assert status == 422, (sql, out)
        assert token not in orjson.dumps(out).decode()
    assert _Probe.hits == []
    assert not written.exists()
    assert client.query("SELECT count() FROM owner_ok").result_rows == [(0,)]
    client.command("DROP TABLE owner_ok")
    status, out = _call(
        client, op="insert", database=database, table=f"FUNCTION file('{written}.x', 'TSV')",
        rows=[["a"]], column_names=["c"],
    )  # fmt: skip
    assert status == 400 and "table" in out["error"]["message"]
    assert not Path(f"{written}.x").exists()
    # what the pipeline sends still runs
    status, out = _call(client, op="query", database=database, sql="SELECT count() FROM numbers(5)")
    assert status == 200 and out["rows"] == [[5]]
    status, out = _call(
        client, op="command", database=database,
        sql="CREATE TABLE IF NOT EXISTS owner_ok (k String) ENGINE = ReplacingMergeTree ORDER BY k",
    )  # fmt: skip
    assert status == 200, out


# ---- the allow-lists stay true -----------------------------------------------------------


def test_user_tables_are_the_migrations_tables_but_the_secret_ones() -> None:
    created = {
        m.group(1)
        for path in (REPO / "warehouse" / "migrations").glob("*.sql")
        for m in re.finditer(
            r"CREATE (?:OR REPLACE )?(?:TABLE|VIEW|MATERIALIZED VIEW) "
            r"(?:IF NOT EXISTS )?\{db\}\.(\w+)",
            path.read_text(),
        )
    }
    assert created == USER_TABLES | SECRET_TABLES
    assert not USER_TABLES & SECRET_TABLES


def test_parameterized_views_are_the_migrations_views_with_parameters() -> None:
    views = {
        m.group(1)
        for path in (REPO / "warehouse" / "migrations").glob("*.sql")
        for m in re.finditer(
            r"CREATE (?:OR REPLACE )?VIEW (?:IF NOT EXISTS )?\{db\}\.(\w+) AS(.*?)(?:;|\Z)",
            path.read_text(),
            re.S,
        )
        if re.search(r"\{\w+:\w+\}", m.group(2))
    }
    assert views == PARAMETERIZED_VIEWS
    assert PARAMETERIZED_VIEWS <= USER_TABLES


def test_every_table_function_of_the_installed_chdb_is_known(wh: tuple[Client, str]) -> None:
    client, _ = wh
    rows = client.query("SELECT name FROM system.table_functions").result_rows
    names = {str(r[0]).lower() for r in rows}
    assert names <= TABLE_FUNCTIONS, sorted(names - TABLE_FUNCTIONS)


def test_aliases_of_denied_functions_are_denied_too(wh: tuple[Client, str]) -> None:
    client, _ = wh
    sql = "SELECT name, alias_to FROM system.functions WHERE alias_to != ''"
    rows = client.query(sql).result_rows
    denied = {r[0] for r in rows if str(r[1]).lower() in DENIED_FUNCTIONS}
    for name in [*sorted(denied), "dictGetString", "filesystemAvailable", "addressToLine"]:
        with pytest.raises(ReadOnlyViolation, match="not allowed"):
            run_readonly(client, f"SELECT {name}('x')")


def test_the_dump_reader_refuses_an_inconsistent_tree() -> None:
    good = ["SelectWithUnionQuery (children 1)", " ExpressionList"]
    assert parse_ast_dump(good).children[0].label == "ExpressionList"
    for rows in (
        [],
        ["A (children 1)"],  # a child missing
        ["A", " B"],  # a child not announced
        ["A (children 1)", " B", "C"],  # a second root
        ["A (children 1)", "   B"],  # a level skipped
        ["A (children 1)", " B (alias a", "C)"],  # a name with a line break
    ):
        with pytest.raises(AstDumpError):
            parse_ast_dump(rows)

