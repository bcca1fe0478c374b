"""Volume against a trailing baseline when the scope is younger than the baseline."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from drift_data import Row, stored_rows, xstest_refusals

from processors.drift_detection import DetectorSettings
from refusal_audit.alerts.drift import DriftConfig, evaluate_windows
from warehouse.store import Warehouse

pytestmark = pytest.mark.integration

HOUR = timedelta(hours=1)
W0 = datetime(2026, 3, 2, 10, tzinfo=UTC)


def store(warehouse: Warehouse, rows: list[Row], at: datetime) -> None:
    events, assessments = stored_rows(rows, at)
    warehouse.insert_events(events)
    warehouse.insert_assessments(assessments)


def test_unchanged_traffic_with_little_history_fires_nothing(
    warehouse: Warehouse, shared_data: Path
) -> None:
    """The same model's refusals in two consecutive windows, with a 24-window baseline of
    which only one window has data: no volume alert (a young scope is not compared with
    empty windows from before it existed), and no other alert."""
    rows = xstest_refusals(shared_data, "gpt4")
    store(warehouse, rows, W0 + timedelta(minutes=10))
    again = [Row(f"again-{r.log_id}", r.category, r.false_positive, model=r.model) for r in rows]
    store(warehouse, again, W0 + HOUR + timedelta(minutes=10))
    config = DriftConfig(detectors=DetectorSettings(min_events=200))
    [result] = evaluate_windows(
        warehouse.client, warehouse.database, config, now=W0 + 3 * HOUR, windows=[W0 + HOUR]
    )
    assert result.alerts == []
    volume = next(f for f in result.evaluation.findings if f.kind == "volume_anomaly")
    assert volume.status == "no_change" and volume.statistic == pytest.approx(1.0)
