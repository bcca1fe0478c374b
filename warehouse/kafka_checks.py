"""SQL that validates a JSON message against a pydantic model, for ClickHouse's Kafka
engine views (``warehouse.kafka_engine``): ``message_problems`` generates, from the model,
an ``Array(String)`` expression of the pydantic-style locations that fail (required
fields, JSON types, literals, length and range constraints, unknown fields), and the SQL
text helpers the generators share. Pure: nothing here connects to a server.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Le, MaxLen, MinLen
from pydantic import AwareDatetime, BaseModel, StringConstraints

__all__ = [
    "concat_arrays",
    "is_model",
    "lit",
    "lits",
    "message_problems",
    "split_annotation",
    "sql_array",
]

# ---- SQL text helpers ------------------------------------------------------------------


def lit(text: str) -> str:
    """``text`` as a ClickHouse string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def lits(values: Sequence[str]) -> str:
    """``('a', 'b')`` for an ``IN`` list."""
    return "(" + ", ".join(lit(v) for v in values) + ")"


def sql_array(values: Sequence[str]) -> str:
    """``['a', 'b']``."""
    return "[" + ", ".join(lit(v) for v in values) + "]"


def concat_arrays(parts: Sequence[str]) -> str:
    if not parts:
        return "CAST([], 'Array(String)')"
    if len(parts) == 1:
        return parts[0]
    return "arrayConcat(\n        " + ",\n        ".join(parts) + ")"


# ---- validation problems generated from the pydantic models ----------------------------


@dataclass(frozen=True)
class _Loc:
    """Where a JSON value is: ``doc`` (an SQL expression of JSON text) and the ``keys`` from
    its root; ``label`` is its pydantic-style error location as SQL parts (``(is_literal,
    text)``), e.g. ``summary.policy_gap_flags.0.description``."""

    doc: str
    keys: tuple[str, ...] = ()
    label: tuple[tuple[bool, str], ...] = ()

    def child(self, name: str) -> _Loc:
        sep = "." if self.label else ""
        return _Loc(self.doc, (*self.keys, name), (*self.label, (True, sep + name)))

    def element(self, doc: str, label_sql: str) -> _Loc:
        """An element of an array or object held in lambda variable ``doc``, labelled by
        this location, a dot and ``label_sql`` (an SQL string expression)."""
        return _Loc(doc, (), (*self.label, (True, "."), (False, label_sql)))

    @property
    def args(self) -> str:
        return ", ".join([self.doc, *(lit(k) for k in self.keys)])

    @property
    def label_sql(self) -> str:
        parts: list[str] = []
        literal = ""
        for is_literal, text in self.label:
            if is_literal:
                literal += text
                continue
            if literal:
                parts.append(lit(literal))
                literal = ""
            parts.append(text)
        if literal or not parts:
            parts.append(lit(literal))
        return parts[0] if len(parts) == 1 else f"concat({', '.join(parts)})"

    def fails_unless(self, condition: str) -> str:
        """An ``Array(String)`` expression: empty when ``condition`` holds, else this label."""
        return f"if({condition}, [], [{self.label_sql}])"


_NUMBER = ("Int64", "UInt64", "Double")


def split_annotation(annotation: Any) -> tuple[Any, list[Any], bool]:
    """``(base type, constraint metadata, nullable)`` of a field annotation."""
    metadata: list[Any] = []
    nullable = False
    while True:
        origin = get_origin(annotation)
        if origin is Annotated:
            annotation, *extra = get_args(annotation)
            metadata.extend(extra)
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(annotation) if a is not type(None)]
            if len(args) != 1:
                raise TypeError(f"unsupported union {annotation!r}")
            annotation, nullable = args[0], True
        else:
            return annotation, metadata, nullable


