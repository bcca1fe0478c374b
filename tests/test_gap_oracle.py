"""The gap tracker's previous-alert read (one read of a gap's stored alerts, periods from
their windows) against the per-period id lookups it replaced (``oracle``: the loop of
``track_gaps`` before 2026-12-06, commit 9d4cecc), on the same warehouse state: the alerts
returned must be the same, however the stored alerts came to be.
"""

from __future__ import annotations

from datetime import timedelta

import orjson
import pytest
from test_gaps import NOW, T0, batch, store, storm_batch

from processors.gaps import PreviousAlert, gap_alert, gap_alert_id
from refusal_audit.alerts import gaps as gaps_room
from refusal_audit.alerts.gaps import track_gaps
from schemas.alerts import Alert
from warehouse import Warehouse
from warehouse.gaps import (
    evidence_sql,
    gap_alerts_of,
    gap_db,
    gap_evidence,
    newest_sighting,
    stored_gap_alerts,
)

pytestmark = pytest.mark.integration

HOUR, DAY = timedelta(hours=1), timedelta(days=1)


def oracle(warehouse: Warehouse, cooldown: timedelta) -> list[Alert]:
    """The alerts the tracker of 9d4cecc returned, sightings already recorded (its loop,
    copied: one alert-id lookup per gap and cooldown period)."""
    db = gap_db(warehouse.client)  # type: ignore[arg-type]
    newest = newest_sighting(db)
    assert newest is not None
    candidates = gap_evidence(db, newest - cooldown, cooldown)
    ids = [gap_alert_id(e.policy_bundle, e.gap_id, k) for e, _, _ in candidates
           for k in range(e.period + 1)]  # fmt: skip
    stored = stored_gap_alerts(db, ids)
    alerts: list[Alert] = []
    for evidence, _, tracked in candidates:
        bundle, gap = evidence.policy_bundle, evidence.gap_id
        if gap_alert_id(bundle, gap, evidence.period) in stored:
            continue
        previous = None
        for k in range(evidence.period - 1, -1, -1):
            payload = stored.get(gap_alert_id(bundle, gap, k))
            if payload is not None:
                previous = PreviousAlert(k, gaps_room._previous_counts(payload))
                break
        query = evidence_sql(db.database, bundle, gap, tracked)
        alert = gap_alert(
            evidence, cooldown=cooldown, previous=previous, now=NOW, evidence_query=query
        )
        if alert is not None:
            alerts.append(alert)
    return alerts


def both(warehouse: Warehouse, cooldown: timedelta = DAY, keep: bool = True) -> list[Alert]:
    """One tracking pass, checked against the oracle on the same state; stored if ``keep``."""
    new = track_gaps(warehouse.client, now=NOW, cooldown=cooldown)  # type: ignore[arg-type]
    assert new == oracle(warehouse, cooldown)
    if keep:
        store(warehouse, new)
    return new


def test_a_cooldown_changed_between_passes(warehouse: Warehouse) -> None:
    """Alerts stored under 1 h, then tracked with 24 h, and back: the ids do not name the
    cooldown, so each pass sees the other's alerts as its own periods' alerts."""
    for i, (at, cooldown) in enumerate(
        [(T0, HOUR), (T0 + 2 * HOUR, HOUR), (T0 + 5 * HOUR, DAY), (T0 + 26 * HOUR, DAY),
         (T0 + 27 * HOUR, HOUR), (T0 + 30 * HOUR, DAY), (T0 + 31 * HOUR, HOUR)]
    ):  # fmt: skip
        warehouse.insert_batches([storm_batch(i, at)])
        both(warehouse, cooldown)


def test_a_first_sighting_that_moves_earlier(warehouse: Warehouse) -> None:
    """A late batch with an older event time moves the gap's first_seen back: the stored
    alerts' windows no longer start at whole periods of the new first_seen."""
    warehouse.insert_batches([storm_batch(0, T0 + 10 * HOUR)])
    both(warehouse, HOUR)
    warehouse.insert_batches([storm_batch(1, T0 + 12 * HOUR)])
    both(warehouse, HOUR)
    warehouse.insert_batches([storm_batch(2, T0 + 30 * timedelta(minutes=1))])  # older
    both(warehouse, HOUR)
    warehouse.insert_batches([storm_batch(3, T0 + 14 * HOUR)])
    both(warehouse, HOUR)
    both(warehouse, DAY)


