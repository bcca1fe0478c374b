"""Builders for Grafana dashboard JSON: ClickHouse and Prometheus targets, panels, variables,
annotations and the dashboard itself (plain dicts, ready for ``json.dumps``).

Shapes follow the sources they were checked against (see docs/dashboards.md):

- ClickHouse targets are the plugin's ``CHSqlQuery`` (grafana/clickhouse-datasource
  ``src/types/sql.ts`` at the v4.20.0 release commit 973c4a508220c378ef8a477f3133bba935ca2345):
  ``editorType: "sql"``, ``rawSql``, ``format`` (sqlds format ids: 0 time series, 1 table,
  per ``src/data/utils.ts`` ``mapQueryTypeToGrafanaFormat``), ``queryType`` and
  ``pluginVersion``.
- Annotations use the plugin's annotation model (``src/data/CHAnnotationSupport.tsx``):
  ``preset: "custom"``, ``customSql`` and an SQL ``target``.
- Variable queries are ``{editorType: "sql", rawSql}`` objects, which the plugin's
  ``metricFindQuery`` runs (``src/data/CHDatasource.ts``), as in its bundled dashboards
  (``src/dashboards/otel-logs-explorer.json``).
"""

from __future__ import annotations

from typing import Any

PLUGIN_ID = "grafana-clickhouse-datasource"
PLUGIN_VERSION = "4.20.0"
CLICKHOUSE_UID = "refusal-audit-clickhouse"
PROMETHEUS_UID = "refusal-audit-prometheus"
CLICKHOUSE_DS: dict[str, str] = {"type": PLUGIN_ID, "uid": CLICKHOUSE_UID}
PROMETHEUS_DS: dict[str, str] = {"type": "prometheus", "uid": PROMETHEUS_UID}

TIME_SERIES = 0
TABLE = 1
_QUERY_TYPE = {TIME_SERIES: "timeseries", TABLE: "table"}

Json = dict[str, Any]


def ch_target(sql: str, fmt: int = TABLE, ref_id: str = "A") -> Json:
    """A ClickHouse SQL target (``CHSqlQuery``) running ``sql`` (macros and variables kept
    as written); ``fmt`` is ``TIME_SERIES`` (0) or ``TABLE`` (1)."""
    return {
        "datasource": dict(CLICKHOUSE_DS),
        "editorType": "sql",
        "format": fmt,
        "pluginVersion": PLUGIN_VERSION,
        "queryType": _QUERY_TYPE[fmt],
        "rawSql": sql.strip(),
        "refId": ref_id,
    }


def prom_target(expr: str, legend: str = "__auto", ref_id: str = "A") -> Json:
    """A Prometheus target: PromQL ``expr`` with ``legendFormat`` ``legend``."""
    return {
        "datasource": dict(PROMETHEUS_DS),
        "editorMode": "code",
        "expr": expr,
        "legendFormat": legend,
        "range": True,
        "refId": ref_id,
    }


def panel(
    kind: str,
    title: str,
    targets: list[Json],
    *,
    description: str = "",
    unit: str | None = None,
    stacked: bool = False,
    interval: str | None = None,
    width: int = 12,
    height: int = 8,
    overrides: list[Json] | None = None,
) -> Json:
    """A panel of type ``kind`` (``stat``, ``timeseries``, ``table``, ``barchart``...);
    ``gridPos`` is filled in by ``dashboard``. ``interval`` is the panel's minimum interval
    (what ``$__timeInterval`` buckets by at least), ``stacked`` stacks time series,
    ``overrides`` are field overrides (e.g. ``band``)."""
    custom: Json = {}
    if stacked:
        custom = {"stacking": {"group": "A", "mode": "normal"}, "fillOpacity": 60}
    defaults: Json = {"custom": custom}
    if unit is not None:
        defaults["unit"] = unit
    out: Json = {
        "datasource": dict(targets[0]["datasource"]),
        "description": description,
        "fieldConfig": {"defaults": defaults, "overrides": list(overrides or [])},
        "gridPos": {"h": height, "w": width, "x": 0, "y": 0},
        "options": {},
        "targets": targets,
        "title": title,
        "type": kind,
    }
    if interval is not None:
        out["interval"] = interval
    return out


def band(low: str, high: str) -> list[Json]:
    """Field overrides that draw the fields ``low`` and ``high`` of a time series as a shaded
    band: no lines, ``high`` filled down to ``low`` (Grafana's "Fill below to" override,
    ``custom.fillBelowTo``), both out of the legend but in the tooltip."""
    hidden = {"id": "custom.hideFrom", "value": {"legend": True, "tooltip": False, "viz": False}}
    return [
        {
            "matcher": {"id": "byName", "options": high},
            "properties": [
                {"id": "custom.fillBelowTo", "value": low},
                {"id": "custom.fillOpacity", "value": 20},
                {"id": "custom.lineWidth", "value": 0},
                hidden,
            ],
        },
        {
            "matcher": {"id": "byName", "options": low},
            "properties": [{"id": "custom.lineWidth", "value": 0}, hidden],
        },
    ]


