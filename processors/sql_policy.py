"""What ad hoc SQL may do, decided on ClickHouse's own parse tree (``EXPLAIN AST``).

Two rule sets, both pure (the tree comes from ``processors.clickhouse_ast``):

- ``check_user_statement``: the allow-list for ``refusal-audit sql``. A statement passes
  only if it is a SELECT (``WITH``, ``UNION``, ``INTERSECT``/``EXCEPT``, subqueries, joins
  included), ``SHOW TABLES [LIKE '...']``, ``DESCRIBE`` or ``EXPLAIN`` of a SELECT, every
  node of its tree is of a kind listed in ``SELECT_NODE_KINDS``, every table it names is one
  of ``USER_TABLES`` in the warehouse database (or a ``WITH`` name), it uses no table
  function but ``numbers``/``zeros``/``generate_series``, no function of
  ``DENIED_FUNCTIONS``, and no ``SETTINGS``, ``FORMAT`` or ``INTO OUTFILE``.
- ``check_outside_access``: the owner channel's rule for every statement it runs (the
  pipeline's DDL included): nothing that reaches outside the store (table functions,
  ``file()``, dictionary sources, table engines other than ``OWNER_ENGINES``, backups).

Both raise ``SqlRefused`` with the reason; the message names the construct, never data.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from processors.clickhouse_ast import AstNode

__all__ = [
    "ALLOWED_TABLE_FUNCTIONS",
    "DENIED_FUNCTIONS",
    "OWNER_ENGINES",
    "PARAMETERIZED_VIEWS",
    "SECRET_TABLES",
    "SELECT_NODE_KINDS",
    "TABLE_FUNCTIONS",
    "USER_TABLES",
    "SqlRefused",
    "UserSqlContext",
    "check_outside_access",
    "check_user_statement",
]


class SqlRefused(ValueError):
    """A statement the rules do not allow; the message says which construct and why."""


#: Tables and views of the warehouse database that ad hoc SQL may read: every one the
#: migrations create except ``SECRET_TABLES``, the migration bookkeeping and the Kafka
#: engine's tables (``tests/test_sql_guard.py`` keeps this equal to the migrations).
USER_TABLES = frozenset(
    {
        "ab_event_log",
        "ab_events",
        "alerts",
        "assessments",
        "audit_batches",
        "calibration_decisions",
        "calibration_experiments",
        "calibration_runs",
        "calibration_variants",
        "clarification_steps",
        "clarification_verdicts",
        "current_assessments",
        "current_verdicts",
        "daily_assessment_batches",
        "daily_assessment_counts",
        "daily_audit_configurations",
        "daily_batch_scopes",
        "daily_clause_counts",
        "daily_disagreement_counts",
        "daily_event_counts",
        "daily_gap_sightings",
        "daily_review_agreements",
        "daily_review_counts",
        "daily_versions",
        "dead_letters",
        "dirty_day_holds",
        "dirty_days",
        "dirty_days_assessments_mv",
        "dirty_days_events_mv",
        "drift_assessments",
        "drift_reviews",
        "event_arrivals",
        "event_arrivals_mv",
        "policy_gap_current",
        "policy_gap_dated",
        "policy_gap_sightings",
        "policy_gap_summary",
        "refusal_events",
        "review_queues",
        "review_verdicts",
    }
)

#: The warehouse's parameterized views, read in FROM as ``name(param = value, ...)``
#: (ClickHouse's tree shows them as a function; ``tests/test_sql_guard.py`` keeps this
#: equal to the views whose SQL takes ``{name:Type}`` parameters).
PARAMETERIZED_VIEWS = frozenset({"drift_assessments", "drift_reviews"})

#: Tables never open to ad hoc SQL: the review accounts' argon2id password hashes and the
#: argon2id hashes of their API tokens.
SECRET_TABLES = frozenset({"reviewers", "reviewer_tokens"})

#: Table functions allowed in FROM (lower case): they generate numbers, read nothing.
ALLOWED_TABLE_FUNCTIONS = frozenset(
    {"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateseries"}
)

#: Every table function of chDB 26.9 (``system.table_functions``, lower case); the test
#: suite checks that the installed version has no other.
_TABLE_FUNCTION_NAMES = (
    "arrowstream", "azureBlobStorage", "azureBlobStorageCluster", "bigquery", "cluster",
    "clusterAllReplicas", "cosn", "deltaLake", "deltaLakeAzure", "deltaLakeAzureCluster",
    "deltaLakeCluster", "deltaLakeLocal", "deltaLakeS3", "deltaLakeS3Cluster", "dictionary",
    "eval", "executable", "file", "fileCluster", "filesystem", "format", "fuzzJSON", "fuzzQuery",
    "gcs", "generateRandom", "generateSeries", "generate_series", "hdfs", "hdfsCluster", "hudi",
    "hudiCluster", "iceberg", "icebergAzure", "icebergAzureCluster", "icebergCluster",
    "icebergHDFS", "icebergHDFSCluster", "icebergLocal", "icebergLocalCluster", "icebergS3",
    "icebergS3Cluster", "input", "jdbc", "loop", "merge", "mergeTreeAnalyzeIndexes",
    "mergeTreeAnalyzeIndexesUUID", "mergeTreeCodecBlockCounts", "mergeTreeIndex",
    "mergeTreeProjection", "mergeTreeTextIndex", "mongodb", "mysql", "null", "numbers",
    "numbers_mt", "odbc", "oss", "paimon", "paimonAzure", "paimonAzureCluster", "paimonCluster",
    "paimonHDFS", "paimonHDFSCluster", "paimonLocal", "paimonS3", "paimonS3Cluster", "postgresql",
    "primes", "prometheusQuery", "prometheusQueryRange", "python", "redis", "remote",
    "remoteSecure", "s3", "s3Cluster", "SQLStandardValues", "sqlite", "timeSeriesData",
    "timeSeriesMetricFamilies", "timeSeriesMetrics", "timeSeriesSamples", "timeSeriesSelector",
    "timeSeriesTags", "url", "urlCluster", "values", "view", "viewExplain", "viewIfPermitted",
    "ytsaurus", "zeros", "zeros_mt",
)  # fmt: skip
TABLE_FUNCTIONS = frozenset(name.lower() for name in _TABLE_FUNCTION_NAMES)

#: Table function names that are also ordinary functions (``format('{}', x)``): refused
#: only where a table goes.
_SCALAR_TOO = frozenset({"format"})

#: Functions refused anywhere (lower case), besides the table functions: they read files
#: (``file``), dictionaries and Join tables (``dictGet*``, ``joinGet``), other servers
#: (``hasColumnInTable`` with a host), server configuration, or stall the server.
DENIED_FUNCTIONS = frozenset(
    {
        "file",
        "joinget",
        "joingetornull",
        "hascolumnintable",
        "getserversetting",
        "getmergetreesetting",
        "getmacro",
        "catboostevaluate",
        "demangle",
        "trap",
        "logtrace",
        "getclienthttpheader",
        "sleep",
        "sleepeachrow",
    }
)
_DENIED_PREFIXES = ("dict", "filesystem", "addressto")

#: Membership functions whose right side may name a table (``x IN reviewers``).
_IN_FUNCTIONS = frozenset(
    {"in", "notin", "globalin", "globalnotin", "nullin", "notnullin", "globalnullin",
     "globalnotnullin"}
)  # fmt: skip

#: Node kinds a SELECT's tree may hold (the first word of an ``EXPLAIN AST`` row).
SELECT_NODE_KINDS = frozenset(
    {
        "SelectWithUnionQuery",
        "SelectIntersectExceptQuery",
        "SelectQuery",
        "ExpressionList",
        "Identifier",
        "TableIdentifier",
        "Function",
        "Literal",
        "Asterisk",
        "QualifiedAsterisk",
        "ColumnsRegexpMatcher",
        "ColumnsListMatcher",
        "QualifiedColumnsRegexpMatcher",
        "QualifiedColumnsListMatcher",
        "ColumnsTransformerList",
        "ColumnsExceptTransformer",
        "ColumnsReplaceTransformer",
        "ColumnsReplaceTransformerReplacement",
        "Subquery",
        "TablesInSelectQuery",
        "TablesInSelectQueryElement",
        "TableExpression",
        "TableJoin",
        "ArrayJoin",
        "OrderByElement",
        "WithElement",
        "WindowDefinition",
        "WindowListElement",
        "SampleRatio",
        "InterpolateElement",
    }
)

#: ``EXPLAIN`` kinds allowed (of a SELECT that passes on its own).
_EXPLAIN_KINDS = frozenset(
    {"EXPLAIN", "EXPLAIN AST", "EXPLAIN SYNTAX", "EXPLAIN PLAN", "EXPLAIN PIPELINE",
     "EXPLAIN ESTIMATE", "EXPLAIN QUERY TREE"}
)  # fmt: skip

#: Table engines the owner channel creates tables with (lower case; ``*MergeTree`` too).
#: Not ``Kafka``: such a table connects to brokers, and one naming a broker that does not
#: answer left a breaking run's store unopenable (chDB could not load it at start-up).
OWNER_ENGINES = frozenset({"null", "memory"})

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_TABLE_RE = re.compile(rf"^(?P<name>{_NAME}(?:\.{_NAME})?)(?: \(alias .*\))?$")
_FUNCTION_RE = re.compile(rf"^(?P<name>{_NAME})(?: \(.*)?$")
_SHOW_TABLES_RE = re.compile(r"^SHOW TABLES(?: (?:NOT )?I?LIKE '(?:[^'\\]|\\.)*')?$")

_ALLOWED = (
    "only SELECT, WITH ... SELECT, SHOW TABLES, DESCRIBE of a table and EXPLAIN of a SELECT "
    "are allowed"
)


@dataclass(frozen=True)
class UserSqlContext:
    """Where a user's statement runs: the warehouse ``database`` (unqualified names resolve
    in it) and the names of the tables and views that exist there (``existing_tables``)."""

    database: str
    existing_tables: frozenset[str]


def check_user_statement(root: AstNode, canonical: str, context: UserSqlContext) -> None:
    """Refuse (``SqlRefused``) a statement ``refusal-audit sql`` must not run.

    ``root``: the statement's ``EXPLAIN AST`` tree; ``canonical``: the statement as
    ClickHouse's ``formatQuerySingleLine`` printed it (used for ``SHOW``, whose tree does
    not show its clauses). Returns None when the statement is allowed.
    """
    kind = root.kind
    if kind == "SelectWithUnionQuery":
        _check_select_tree(root, context)
    elif kind == "Explain":
        if root.detail not in _EXPLAIN_KINDS:
            raise SqlRefused(f"{root.detail} is not allowed; {_ALLOWED}")
        if [c.kind for c in root.children] != ["SelectWithUnionQuery"]:
            raise SqlRefused(f"EXPLAIN takes no settings here and only a SELECT; {_ALLOWED}")
        _check_select_tree(root.children[0], context)
    elif kind == "DescribeQuery":
        if [c.kind for c in root.children] != ["TableExpression"]:
            raise SqlRefused("DESCRIBE takes one table and no SETTINGS")
        _check_select_tree(root.children[0], context)
    elif kind == "ShowTables":
        if root.children or not _SHOW_TABLES_RE.match(canonical):
            raise SqlRefused(
                "of the SHOW statements only SHOW TABLES [LIKE '...'] is allowed "
                "(the warehouse database's tables)"
            )
    else:
        raise SqlRefused(f"{_ALLOWED}; this statement is a {kind}")


def _check_select_tree(top: AstNode, context: UserSqlContext) -> None:
    for node in top.walk():
        kind = node.kind
        if kind == "Set":
            raise SqlRefused("SETTINGS are not allowed in ad hoc SQL (it runs read-only)")
        if kind not in SELECT_NODE_KINDS:
            raise SqlRefused(f"the construct {kind!r} is not allowed in ad hoc SQL")
        if kind == "SelectWithUnionQuery" and [c.kind for c in node.children] != [
            "ExpressionList"
        ]:
            raise SqlRefused("FORMAT, INTO OUTFILE and SETTINGS are not allowed in ad hoc SQL")
        if kind == "TableIdentifier":
            _check_table(node.detail, context)
        elif kind == "Function":
            _check_function(node, context)


def _table_name(detail: str) -> str:
    match = _TABLE_RE.match(detail)
    if match is None:
        raise SqlRefused("table names must be plain identifiers (letters, digits, '_')")
    return match["name"]


def _check_table(detail: str, context: UserSqlContext) -> None:
    name = _table_name(detail)
    database, _, table = name.rpartition(".")
    if database and database != context.database:
        raise SqlRefused(
            f"only the warehouse database's tables can be read ({name} is in {database})"
        )
    if table in SECRET_TABLES:
        raise SqlRefused(f"the table {table} holds secrets and cannot be read by ad hoc SQL")
    if table in USER_TABLES:
        return
    if database or table in context.existing_tables:
        raise SqlRefused(f"the table {table} is not open to ad hoc SQL")
    # neither a table nor a view here: a WITH name, or ClickHouse reports an unknown table


def _function_name(node: AstNode) -> str:
    match = _FUNCTION_RE.match(node.detail)
    if match is None:
        raise SqlRefused("function names must be plain identifiers (letters, digits, '_')")
    return match["name"]


def _is_denied(lower: str) -> bool:
    return lower in DENIED_FUNCTIONS or lower.startswith(_DENIED_PREFIXES)


def _parameterized_view(node: AstNode, context: UserSqlContext) -> bool:
    """True when a function in FROM is a read of one of the warehouse's
    ``PARAMETERIZED_VIEWS`` (``[database.]name(...)``, the database the warehouse's)."""
    match = _TABLE_RE.match(node.detail.split(" (", 1)[0])
    if match is None:
        return False
    database, _, table = match["name"].rpartition(".")
    return table in PARAMETERIZED_VIEWS and database in ("", context.database)


def _check_function(node: AstNode, context: UserSqlContext) -> None:
    parent = node.parent
    if parent is not None and parent.kind == "TableExpression" and _parameterized_view(
        node, context
    ):
        return  # its arguments are walked like any expression
    name = _function_name(node)
    lower = name.lower()
    if parent is not None and parent.kind == "TableExpression":
        if lower not in ALLOWED_TABLE_FUNCTIONS:
            raise SqlRefused(
                f"the table function {name} is not allowed: ad hoc SQL reads the warehouse's "
                "tables only (numbers, zeros and generate_series excepted)"
            )
        return
    if _is_denied(lower) or (lower in TABLE_FUNCTIONS and lower not in _SCALAR_TOO):
        raise SqlRefused(f"the function {name} is not allowed in ad hoc SQL")
    if lower in _IN_FUNCTIONS and node.children and len(node.children[0].children) == 2:
        right = node.children[0].children[1]
        if right.kind == "Identifier":  # x IN table
            _check_table(right.detail, context)


def check_outside_access(root: AstNode) -> None:
    """Refuse (``SqlRefused``) a statement that reaches outside the store: a table function
    (but those of ``ALLOWED_TABLE_FUNCTIONS``) anywhere (``FROM``, ``INSERT INTO FUNCTION``,
    ``DESCRIBE``), a function of ``DENIED_FUNCTIONS``, a dictionary source, a table engine
    other than ``*MergeTree`` and ``OWNER_ENGINES``, a backup or restore, ``FROM INFILE``,
    ``INTO OUTFILE``, a ``SYSTEM`` statement.

    ``root``: the statement's ``EXPLAIN AST`` tree. Returns None when none is found.
    """
    if root.kind.upper() == "SYSTEM":  # SYSTEM SHUTDOWN, RELOAD, FLUSH ...: none is ours
        raise SqlRefused("the owner channel does not run SYSTEM statements")
    for node in root.walk():
        kind = node.kind
        if kind.startswith(("Backup", "Restore")) or kind == "FunctionWithKeyValueArguments":
            raise SqlRefused(f"the owner channel does not run {kind} (it reaches outside)")
        if kind in ("InsertQuery", "SelectWithUnionQuery") and any(
            c.kind == "Literal" for c in node.children
        ):  # the tree's only trace of INSERT ... FROM INFILE and SELECT ... INTO OUTFILE
            raise SqlRefused("the owner channel does not read or write files (INFILE, OUTFILE)")
        if kind != "Function":
            continue
        name = node.detail.split(" ", 1)[0]
        lower = name.lower()
        parent = node.parent
        is_engine = parent is not None and parent.label == "Storage definition"
        if is_engine and parent is not None and parent.children[0] is node:
            if not (lower.endswith("mergetree") or lower in OWNER_ENGINES):
                raise SqlRefused(f"the owner channel does not create {name} tables")
            continue
        if lower in ALLOWED_TABLE_FUNCTIONS:
            continue
        as_table = parent is not None and parent.kind in ("TableExpression", "InsertQuery")
        if lower in _SCALAR_TOO and not as_table:
            continue
        if lower in TABLE_FUNCTIONS or _is_denied(lower):
            raise SqlRefused(
                f"the owner channel does not run {name}(): it reaches outside the store"
            )