def test_alerts_stored_twice_and_many_periods(warehouse: Warehouse) -> None:
    """Each alert stored twice (before a merge); 1 s periods over 3 hours (10,800 ids for the
    oracle)."""
    second = timedelta(seconds=1)
    for i in range(4):
        warehouse.insert_batches([storm_batch(i, T0 + i * timedelta(minutes=59, seconds=7))])
        new = both(warehouse, second)
        store(warehouse, new)


def _row(alert: Alert, **changes: object) -> dict[str, object]:
    row: dict[str, object] = {
        "alert_id": alert.alert_id, "kind": alert.kind, "severity": alert.severity,
        "created_at": alert.created_at, "policy_bundle": alert.scope.policy_bundle,
        "payload": alert.model_dump_json(),
    }  # fmt: skip
    row.update(changes)
    return row


@pytest.mark.parametrize(
    "odd",
    [
        "bundle column empty",  # the row written without its scope (insert_alerts' default)
        "no gap_id",
        pytest.param(
            "other gap_id",
            marks=pytest.mark.xfail(
                strict=True,
                reason="known: a row under a gap's earlier period id whose payload names "
                "another gap is not read, so it is not the next alert's previous one "
                "(the old lookups found it by id); docs/alerts.md",
            ),
        ),
        "not json",
        "window with an offset and microseconds",
    ],
)
def test_a_hand_written_alert_under_a_gaps_id(warehouse: Warehouse, odd: str) -> None:
    """A policy_gap row under the id of the gap's period 0, written otherwise than the
    tracker writes it: the old lookups found it by its id whatever its row said."""
    warehouse.insert_batches([storm_batch(0, T0)])
    (first,) = track_gaps(warehouse.client, now=NOW)  # type: ignore[arg-type]
    payload = orjson.loads(first.model_dump_json())
    changes: dict[str, object] = {}
    if odd == "bundle column empty":
        changes["policy_bundle"] = ""
    elif odd == "no gap_id":
        del payload["gap_id"]
    elif odd == "other gap_id":
        payload["gap_id"] = "some-other-gap"
    elif odd == "not json":
        changes["payload"] = "counts: 2 log ids"
    else:
        payload["window"]["start"] = (first.window.start + 2 * HOUR).isoformat()
        payload["window"]["start"] = payload["window"]["start"].replace("+00:00", ".000001+02:00")
    changes.setdefault("payload", orjson.dumps(payload).decode())
    warehouse.insert_alerts([_row(first, **changes)])
    both(warehouse, DAY, keep=False)  # period 0: stored, nothing due
    warehouse.insert_batches([storm_batch(1, T0 + DAY + HOUR)])
    both(warehouse, DAY)  # period 1: grew; its previous alert is the hand-written one


def test_two_bundles_with_one_gap_id(warehouse: Warehouse) -> None:
    """Two bundles' rows carrying the same gap id (hand-written: gap ids name their bundle):
    each bundle's gap finds its own alerts only."""
    text = "Questions about mixing household chemicals are refused; no clause covers it."
    warehouse.insert_batches([batch("a", T0, [(text, ["a-1"])], bundle="alpha")])
    (alpha,) = track_gaps(warehouse.client, now=NOW)  # type: ignore[arg-type]
    store(warehouse, [alpha])
    beta = alpha.model_copy(update={
        "alert_id": gap_alert_id("beta", alpha.gap_id, 0),
        "scope": alpha.scope.model_copy(update={"policy_bundle": "beta"}),
    })  # fmt: skip
    store(warehouse, [beta])
    warehouse.insert_batches([batch("a2", T0 + DAY + HOUR, [(text, ["a-2"])], bundle="alpha")])
    (again,) = both(warehouse, DAY)
    assert again.baseline_counts == alpha.current_counts


def test_the_read_by_gap_and_by_id_in_chunks(warehouse: Warehouse) -> None:
    """``gap_alerts_of`` with more ids than one chunk and fewer gaps (empty arrays bound in
    the later chunks), or with none: each stored alert once, under its payload's gap."""
    warehouse.insert_batches([storm_batch(0, T0)])
    (first,) = both(warehouse, DAY)
    db = gap_db(warehouse.client)  # type: ignore[arg-type]
    ids = [f"not-stored-{i}" for i in range(2_500)] + [first.alert_id]
    expected = {first.gap_id: {first.alert_id: first.model_dump_json()}}
    assert gap_alerts_of(db, [], ids).keys() == expected.keys()
    assert gap_alerts_of(db, [first.gap_id], ids)[first.gap_id].keys() == {first.alert_id}
    assert gap_alerts_of(db, ["other"], []) == {} == gap_alerts_of(db, [], [])