def is_model(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _is_datetime(tp: Any) -> bool:
    return tp is AwareDatetime or (isinstance(tp, type) and issubclass(tp, datetime))


def _json_types(tp: Any) -> tuple[str, ...]:
    """The JSON types (``JSONType``) a value of Python type ``tp`` may have in a worker's
    ``model_dump_json``. Raises ``TypeError`` for a type this generator does not know."""
    origin = get_origin(tp)
    if origin is Literal or tp is str or _is_datetime(tp):
        return ("String",)
    if tp is bool:
        return ("Bool",)
    if tp is int:
        return ("Int64", "UInt64")
    if tp is float:
        return _NUMBER
    if origin is dict or tp is dict:
        return ("Object",)
    if origin is list or tp is list:
        return ("Array",)
    if is_model(tp):
        return ("Object",)
    raise TypeError(f"no JSON check for {tp!r}")


def _constraint_problems(tp: Any, metadata: Sequence[Any], loc: _Loc) -> list[str]:
    """Problems of ``metadata`` constraints (ge/le, min/max length) of a value of ``tp``
    at ``loc``, checked only when the value has the right JSON type."""
    out: list[str] = []
    origin = get_origin(tp)
    for item in metadata:
        bounds: list[tuple[str, str]] = []  # (measure kind, SQL comparison)
        if isinstance(item, Ge):
            bounds.append(("number", f">= {item.ge!r}"))
        elif isinstance(item, Le):
            bounds.append(("number", f"<= {item.le!r}"))
        elif isinstance(item, MinLen):
            bounds.append(("length", f">= {item.min_length}"))
        elif isinstance(item, MaxLen):
            bounds.append(("length", f"<= {item.max_length}"))
        elif isinstance(item, StringConstraints):
            kind = "stripped" if item.strip_whitespace else "length"
            if item.min_length is not None:
                bounds.append((kind, f">= {item.min_length}"))
            if item.max_length is not None:
                bounds.append((kind, f"<= {item.max_length}"))
        for kind, comparison in bounds:
            if kind == "number":
                guard, measure = f"JSONType({loc.args}) NOT IN {lits(_NUMBER)}", "JSONExtractFloat"
                out.append(loc.fails_unless(f"{guard} OR {measure}({loc.args}) {comparison}"))
            elif origin is list:
                guard = f"JSONType({loc.args}) != 'Array'"
                out.append(loc.fails_unless(
                    f"{guard} OR length(JSONExtractArrayRaw({loc.args})) {comparison}"
                ))  # fmt: skip
            else:
                text = f"JSONExtractString({loc.args})"
                if kind == "stripped":
                    text = f"trimBoth({text})"
                guard = f"JSONType({loc.args}) != 'String'"
                out.append(loc.fails_unless(f"{guard} OR lengthUTF8({text}) {comparison}"))
    return out


def _value_problems(
    annotation: Any, loc: _Loc, depth: int, constraints: Sequence[Any] = ()
) -> list[str]:
    """Problems of the value at ``loc`` (known to exist) against ``annotation`` and the
    field's ``constraints`` (``FieldInfo.metadata``): its JSON type, then (for the right
    type) literals, datetimes, constraints and nested values."""
    tp, metadata, nullable = split_annotation(annotation)
    metadata = [*constraints, *metadata]
    allowed = _json_types(tp) + (("Null",) if nullable else ())
    out = [loc.fails_unless(f"JSONType({loc.args}) IN {lits(allowed)}")]
    origin = get_origin(tp)
    if origin is Literal:
        values = [str(v) for v in get_args(tp)]
        out.append(loc.fails_unless(
            f"JSONType({loc.args}) != 'String' OR JSONExtractString({loc.args}) IN {lits(values)}"
        ))  # fmt: skip
    elif _is_datetime(tp):
        parsed = f"parseDateTime64BestEffortOrNull(JSONExtractString({loc.args}), 3, 'UTC')"
        out.append(loc.fails_unless(f"JSONType({loc.args}) != 'String' OR {parsed} IS NOT NULL"))
    out.extend(_constraint_problems(tp, metadata, loc))
    var, idx = f"x{depth}", f"i{depth}"
    if origin is list:
        (item,) = get_args(tp)
        raw = f"JSONExtractArrayRaw({loc.args})"
        inner = concat_arrays(_value_problems(item, loc.element(var, f"toString({idx} - 1)"),
                                               depth + 1))  # fmt: skip
        out.append(
            f"if(JSONType({loc.args}) = 'Array', arrayFlatten(arrayMap(({var}, {idx}) -> "
            f"{inner}, {raw}, arrayEnumerate({raw}))), [])"
        )
    elif origin is dict:
        _, item = get_args(tp)
        pairs = f"JSONExtractKeysAndValuesRaw({loc.args})"
        inner = concat_arrays(_value_problems(
            item, loc.element(f"tupleElement({var}, 2)", f"tupleElement({var}, 1)"), depth + 1
        ))  # fmt: skip
        out.append(
            f"if(JSONType({loc.args}) = 'Object', arrayFlatten(arrayMap({var} -> {inner}, "
            f"{pairs})), [])"
        )
    elif is_model(tp):
        inner = concat_arrays(_model_problems(tp, loc, depth + 1))
        out.append(f"if(JSONType({loc.args}) = 'Object', {inner}, [])")
    return out


def _model_problems(model: type[BaseModel], loc: _Loc, depth: int) -> list[str]:
    """Problems of the JSON object at ``loc`` as ``model``: missing required fields, each
    field's value, and (``extra="forbid"``) unknown keys, labelled by their names."""
    out: list[str] = []
    for name, info in model.model_fields.items():
        child = loc.child(info.alias or name)
        present = f"JSONHas({child.args})"
        if info.is_required():
            out.append(child.fails_unless(present))
        checks = _value_problems(info.annotation, child, depth, info.metadata)
        out.append(f"if({present}, {concat_arrays(checks)}, [])")
    if model.model_config.get("extra") == "forbid":
        known = [info.alias or name for name, info in model.model_fields.items()]
        prefix = loc.label_sql if loc.label else None
        var = f"k{depth}"
        label = f"concat({prefix}, '.', {var})" if prefix else var
        out.append(
            f"arrayMap({var} -> {label}, arrayFilter({var} -> NOT has({sql_array(known)}, {var}), "
            f"JSONExtractKeys({loc.args})))"
        )
    return out


def message_problems(model: type[BaseModel], message: str = "message") -> str:
    """An SQL expression of the ``Array(String)`` of pydantic-style error locations (sorted,
    distinct) of the JSON text ``message`` as ``model``; empty when it would validate (up
    to the lax coercions the module docstring names). ``['(value)']`` when it is not one
    JSON object. Raises ``TypeError`` for a model field type the generator does not know."""
    root = _Loc(message)
    inner = concat_arrays(_model_problems(model, root, 1))
    return (
        f"if(isValidJSON({message}) AND JSONType({message}) = 'Object', "
        f"arraySort(arrayDistinct({inner})), ['(value)'])"
    )
