"""The Grafana dashboards (issue 15, part 1): every panel, variable and annotation query
runs on the embedded warehouse after the plugin's macros and Grafana's variables are
expanded as they document it (tests/grafana_expand.py), with "All" and with one value; the
figures equal the named queries' and the statistics modules'; targets validate against the
plugin's query model; the committed JSON is the generator's output; the workers' dashboard
uses only exported metric names; the compose file provisions it all."""

from __future__ import annotations

import json
import re
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_data import fill
from grafana_expand import ALL, Variable, expand
from jsonschema import Draft7Validator

from processors.agreement import DEFAULT_MIN_ITEMS, agreement
from processors.stats import wilson_interval
from refusal_audit.dashboards import CLICKHOUSE_UID, PROMETHEUS_UID, build_dashboards
from refusal_audit.dashboards.__main__ import render
from refusal_audit.dashboards.sql import MIN_COMPARED
from schemas.policy import PolicyBundle
from streams.metrics import WorkerMetrics
from warehouse import Warehouse, connect, migrate
from warehouse.queries import run_named

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
DASHBOARDS = DEPLOY / "grafana" / "dashboards"
SCHEMA = json.loads((Path(__file__).parent / "grafana_query_schema.json").read_text())
FROM = datetime(2025, 1, 1, tzinfo=UTC)
DAY = 86400
AUDIT = build_dashboards()["refusal-audit.json"]
WORKERS = build_dashboards()["refusal-audit-workers.json"]


