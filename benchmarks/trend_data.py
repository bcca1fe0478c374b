"""Synthetic warehouse contents for ``benchmarks/trend_queries.py``, generated inside ClickHouse.

Every table the trend queries read is filled with ``INSERT ... SELECT`` from ``numbers()``,
so 100 million assessments take minutes, not hours, and go through the real schema
(``warehouse.migrate``). Row ``n`` (0 <= n < rows) is one refusal event and its one
assessment; everything about it derives from hashes of ``n``, so a batch can name its log
ids without a join:

- ``refusal_events``: ``rows`` refusals plus ``rows // 9`` non-refusals (a 90% refusal
  share), event times over ``DAYS`` days ending today (UTC), rising with ``n`` as a stream's
  do (each within 10 minutes of its place, so a batch of consecutive refusals spans
  minutes, as a window does, not the whole period), 50 models and 20 products
  (skewed: a few carry most of the traffic), one policy bundle, the classifier's verdict on
  30% of the events with a 4% disagreement rate;
- ``assessments``: one per refusal, the taxonomy's categories (``CATEGORIES``), an
  over-refusal (estimated false positive) rate of 8-25% depending on the model, 6% flagged
  for review and 2% sampled;
- ``audit_batches``: one per ``BATCH`` consecutive assessments, with usage and latency, one
  policy-gap flag in 2% of them;
- ``review_verdicts``: one verdict for every sampled or flagged assessment in 1 of 8;
- ``alerts``, ``dead_letters``, ``policy_gap_sightings``: a few thousand rows each;
- ``redelivered`` (a share, default 1%) of events and their assessments stored a second
  time, later (``ingested_at`` / ``audited_at``), with the same content: the duplicates
  ``FINAL`` folds away, which must not change any result.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from warehouse.client import Client

DAYS = 400
MODELS = 50
PRODUCTS = 20
BATCH = 200
CHUNK = 10_000_000
CATEGORIES = (
    "over_refusal", "policy_gray_zone", "capability_boundary", "clarification_needed",
    "violence", "weapons", "drugs", "self_harm", "hate_harassment", "sexual_minors",
    "sexual_content", "privacy", "cyber", "fraud", "misinformation", "intellectual_property",
)  # fmt: skip
BUNDLE = "wren-policy"


def start_day() -> datetime:
    """Midnight UTC of the first generated day (today's midnight minus ``DAYS - 1`` days)."""
    today = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return today - timedelta(days=DAYS - 1)


def _fields(start: datetime) -> str:
    """``WITH`` aliases of row ``n``: its log id, time, model, product and hashes."""
    t0 = int(start.timestamp())
    cats = ", ".join(f"'{c}'" for c in CATEGORIES)
    return f"""
    lower(hex(sipHash128(n))) AS lid,
    cityHash64(n, 1) AS h1,
    cityHash64(n, 2) AS h2,
    cityHash64(n, 3) AS h3,
    toDateTime64({t0} + intDiv((n % 1000000000000) * {DAYS * 86400}, {{span:UInt64}})
                 + (h1 % 600) + (h2 % 1000) / 1000, 3, 'UTC') AS et,
    toUInt32(floor({MODELS} * pow((h2 % 100000) / 100000, 2))) AS mi,
    toUInt32(floor({PRODUCTS} * pow((h3 % 100000) / 100000, 1.5))) AS pi,
    concat('model-', leftPad(toString(mi), 2, '0')) AS mdl,
    concat('product-', leftPad(toString(pi), 2, '0')) AS prd,
    [{cats}][1 + (h3 % 7919) % {len(CATEGORIES)}] AS cat,
    h3 % 10 < 3 AS classified,
    classified AND h1 % 25 = 0 AS disagrees,
    (h1 % 10000) < 800 + mi * 34 AS fp,
    h2 % 100 < 6 AS flagged,
    h2 % 100 >= 98 AS sampled,
    et + toIntervalSecond(60 + (h3 % 3600)) AS audited"""


def _events_sql(db: str, refusal: bool, lag_s: int) -> str:
    """INSERT of the events ``n`` in ``[lo, lo + count)``: refusals, or non-refusals (their
    ``n`` offset by 10^12 so their log ids differ). A classifier verdict on 30% of them; it
    decides ``is_refusal``, and our detection disagrees with it in 1 of 25."""
    offset = "" if refusal else " + 1000000000000"
    verdict = "true" if refusal else "false"
    other = "'classifier_refusal_detector_not'" if refusal else "'detector_refusal_classifier_not'"
    response = (
        "concat('I cannot help with that request (', toString(h3 % 40), ').')"
        if refusal
        else "concat('Sure, here is how to do task ', toString(h1 % 5000), '.')"
    )
    return f"""
INSERT INTO `{db}`.refusal_events
SELECT lid, et, '1',
       concat('Please help me with task ', toString(h1 % 5000), ' about ', toString(h2 % 300)),
       {response}, mdl, prd, '{BUNDLE}',
       if(h1 % 3 = 0, NULL, concat('conv-', toString(h2 % 1000000))),
       classified, if(classified, h2 % 5 = 0, NULL), if(classified, (h2 % 1000) / 1000, NULL),
       [], if(classified, {verdict}, NULL), map('locale', 'en'), map(), {verdict},
       '{"explicit" if refusal else "none"}', {"0.9" if refusal else "0.05"},
       {"['cannot_help']" if refusal else "[]"}, 'kafka:refusal-events',
       et + toIntervalSecond(5 + (h2 % 600) + {lag_s}), lower(hex(cityHash64(n, 9))),
       if(disagrees, NOT {verdict}, {verdict}), {"0.9" if refusal else "0.05"},
       if(disagrees, {other}, 'none')
FROM (SELECT number{offset} AS n FROM numbers({{lo:UInt64}}, {{count:UInt64}}))
"""


def _assessments_sql(db: str) -> str:
    """INSERT of the assessments of refusals ``n`` in ``[lo, lo + count)``."""
    return f"""
INSERT INTO `{db}`.assessments
SELECT lid, cat, fp,
       if(h2 % 4 = 0, NULL, concat('clause-', toString(1 + h1 % 30))),
       'synthetic rationale', flagged, concat('batch-', toString(intDiv(n, {BATCH}))),
       '{BUNDLE}', 'v1', 'local', 'local-rules', '1', 'p1', audited, et, mdl, prd,
       (h1 % 1000) / 1000, flagged OR sampled,
       multiIf(flagged, 'flagged', sampled, 'random_sample', '')
FROM (SELECT number AS n FROM numbers({{lo:UInt64}}, {{count:UInt64}}))
"""


def _batches_sql(db: str, start: datetime) -> str:
    t0 = int(start.timestamp())
    return f"""
INSERT INTO `{db}`.audit_batches
SELECT concat('batch-', toString(b)), '{BUNDLE}', 'v1', 'local', 'local-rules', '1', 'p1',
       toDateTime64({t0} + intDiv(b * {BATCH} * {DAYS * 86400}, {{rows:UInt64}}) + 3600, 3, 'UTC'),
       arrayMap(i -> lower(hex(sipHash128(b * {BATCH} + i))),
                range(toUInt64(least({BATCH}, {{rows:UInt64}} - b * {BATCH})))),
       toUInt32(least({BATCH}, {{rows:UInt64}} - b * {BATCH})), toUInt32(b % 40),
       map('over_refusal', toUInt32(b % 40)),
       if(cityHash64(b, 7) % 50 = 0,
          [(concat('No clause covers request kind ', toString(b % 12)),
            [lower(hex(sipHash128(b * {BATCH})))])], []),
       [], 40000 + b % 999, 10000, 3000 + b % 777, 800 + (b % 400)
FROM (SELECT number AS b FROM numbers({{batches:UInt64}}))
"""


def _verdicts_sql(db: str) -> str:
    """INSERT of a verdict on one in 8 of the flagged or sampled assessments in the range."""
    return f"""
INSERT INTO `{db}`.review_verdicts
SELECT concat('verdict-', lid), lid, '{BUNDLE}', audited, concat('reviewer-', toString(h1 % 7)),
       if(h1 % 5 = 0, 'disagree', 'agree'),
       if(h1 % 5 = 0, 'policy_gray_zone', NULL), if(h1 % 5 = 0, NOT fp, NULL), NULL, '',
       mdl, prd, cat, fp, NULL, 'local', 'local-rules', '1', 'p1', 'v1',
       if(flagged, 'flagged', 'random_sample'), audited + toIntervalHour(2), 'review-app'
FROM (SELECT number AS n FROM numbers({{lo:UInt64}}, {{count:UInt64}}))
WHERE (flagged OR sampled) AND h1 % 8 = 0
"""


def _alert_json(start: datetime) -> str:
    """One valid ``schemas.alerts.Alert`` payload (JSON) with the id ``ALERT-ID``."""
    from schemas.alerts import Alert

    hour = timedelta(hours=1)
    statistic = dict(name="chi2", value=12.0, threshold=0.05, p_value=0.001, q_value=0.004,
                     effect_size=7.5, effect_size_name="rate_difference_pp",
                     effect_size_threshold=5.0)  # fmt: skip
    return Alert.model_validate(
        {
            "alert_id": "ALERT-ID",
            "kind": "false_positive_rate_shift",
            "severity": "warning",
            "scope": {"policy_bundle": BUNDLE, "model": "model-00", "product": "all"},
            "window": {"start": start, "end": start + hour},
            "baseline": {"start": start - 24 * hour, "end": start},
            "statistic": statistic,
            "current_counts": {"refusals": 400, "false_positives": 90},
            "baseline_counts": {"refusals": 9000, "false_positives": 1300},
            "summary": "synthetic alert. Reproduce the counts with: SELECT 1",
            "evidence_query": "SELECT 1",
            "created_at": start + hour,
        }
    ).model_dump_json()


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _small_tables(db: str, start: datetime) -> list[str]:
    t0 = int(start.timestamp())
    return [
        f"""INSERT INTO `{db}`.alerts
SELECT concat('alert-', toString(number)), 'false_positive_rate_shift', 'warning', '{BUNDLE}',
       concat('model-', leftPad(toString(number % {MODELS}), 2, '0')), 'all',
       toDateTime64({t0} + number * 3600 * 3, 3, 'UTC'),
       toDateTime64({t0} + number * 3600 * 3 + 3600, 3, 'UTC'), 'synthetic alert',
       replaceOne({_quote(_alert_json(start))}, 'ALERT-ID', concat('alert-', toString(number))),
       toDateTime64({t0} + number * 3600 * 3 + 4000, 3, 'UTC')
FROM numbers(3000)""",
        f"""INSERT INTO `{db}`.dead_letters (dead_letter_id, stage, reason_code, reason, source,
       location, raw, log_id, created_at)
SELECT concat('dl-', toString(number)), ['decode', 'audit', 'sink'][1 + number % 3],
       ['invalid_json', 'schema', 'duplicate_log_id'][1 + number % 3], 'synthetic',
       concat('kafka:topic-', toString(number % 4)),
       concat('partition 0 offset ', toString(number)),
       '{{}}', NULL, toDateTime64({t0} + number * 1700, 3, 'UTC')
FROM numbers(20000)""",
        f"""INSERT INTO `{db}`.policy_gap_sightings
SELECT '{BUNDLE}', concat('gap-', toString(toUInt64(substring(batch_id, 7)) % 12)), flag.2[1],
       batch_id, flag.1, flag.1, audited_at
FROM `{db}`.audit_batches FINAL
ARRAY JOIN policy_gap_flags AS flag""",
    ]


def generate(
    client: Client, database: str, rows: int, *, redelivered: float = 0.01, chunk: int = CHUNK
) -> dict[str, float]:
    """Fill ``database`` (already migrated, empty) with ``rows`` refusals and assessments as
    the module docstring describes. Returns wall seconds per step (``events``,
    ``assessments``, ``batches``, ``verdicts``, ``redelivered``, ``small``). Raises what the
    client raises."""
    start = start_day()
    timings: dict[str, float] = {}
    head = f"WITH {_fields(start)}\n"

    def step(name: str, sql: str, **params: int) -> None:
        t = time.perf_counter()
        client.command(sql, parameters=params or None)
        timings[name] = timings.get(name, 0.0) + time.perf_counter() - t

    def chunked(name: str, sql: str, total: int, span: int = rows) -> None:
        sql = _with_fields(sql, head)
        for at in range(0, total, chunk):
            step(name, sql, lo=at, count=min(chunk, total - at), span=max(1, span))

    chunked("events", _events_sql(database, True, 0), rows)
    chunked("events", _events_sql(database, False, 0), rows // 9, rows // 9)
    chunked("assessments", _assessments_sql(database), rows)
    step("batches", _batches_sql(database, start), rows=rows, batches=-(-rows // BATCH))
    chunked("verdicts", _verdicts_sql(database), rows)
    dup = int(rows * redelivered)
    if dup:
        # the same events (stored again two hours later) and identical assessments
        chunked("redelivered", _events_sql(database, True, 7200), dup)
        chunked("redelivered", _assessments_sql(database), dup)
    for sql in _small_tables(database, start):
        step("small", sql)
    return timings


def _with_fields(sql: str, head: str) -> str:
    """``sql`` with the row aliases (``WITH``) placed before its outermost SELECT."""
    at = sql.index("SELECT")
    return sql[:at] + head + sql[at:]
