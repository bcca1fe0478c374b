"""What Grafana and the ClickHouse plugin do to a panel's SQL before ClickHouse sees it,
re-implemented for the tests from the sources (so panel SQL can run on the embedded store):

1. ``$__conditionalAll(condition, $var)``: the plugin's frontend, before variables are
   replaced: the condition, or ``1=1`` when the variable's current value is ``''`` or
   ``$__all`` (grafana/clickhouse-datasource ``src/data/CHDatasource.ts``,
   ``applyConditionalAll`` and ``getMacroArgs``, release v4.20.0, commit
   973c4a508220c378ef8a477f3133bba935ca2345).
2. Grafana's variable interpolation: ``$var``, ``${var}``, ``${var:format}``; a
   multi-value variable's "All" (no custom all value) is the list of every option
   (grafana/scenes ``MultiValueVariable.getValue``); ``singlequote`` quotes each value and
   escapes ``'`` as ``\\'`` (``formatRegistry.ts``); without a format the plugin's own
   ``format`` joins a list as ``'a','b'`` and leaves a single value raw (``CHDatasource.ts``).
3. The plugin's backend macros (``pkg/macros/macros.go``, expanded by grafana/macropro
   ``parser.go``: names longest first, arguments split on top-level commas and trimmed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

ALL = "$__all"

# Grafana's global variables: a panel query must not use them by accident (templateSrv
# would replace them before the plugin sees the SQL).
_GLOBALS = {
    "__interval", "__interval_ms", "__from", "__to", "__range", "__range_s", "__range_ms",
    "__rate_interval", "__dashboard", "__user", "__org", "__timezone", "__name",
}  # fmt: skip


@dataclass(frozen=True)
class Variable:
    """A dashboard variable's state: ``selected`` values (``[ALL]`` for "All") and every
    option the variable's query returned."""

    selected: Sequence[str]
    options: Sequence[str]

    @property
    def current(self) -> str:
        """``current.value.toString()`` as the plugin reads it (a JS array joins with ',')."""
        return ",".join(self.selected)

    def value(self) -> list[str]:
        """The value Grafana interpolates: every option for "All", else the selection."""
        return list(self.options) if list(self.selected) == [ALL] else list(self.selected)


def _macro_args(query: str, open_index: int) -> list[str]:
    """Port of the plugin's ``getMacroArgs``: raw (untrimmed) arguments of the call whose
    '(' is at ``open_index``; [] when unbalanced."""
    args: list[str] = []
    depth = 0
    last = 1
    sub = query[open_index:]
    for match in re.finditer(r"[(),]", sub):
        char = match.group(0)
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 1:
            args.append(sub[last : match.start()])
            last = match.end()
        if depth == 0:
            args.append(sub[last : match.start()])
            return args
    return []


def conditional_all(sql: str, variables: Mapping[str, Variable]) -> str:
    """Port of ``applyConditionalAll`` (innermost/last call first, as ``lastIndexOf``)."""
    macro = "$__conditionalAll("
    index = sql.rfind(macro)
    while index != -1:
        params = _macro_args(sql, index + len(macro) - 1)
        if len(params) != 2:
            return sql
        found = re.search(r"(?<=\$\{)\w+(?=\})|(?<=\$)\w+", params[1].strip())
        phrase = params[0]
        if found:
            variable = variables.get(found.group(0))
            if variable is not None and variable.current in ("", ALL):
                phrase = "1=1"
        sql = sql.replace(f"{macro}{params[0]},{params[1]})", phrase, 1)
        index = sql.rfind(macro)
    return sql


def _single_quote(values: Sequence[str]) -> str:
    return ",".join("'" + v.replace("'", "\\'") + "'" for v in values)


_VARIABLE = re.compile(r"\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\$\{(\w+)(?::([^}]+))?\}")