def _targets(board: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(title, target) of every panel target, annotation target and variable query."""
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target
    for annotation in board["annotations"]["list"][1:]:
        yield f"annotation {annotation['name']}", annotation["target"]
    for variable in board["templating"]["list"]:
        yield f"variable {variable['name']}", variable["query"]


@pytest.fixture(scope="module")
def store(
    chdb_dsn: str, tmp_path_factory: pytest.TempPathFactory, example_bundle: PolicyBundle
) -> Iterator[tuple[Warehouse, list[dict[str, Any]]]]:
    """A filled warehouse (tests/grafana_data.py) and the reviewed assessments."""
    database = f"g_{uuid.uuid4().hex[:16]}"
    client = connect(chdb_dsn, database)
    migrate(client, database)
    warehouse = Warehouse(client, database, retries=3, retry_wait=0.0)
    try:
        yield warehouse, fill(warehouse, tmp_path_factory.mktemp("grafana"), example_bundle)
    finally:
        client.command(f"DROP DATABASE IF EXISTS `{database}`")
        client.close()


def _run(store: Warehouse, sql: str, variables: dict[str, Variable]) -> list[dict[str, Any]]:
    until = datetime.now(UTC) + timedelta(days=1)
    expanded = expand(sql, variables, FROM, until, DAY)
    result = store.client.query(expanded)
    return [dict(zip(result.column_names, row, strict=True)) for row in result.result_rows]


def _options(store: Warehouse) -> dict[str, list[str]]:
    """Every variable's options, from running its own query."""
    return {
        v["name"]: [str(next(iter(r.values()))) for r in _run(store, v["query"]["rawSql"], {})]
        for v in AUDIT["templating"]["list"]
    }


def _all(options: dict[str, list[str]]) -> dict[str, Variable]:
    return {name: Variable([ALL], values) for name, values in options.items()}


def _one(options: dict[str, list[str]], **chosen: str) -> dict[str, Variable]:
    return {
        name: Variable([chosen.get(name, values[0])], values) for name, values in options.items()
    }


def _panel_sql(title: str) -> str:
    (panel,) = [p for p in AUDIT["panels"] if p["title"] == title]
    return str(panel["targets"][0]["rawSql"])


def test_every_query_runs_with_all_and_with_one_value(
    store: tuple[Warehouse, list[dict[str, Any]]],
) -> None:
    warehouse, _ = store
    options = _options(warehouse)
    assert options["bundle"] == ["default"] and len(options["model"]) >= 2
    empty_with_all = []
    for title, target in _targets(AUDIT):
        rows = _run(warehouse, target["rawSql"], _all(options))
        if not rows:
            empty_with_all.append(title)
        _run(warehouse, target["rawSql"], _one(options))  # one model, product, bundle
    assert empty_with_all == []
    one = _one(options)
    assert _run(warehouse, _panel_sql("Refusals audited"), one)[0]["refusals_audited"] > 0


def test_a_specific_value_filters_and_all_does_not(
    store: tuple[Warehouse, list[dict[str, Any]]],
) -> None:
    warehouse, _ = store
    options = _options(warehouse)
    sql = _panel_sql("By model and product")
    every = _run(warehouse, sql, _all(options))
    model = options["model"][1]
    chosen = {**_all(options), "model": Variable([model], options["model"])}
    only = _run(warehouse, sql, chosen)
    assert {r["model"] for r in every} == set(options["model"])
    assert {r["model"] for r in only} == {model}
    assert only == [r for r in every if r["model"] == model]
    two = {**_all(options), "model": Variable(options["model"][:2], options["model"])}
    assert {r["model"] for r in _run(warehouse, sql, two)} == set(options["model"][:2])


def test_the_wilson_band_is_processors_stats(
    store: tuple[Warehouse, list[dict[str, Any]]],
) -> None:
    warehouse, _ = store
    options = _options(warehouse)
    for row in _run(warehouse, _panel_sql("By model and product"), _all(options)):
        low, high = wilson_interval(row["estimated_false_positives"], row["audited"])
        assert (row["wilson_low"], row["wilson_high"]) == pytest.approx((low, high), abs=1e-9)
    daily = _run(
        warehouse, _panel_sql("False-positive rate with its Wilson 95% band"), _all(options)
    )
    named = run_named(warehouse.client, warehouse.database, "false_positive_rate")
    per_day: dict[date, list[int]] = defaultdict(lambda: [0, 0])
    for r in named.as_dicts():
        per_day[r["day"]][0] += r["estimated_false_positives"]
        per_day[r["day"]][1] += r["audited"]
    assert {r["time"].date() for r in daily} == set(per_day)
    for r in daily:
        k, n = per_day[r["time"].date()]
        assert r["rate"] == pytest.approx(k / n)
        assert (r["wilson_low"], r["wilson_high"]) == pytest.approx(wilson_interval(k, n), abs=1e-9)


def test_category_counts_are_the_named_querys(
    store: tuple[Warehouse, list[dict[str, Any]]],
) -> None:
    warehouse, _ = store
    options = _options(warehouse)
    model = options["model"][0]
    variables = {**_all(options), "model": Variable([model], options["model"])}
    rows = _run(warehouse, _panel_sql("Refusal categories over time (stacked)"), variables)
    got = {(r["time"].date(), r["category"]): r["assessments"] for r in rows}
    named = run_named(warehouse.client, warehouse.database, "category_mix", model=model)
    assert got == {(r["day"], r["category"]): r["assessments"] for r in named.as_dicts()}
    assert got


def test_kappa_is_processors_agreement(store: tuple[Warehouse, list[dict[str, Any]]]) -> None:
    warehouse, reviewed = store
    assert MIN_COMPARED == DEFAULT_MIN_ITEMS
    rows = _run(
        warehouse, _panel_sql("Agreement and Cohen's kappa per week"), _all(_options(warehouse))
    )
    weeks: dict[date, list[tuple[str, str]]] = defaultdict(list)
    for r in reviewed:
        day = r["ev"].astimezone(UTC).date()
        weeks[day - timedelta(days=day.weekday())].append(
            (str(r["is_estimated_false_positive"]).lower(), str(r["human_fp"]).lower())
        )
    assert {r["time"].date() for r in rows} == set(weeks)
    checked = 0
    for row in rows:
        expected = agreement(weeks[row["time"].date()])
        assert row["compared"] == expected.n
        if expected.kappa is None:
            assert row["fp_kappa"] is None
            continue
        assert row["fp_kappa"] == pytest.approx(expected.kappa)
        assert row["fp_agreement"] == pytest.approx(expected.rate)
        assert (row["fp_low"], row["fp_high"]) == pytest.approx(
            (expected.rate_low, expected.rate_high), abs=1e-9
        )
        checked += 1
    assert checked > 0


def test_verified_rate_is_the_named_querys(store: tuple[Warehouse, list[dict[str, Any]]]) -> None:
    warehouse, _ = store
    options = _options(warehouse)
    model = options["model"][0]
    variables = {**_all(options), "model": Variable([model], options["model"])}
    rows = _run(
        warehouse, _panel_sql("Verified vs estimated false-positive rate per week"), variables
    )
    named = run_named(
        warehouse.client, warehouse.database, "verified_false_positive_rate", model=model
    ).as_dicts()
    assert {r["time"].date() for r in rows} == {r["week"] for r in named}
    by_week = {r["week"]: r for r in named}
    for row in rows:
        expected = by_week[row["time"].date()]
        for column in ("model_fp_rate", "model_low", "model_high", "verified_fp_rate",
                       "verified_low", "verified_high"):  # fmt: skip
            if expected[column] is None:
                assert row[column] is None
            else:
                assert row[column] == pytest.approx(expected[column], abs=1e-9)


def test_targets_validate_against_the_plugins_query_model() -> None:
    validator = Draft7Validator(SCHEMA)
    provisioned = _provisioned_uids()
    assert provisioned == {CLICKHOUSE_UID: "grafana-clickhouse-datasource",
                           PROMETHEUS_UID: "prometheus"}  # fmt: skip
    for title, target in _targets(AUDIT):
        target = {"refId": "X", "pluginVersion": "", **target}  # variable queries carry less
        errors = [e.message for e in validator.iter_errors(target)]
        assert errors == [], f"{title}: {errors}"
    for board in (AUDIT, WORKERS):
        for panel in board["panels"]:
            for item in (panel, *panel.get("targets", [])):
                if "datasource" in item:
                    ds = item["datasource"]
                    assert provisioned[ds["uid"]] == ds["type"], panel["title"]
    for variable in AUDIT["templating"]["list"] + WORKERS["templating"]["list"]:
        assert provisioned[variable["datasource"]["uid"]] == variable["datasource"]["type"]


def test_the_committed_json_is_the_generators_output() -> None:
    committed = sorted(p.name for p in DASHBOARDS.glob("*.json"))
    boards = build_dashboards()
    assert committed == sorted(boards)
    for name, board in boards.items():
        assert (DASHBOARDS / name).read_text(encoding="utf-8") == render(board), (
            f"{name} is stale: run `make dashboards`"
        )


def _exported_names() -> set[str]:
    names: set[str] = set()
    for family in WorkerMetrics().registry.collect():
        if family.type == "counter":
            names.add(family.name + "_total")
        elif family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_sum", "_count"))
        else:
            names.add(family.name)
    return names


def test_the_workers_dashboard_uses_only_exported_metrics() -> None:
    exported = _exported_names()
    used: set[str] = set()
    for panel in WORKERS["panels"]:
        for target in panel.get("targets", []):
            used.update(re.findall(r"\brefusal_audit_\w+", target["expr"]))
    for variable in WORKERS["templating"]["list"]:
        used.update(re.findall(r"\brefusal_audit_\w+", variable["query"]["query"]))
    assert used and used <= exported, sorted(used - exported)
    assert "refusal_audit_consumer_lag_events" in used
    assert "refusal_audit_engine_latency_seconds_bucket" in used
    assert "refusal_audit_dead_letters_total" in used


def _provisioned_uids() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in (DEPLOY / "grafana" / "provisioning" / "datasources").glob("*.yml"):
        for ds in yaml.safe_load(path.read_text())["datasources"]:
            found[ds["uid"]] = ds["type"]
    return found


def test_compose_provisions_grafana_and_prometheus() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    grafana, prometheus = services["grafana"], services["prometheus"]
    for service in (grafana, prometheus):
        assert re.search(r":v?\d+\.\d+\.\d+$", service["image"]), service["image"]
        assert all(p.startswith("127.0.0.1:") for p in service.get("ports", []))
        for volume in service["volumes"]:
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), source
    env = grafana["environment"]
    assert re.fullmatch(
        r"grafana-clickhouse-datasource@\d+\.\d+\.\d+", env["GF_PLUGINS_PREINSTALL"]
    )
    assert env["GF_PLUGINS_PREINSTALL"].endswith(
        "@" + AUDIT["panels"][1]["targets"][0]["pluginVersion"]
    )
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false"
    assert env["GF_SECURITY_ADMIN_PASSWORD"].startswith("${GRAFANA_ADMIN_PASSWORD")
    clickhouse = services["clickhouse"]["environment"]
    assert env["GRAFANA_CLICKHOUSE_PASSWORD"] == clickhouse["GRAFANA_CLICKHOUSE_PASSWORD"]
    assert "CLICKHOUSE_PASSWORD" not in env  # Grafana never gets the read-write password
    assert "./clickhouse/initdb:/docker-entrypoint-initdb.d:ro" in services["clickhouse"]["volumes"]
    assert clickhouse["CLICKHOUSE_ALWAYS_RUN_INITDB_SCRIPTS"] == 1
    (path,) = (DEPLOY / "grafana" / "provisioning" / "datasources").glob("*.yml")
    (ch,) = [d for d in yaml.safe_load(path.read_text())["datasources"]
             if d["type"] == "grafana-clickhouse-datasource"]  # fmt: skip
    assert ch["jsonData"]["host"] == "clickhouse" and "clickhouse" in services
    assert ch["jsonData"]["username"] == "grafana_reader" != clickhouse["CLICKHOUSE_USER"]
    assert ch["jsonData"]["defaultDatabase"] == clickhouse["CLICKHOUSE_DB"]
    assert ch["jsonData"]["protocol"] == "http" and ch["jsonData"]["port"] == 8123
    assert ch["secureJsonData"]["password"] == "$GRAFANA_CLICKHOUSE_PASSWORD"
    (provider,) = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "dashboards" / "refusal-audit.yml").read_text()
    )["providers"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    assert mounts[provider["options"]["path"]] == "./grafana/dashboards"
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    (sd,) = job["dns_sd_configs"]
    assert sd["names"] == ["worker"] and sd["port"] == 6066 and "worker" in services
    assert services["worker"]["environment"]["REFUSAL_AUDIT_WORKER_WEB_PORT"] == 6066


VIEW_BASES = {"assessments", "review_verdicts", "policy_gap_sightings", "refusal_events"}
"""Tables under the views the panels read (current_assessments, current_verdicts,
policy_gap_dated, policy_gap_summary): ClickHouse
runs a normal view with the invoker's rights (SQL SECURITY INVOKER by default)."""


def tables_read() -> set[str]:
    """Every table or view named after FROM or JOIN in the audit dashboard's SQL (panels,
    variables, annotations)."""
    sqls = [t["rawSql"] for p in AUDIT["panels"] for t in p.get("targets", [])]
    sqls += [v["definition"] for v in AUDIT["templating"]["list"]]
    sqls += [a["target"]["rawSql"] for a in AUDIT["annotations"]["list"] if "target" in a]
    return {t for sql in sqls for t in re.findall(r"\b(?:FROM|JOIN)\s+([a-z_]\w*)", sql)}


@pytest.mark.parametrize("password", ["plain", "it's", "back\\slash\\", "x';DROP TABLE t;--"])
def test_the_grafana_reader_script_creates_a_read_only_user_with_the_password_as_given(
    password: str, tmp_path: Path, warehouse_db: tuple[Any, str]
) -> None:
    """Source the initdb script as the image's entrypoint does, with a ``clickhouseclient``
    that writes the SQL out; parse each statement with ClickHouse's own parser (chDB)."""
    import subprocess

    client = warehouse_db[0]

    def scalar(sql: str) -> str:
        return str(client.query(sql).result_rows[0][0])

    script = DEPLOY / "clickhouse" / "initdb" / "10-grafana-reader.sh"
    out = tmp_path / "sql"
    subprocess.run(
        ["bash", "-c", f'clickhouseclient=(tee -a {out}); . "{script}"'],
        env={"GRAFANA_CLICKHOUSE_PASSWORD": password, "CLICKHOUSE_DB": "refusal_audit",
             "PATH": "/usr/bin:/bin"},
        check=True, capture_output=True,
    )  # fmt: skip
    sql = out.read_text()
    statements = [s.strip() for s in re.split(r";\n(?=CREATE|GRANT|$)", sql) if s.strip()]
    # $$...$$ is ClickHouse's raw string literal: the statements reach the parser unchanged
    parsed = [scalar(f"SELECT formatQuery($${s}$$)") for s in statements]
    assert "readonly = 1, max_execution_time CHANGEABLE_IN_READONLY" in parsed[0]
    assert "SETTINGS PROFILE `grafana_reader`" in parsed[1]
    grants = {
        m.group(1)
        for p in parsed[2:]
        if (m := re.fullmatch(r"GRANT SELECT ON refusal_audit\.(\w+) TO grafana_reader", p))
    }
    assert len(grants) == len(parsed) - 2  # nothing but table grants
    assert grants == tables_read() | VIEW_BASES, "grant exactly what the dashboards read"
    assert not grants & {"reviewers", "dead_letters", "review_queues", "schema_migrations"}
    literal = re.search(r"BY ('(?:[^'\\]|\\.)*')", statements[1])
    assert literal is not None
    assert scalar(f"SELECT {literal.group(1)}") == password


def test_variables_offer_only_values_that_cannot_leave_the_sql_string() -> None:
    """Grafana's singlequote format escapes ' but not \\: a logged model name ending in a
    backslash would turn a panel's filter into other SQL. Such values are not offered (they
    stay in "All", which is 1=1) and no custom value is accepted."""
    for variable in AUDIT["templating"]["list"]:
        assert variable["allowCustomValue"] is False
        pattern = re.compile(variable["regex"].strip("/"))  # the same syntax in JS and Python
        for safe in ("acme-chat-small-2025-03", "gpt-4o (EU)", "support bot/ü"):
            assert pattern.search(safe), safe
        for unsafe in ("evil\\", "a'b", "m$__toTime", "\\') OR 1=1 --"):
            assert not pattern.search(unsafe), unsafe


def test_the_ab_panel_counts_users_as_ab_report_does(
    store: tuple[Warehouse, list[dict[str, Any]]],
) -> None:
    """The A/B table counts users (the randomisation unit), like ``ab report``'s
    ``aggregate``: a user exposed twice once, a user seen in both arms not at all."""
    from processors.calibration.ab_aggregate import aggregate
    from schemas.calibration import ArmPlan, ExperimentPlan
    from warehouse.calibration import ab_events

    warehouse, _ = store
    rows = _run(warehouse, _panel_sql("A/B experiments by arm"), _all(_options(warehouse)))
    plan = ExperimentPlan(
        experiment_id="exp-1",
        control_arm="a",
        arms=[ArmPlan(arm_id="a", weight=1.0), ArmPlan(arm_id="b", weight=1.0)],
    )
    figures, quality, _ = aggregate(ab_events(warehouse, "exp-1"), plan)
    assert quality.units_in_several_arms == 1
    panel = {r["arm_id"]: r for r in rows if r["experiment_id"] == "exp-1"}
    assert set(panel) == set(figures) == {"a", "b"}
    for arm, f in figures.items():
        row = panel[arm]
        assert (row["users"], row["exposures"]) == (f.units, f.exposures)
        assert row["users_re_requesting"] == f.re_request_units
        assert row["users_with_fulfilled_re_request"] == f.circumvention_units
        assert row["users_escalated"] == f.escalation_units
    assert panel["a"]["exposures"] > panel["a"]["users"]  # u-2 was exposed twice