def row(title: str) -> Json:
    """A (non-collapsed) row header."""
    return {
        "collapsed": False,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": 0},
        "panels": [],
        "title": title,
        "type": "row",
    }


SAFE_VALUE_REGEX = "/^[^'\\\\$]*$/"
"""Options a variable offers: values without a quote, backslash or dollar sign. Grafana's
``singlequote`` format escapes ``'`` but not ``\\``, so a value ending in a backslash would
break out of the SQL string (and the plugin expands ``$__`` macros even inside strings);
such values stay in "All", which ``$__conditionalAll`` turns into ``1=1``."""


def ch_variable(name: str, label: str, sql: str) -> Json:
    """A multi-value ClickHouse query variable with an "All" option (no custom all value,
    so "All" expands to every option; the panels wrap it in ``$__conditionalAll``). Only
    values matching ``SAFE_VALUE_REGEX`` are offered, and no custom value is accepted."""
    return {
        "allowCustomValue": False,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": dict(CLICKHOUSE_DS),
        "definition": sql.strip(),
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"editorType": "sql", "rawSql": sql.strip(), "refId": f"var-{name}"},
        "refresh": 1,
        "regex": SAFE_VALUE_REGEX,
        "sort": 1,
        "type": "query",
    }


def prom_variable(name: str, label: str, query: str) -> Json:
    """A multi-value Prometheus ``label_values(...)`` variable with "All" = ``.*``."""
    return {
        "allValue": ".*",
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "datasource": dict(PROMETHEUS_DS),
        "definition": query,
        "includeAll": True,
        "label": label,
        "multi": True,
        "name": name,
        "options": [],
        "query": {"query": query, "refId": f"var-{name}"},
        "refresh": 2,
        "regex": "",
        "sort": 1,
        "type": "query",
    }


def ch_annotation(name: str, sql: str, color: str) -> Json:
    """A ClickHouse annotation: ``sql`` returns ``time``, optional ``timeEnd`` (a region),
    ``text`` and ``tags`` (plugin docs ``docs/sources/annotations.md``)."""
    target = ch_target(sql, TABLE, ref_id="Anno")
    return {
        "customSql": target["rawSql"],
        "datasource": dict(CLICKHOUSE_DS),
        "enable": True,
        "hide": False,
        "iconColor": color,
        "name": name,
        "preset": "custom",
        "target": target,
    }


_BUILTIN_ANNOTATION: Json = {
    "builtIn": 1,
    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
    "enable": True,
    "hide": True,
    "iconColor": "rgba(0, 211, 255, 1)",
    "name": "Annotations & Alerts",
    "type": "dashboard",
}


def _layout(panels: list[Json]) -> list[Json]:
    """Place panels left to right, wrapping at 24 columns; a row starts a new line. Ids are
    assigned in order (1, 2, ...)."""
    x = y = line_height = 0
    placed: list[Json] = []
    for number, item in enumerate(panels, start=1):
        grid = item["gridPos"]
        if item["type"] == "row" or x + grid["w"] > 24:
            x, y, line_height = 0, y + line_height, 0
        grid["x"], grid["y"] = x, y
        x += grid["w"]
        line_height = max(line_height, grid["h"])
        if item["type"] == "row":
            x, y, line_height = 0, y + 1, 0
        placed.append({**item, "id": number})
    return placed


def dashboard(
    uid: str,
    title: str,
    panels: list[Json],
    variables: list[Json],
    annotations: list[Json] | None = None,
    *,
    time_from: str = "now-30d",
    description: str = "",
) -> Json:
    """A dashboard (schemaVersion 41) with ``panels`` laid out in order, ``variables``
    under ``templating`` and ``annotations`` after Grafana's built-in one."""
    return {
        "annotations": {"list": [dict(_BUILTIN_ANNOTATION), *(annotations or [])]},
        "description": description,
        "editable": False,
        "graphTooltip": 1,
        "links": [],
        "panels": _layout(panels),
        "refresh": "",
        "schemaVersion": 41,
        "tags": ["refusal-audit"],
        "templating": {"list": variables},
        "time": {"from": time_from, "to": "now"},
        "timepicker": {},
        "timezone": "utc",
        "title": title,
        "uid": uid,
        "version": 1,
    }