def interpolate(sql: str, variables: Mapping[str, Variable]) -> str:
    """Grafana's templateSrv.replace with the plugin's default format (multi-value
    variables only: every variable here is multi-value)."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2) or match.group(4)
        fmt = match.group(3) or match.group(5)
        if name in _GLOBALS:
            raise AssertionError(f"query uses Grafana's global variable ${name}")
        variable = variables.get(name)
        if variable is None:
            return match.group(0)  # not a variable (e.g. a $__ macro): left as is
        values = variable.value()
        if fmt == "singlequote" or fmt is None:
            return _single_quote(values)  # the plugin's format() quotes arrays the same way
        raise AssertionError(f"format {fmt!r} not modelled")

    return _VARIABLE.sub(replace, sql)


def _closing_paren(text: str, start: int) -> int:
    depth = 0
    i = start
    while i < len(text):
        char = text[i]
        if char in "'\"":
            j = i + 1
            while j < len(text):
                if text[j] == char and text[j + 1 : j + 2] == char:
                    j += 2
                    continue
                if text[j] == char:
                    break
                j += 1
            i = j + 1
            continue
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _split_args(raw: str) -> list[str]:
    raw = raw.strip()
    if not raw:
        return []
    args, depth, start = [], 0, 0
    for i, char in enumerate(raw):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            args.append(raw[start:i].strip())
            start = i + 1
    return [*args, raw[start:].strip()]


def backend_macros(sql: str, time_from: datetime, time_to: datetime, interval_s: int) -> str:
    """The plugin's macros as ``pkg/macros/macros.go`` expands them (seconds precision:
    ``toDateTime(<unix>)``; ``$__timeInterval(c)`` is
    ``toStartOfInterval(toDateTime(c), INTERVAL <n> second)``)."""
    start, end = int(time_from.timestamp()), int(time_to.timestamp())
    ms_from, ms_to = int(time_from.timestamp() * 1000), int(time_to.timestamp() * 1000)
    seconds = max(interval_s, 1)
    handlers = {
        "timeFilter": lambda a: f"{a[0]} >= toDateTime({start}) AND {a[0]} <= toDateTime({end})",
        "timeFilter_ms": lambda a: (
            f"{a[0]} >= fromUnixTimestamp64Milli({ms_from}) AND "
            f"{a[0]} <= fromUnixTimestamp64Milli({ms_to})"
        ),
        "timeInterval": lambda a: (
            f"toStartOfInterval(toDateTime({a[0]}), INTERVAL {seconds} second)"
        ),
        "fromTime": lambda a: f"toDateTime({start})",
        "toTime": lambda a: f"toDateTime({end})",
        "interval_s": lambda a: str(seconds),
    }
    arity = {"timeFilter": 1, "timeFilter_ms": 1, "timeInterval": 1}
    for name in sorted(handlers, key=lambda n: (-len(n), n)):
        token = "$__" + name
        out, rest = [], sql
        while (at := rest.find(token)) != -1:
            after = at + len(token)
            if after < len(rest) and (rest[after].isalnum() or rest[after] == "_"):
                out.append(rest[:after])
                rest = rest[after:]
                continue
            out.append(rest[:at])
            rest = rest[after:]
            raw = ""
            if rest.startswith("("):
                end_at = _closing_paren(rest, 0)
                if end_at != -1:
                    raw, rest = rest[1:end_at], rest[end_at + 1 :]
            args = _split_args(raw)
            if name in arity and len(args) != arity[name]:
                raise AssertionError(f"{token} expects {arity[name]} argument(s): {args}")
            out.append(handlers[name](args))
        sql = "".join([*out, rest])
    return sql


def expand(
    sql: str,
    variables: Mapping[str, Variable],
    time_from: datetime,
    time_to: datetime,
    interval_s: int,
) -> str:
    """The SQL ClickHouse receives for ``sql`` (steps 1-3 of the module docstring)."""
    assert "--" not in sql and "/*" not in sql, "comments are stripped by macropro: keep none"
    expanded = backend_macros(
        interpolate(conditional_all(sql, variables), variables), time_from, time_to, interval_s
    )
    assert "$" not in expanded, f"unexpanded macro or variable in:\n{expanded}"
    return expanded
