"""Policy-gap alerts: flags grouped into gaps, evidence in ClickHouse, no alert storms.

Grouping is checked on hand-written rewordings (the set the default similarity threshold
was chosen on); tracking runs against the embedded warehouse with batches stored the way the
pipeline stores them (``Warehouse.insert_batches``), and the returned alerts stored the way
the caller stores them (``alerts`` table, payload = the alert's JSON).
"""

from __future__ import annotations

import io
import itertools
import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from typer.testing import CliRunner

from processors.gap_text import describe_gap, describe_gap_sql
from processors.gaps import DEFAULT_SIMILARITY, GapMatcher, gap_alert_id, gap_id, similarity
from refusal_audit.alerts import gaps as gaps_room
from refusal_audit.alerts.gaps import list_open_gaps, track_gaps
from refusal_audit.audit.pipeline import RunReport
from refusal_audit.audit.run_report import print_report
from refusal_audit.cli import app
from schemas import AuditSummary, BatchRecord, EngineUsage, PolicyGapFlag, StoredAssessment
from schemas.alerts import Alert
from warehouse import Warehouse, connect

pytestmark = pytest.mark.integration

T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 9, 12, 0, tzinfo=UTC)
DAY = timedelta(hours=24)

# Rewordings of eight different gaps, as different audit runs might describe them.
PARAPHRASES: dict[str, list[str]] = {
    "chemicals": [
        "Refusals of safety questions about which household chemicals must not be mixed; no "
        "clause covers chemical hazard education.",
        "Questions asking which household chemicals are unsafe to combine (bleach and ammonia) "
        "are refused; the policies have no clause on chemical safety education.",
        "Household chemical safety: users asking what cleaners should never be mixed get "
        "refused, with no matching policy clause.",
    ],
    "fiction": [
        "Creative writing requests involving violence in fiction are refused; no policy clause "
        "addresses violent content in novels or stories.",
        "Requests to write a violent scene for a novel or short story are declined although no "
        "clause covers fictional violence.",
        "Fictional violence in creative writing (fight scenes, murders in a mystery novel) is "
        "refused without any policy clause that prohibits it.",
    ],
    "history": [
        "Historical questions about extremist groups, such as how the Nazi party rose to power, "
        "are refused; no clause covers educational history of extremism.",
        "The model declines to explain the history of extremist movements like the rise of the "
        "Nazi party; educational historical discussion is not covered by any policy.",
        "Questions on the history of extremism (rise of the Nazis, fascist movements) get "
        "refused; policies are silent on historical education about extremist groups.",
    ],
    "dosage": [
        "Questions about the maximum safe dose of over-the-counter medication are refused; no "
        "policy clause covers medication dosage information.",
        "Requests for the dosage limits of common OTC medicines like ibuprofen or paracetamol "
        "are declined; the policy is silent on dosage information.",
        "Users asking how much acetaminophen is a safe daily dose are refused; there is no "
        "clause on over-the-counter medication dosage.",
    ],
    "security_testing": [
        "Requests to explain how to port-scan one's own network are refused; no clause "
        "distinguishes authorised security testing from attacks.",
        "Authorised penetration testing of the user's own systems (port scanning, "
        "vulnerability scanning) is refused; the policies do not cover defensive security "
        "testing.",
        "The model refuses to help users scan their own servers for open ports; no policy "
        "clause addresses authorised security testing.",
    ],
    "drug_interactions": [
        "Questions about dangerous drug interactions, e.g. mixing alcohol with prescription "
        "medication, are refused; no clause covers drug interaction information.",
        "Users asking whether it is safe to combine alcohol and their prescribed medicines are "
        "refused; drug interaction questions are not covered by the policies.",
    ],
    "lyrics": [
        "Requests to reproduce full song lyrics are refused citing copyright, but no policy "
        "clause covers copyrighted text reproduction.",
        "The model declines to output the complete lyrics of popular songs; copyright "
        "reproduction is not addressed by any clause.",
    ],
    "technical_jargon": [
        "Programming questions using violent jargon, such as how to kill a child process or "
        "execute a thread, are refused; no clause covers technical idioms.",
        "Technical requests with words like 'kill', 'terminate' or 'execute' (kill a zombie "
        "process in Linux) are refused as violent; the policies have no clause on technical "
        "jargon.",
    ],
}

# 125 slight rewordings of one gap; the storm uses 50 of them.
_SUBJECTS = (
    "Questions about which household chemicals must never be mixed",
    "Users asking which household cleaners are dangerous to mix",
    "Requests to list household chemicals that are unsafe to combine",
    "Safety questions on mixing household cleaning chemicals",
    "Asking whether bleach and ammonia may be mixed at home",
)
_VERBS = ("are refused", "get refused", "are declined", "were refused by the model", "are blocked")
_TAILS = (
    "; no clause covers chemical safety education.",
    ": the policies have no clause on household chemical safety.",
    ", although no policy clause forbids this safety information.",
    "; chemical hazard education is not covered by any clause.",
    "; nothing in the policy addresses it.",
)
STORM_DESCRIPTIONS = [f"{s} {v}{t}" for s, v, t in itertools.product(_SUBJECTS, _VERBS, _TAILS)][
    ::2
][:50]
OTHER_GAP = PARAPHRASES["fiction"][0]


def batch(
    batch_id: str,
    audited_at: datetime,
    flags: list[tuple[str, list[str]]],
    bundle: str = "default",
) -> BatchRecord:
    """A stored batch whose audit flagged ``flags`` (description, example log ids)."""
    log_ids = sorted({i for _, ids in flags for i in ids}) or [f"{batch_id}-x"]
    return BatchRecord(
        batch_id=batch_id,
        policy_bundle=bundle,
        bundle_version="v1",
        engine="openai",
        engine_model="gpt-test",
        engine_version="1",
        prompt_version="p1",
        audited_at=audited_at,
        log_ids=log_ids,
        summary=AuditSummary(
            total_refusals=len(log_ids),
            categorization={"policy_gray_zone": len(log_ids)},
            estimated_false_positives=0,
            policy_gap_flags=[PolicyGapFlag(description=d, example_log_ids=i) for d, i in flags],
            trends_identified=[],
        ),
        usage=EngineUsage(),
    )


def storm_batch(i: int, at: datetime, log_ids: list[str] | None = None) -> BatchRecord:
    """Batch ``i`` of the storm: the chemicals gap, reworded, two new log ids each."""
    ids = log_ids if log_ids is not None else [f"chem-{i:03d}-a", f"chem-{i:03d}-b"]
    return batch(f"storm-{i:03d}", at, [(STORM_DESCRIPTIONS[i % 50], ids)])


def store(warehouse: Warehouse, alerts: list[Alert]) -> None:
    """What the caller does with returned alerts: keep them in the alerts table."""
    warehouse.insert_alerts(
        [
            {
                "alert_id": a.alert_id,
                "kind": a.kind,
                "severity": a.severity,
                "created_at": a.created_at,
                "policy_bundle": a.scope.policy_bundle,
                "model": a.scope.model,
                "product": a.scope.product,
                "window_start": a.window.start,
                "window_end": a.window.end,
                "message": a.summary,
                "payload": a.model_dump_json(),
            }
            for a in alerts
        ]
    )


def track(warehouse: Warehouse, **kwargs: object) -> list[Alert]:
    """One tracking run whose alerts are stored, as the worker's detector pass does it
    (with the bound client)."""
    alerts = track_gaps(warehouse.client, now=NOW, **kwargs)  # type: ignore[arg-type]
    store(warehouse, alerts)
    return alerts


def reproduce(warehouse: Warehouse, alert: Alert) -> tuple[int, int]:
    """(log ids, batches) from the alert's evidence query."""
    row = warehouse.client.query(alert.evidence_query).result_rows[0]
    return int(row[0]), int(row[1])


def the_gap(warehouse: Warehouse) -> tuple[int, int]:
    (gap,) = list_open_gaps(warehouse)
    return gap.log_ids, gap.batches


# ---- grouping -------------------------------------------------------------------------------


def test_paraphrases_join_and_unrelated_gaps_stay_apart() -> None:
    matcher = GapMatcher(threshold=DEFAULT_SIMILARITY)
    # interleaved, as flags of different gaps arrive mixed
    order = [
        (name, text)
        for row in itertools.zip_longest(*PARAPHRASES.values())
        for name, text in zip(PARAPHRASES, row, strict=True)
        if text is not None
    ]
    found: dict[str, set[str]] = {}
    for name, text in order:
        found.setdefault(name, set()).add(matcher.assign("default", text).gap_id)
    assert all(len(ids) == 1 for ids in found.values()), found
    assert len({next(iter(ids)) for ids in found.values()}) == len(PARAPHRASES)
    # the opening flag names the gap
    assert found["lyrics"] == {gap_id("default", PARAPHRASES["lyrics"][0])}


def test_the_storm_rewordings_are_one_gap_and_case_or_spacing_never_matters() -> None:
    matcher = GapMatcher()
    ids = {matcher.assign("default", d).gap_id for d in STORM_DESCRIPTIONS}
    assert len(ids) == 1
    assert similarity(OTHER_GAP, STORM_DESCRIPTIONS[0]) < DEFAULT_SIMILARITY
    assert gap_id("b", "No  clause  covers X.") == gap_id("b", "no clause covers x.")
    assert gap_id("b", "no clause covers x.") != gap_id("c", "no clause covers x.")


def test_a_strict_threshold_keeps_rewordings_apart() -> None:
    matcher = GapMatcher(threshold=0.95)
    texts = PARAPHRASES["history"]
    assert len({matcher.assign("default", t).gap_id for t in texts}) == len(texts)
    with pytest.raises(ValueError):
        GapMatcher(threshold=1.5)


def test_different_bundles_never_merge(warehouse: Warehouse) -> None:
    text = PARAPHRASES["dosage"][0]
    warehouse.insert_batches(
        [
            batch("a1", T0, [(text, ["a-1", "a-2"])], bundle="alpha"),
            batch("b1", T0 + timedelta(minutes=5), [(text, ["b-1"])], bundle="beta"),
        ]
    )
    alerts = track(warehouse)
    assert sorted(a.scope.policy_bundle for a in alerts) == ["alpha", "beta"]
    assert len({a.gap_id for a in alerts}) == 2
    assert {a.scope.model for a in alerts} == {a.scope.product for a in alerts} == {"all"}
    (alpha,) = list_open_gaps(warehouse, bundle="alpha")
    assert (alpha.log_ids, alpha.batches, alpha.example_log_ids) == (2, 1, ["a-1", "a-2"])
    assert alpha.gap_id == gap_id("alpha", text)


# ---- the storm ------------------------------------------------------------------------------


def storm(warehouse: Warehouse) -> list[Alert]:
    """50 batches flag the chemicals gap over 16.3 hours; tracking runs after each one.
    One batch in the middle also flags an unrelated gap. Returns every alert returned."""
    alerts: list[Alert] = []
    for i in range(50):
        b = storm_batch(i, T0 + i * timedelta(minutes=20))
        if i == 25:
            flags = [
                *b.summary.policy_gap_flags,
                PolicyGapFlag(description=OTHER_GAP, example_log_ids=["fic-1"]),
            ]
            b = b.model_copy(
                update={"summary": b.summary.model_copy(update={"policy_gap_flags": flags})}
            )
        warehouse.insert_batches([b])
        alerts += track(warehouse)
        if i == 0:
            assert the_gap(warehouse) == (2, 1)
    return alerts


def test_storm_yields_one_alert_and_a_growing_count(warehouse: Warehouse) -> None:
    alerts = storm(warehouse)
    chem = [a for a in alerts if a.gap_description != OTHER_GAP]
    assert len(chem) == 1, [a.summary for a in chem]
    (first,) = chem
    assert first.kind == "policy_gap" and first.severity == "warning"
    assert first.gap_id == gap_id("default", STORM_DESCRIPTIONS[0])
    assert first.alert_id == gap_alert_id("default", first.gap_id, 0)
    assert first.gap_description == STORM_DESCRIPTIONS[0]
    assert first.example_log_ids == ["chem-000-a", "chem-000-b"]
    assert first.current_counts == {"log_ids": 2, "batches": 1}
    assert first.baseline_counts == {"log_ids": 0, "batches": 0}
    assert (first.statistic.name, first.statistic.value, first.statistic.threshold) == (
        "distinct_log_ids",
        2.0,
        1.0,
    )
    assert first.window.start == T0 and first.window.end == T0 + DAY
    assert first.summary.endswith(first.evidence_query)
    assert first.created_at == NOW
    Alert.model_validate_json(first.model_dump_json())  # the contract holds

    other = [a for a in alerts if a.gap_description == OTHER_GAP]
    assert len(other) == 1 and other[0].example_log_ids == ["fic-1"]

    gaps = {g.description: g for g in list_open_gaps(warehouse)}
    chem_gap = gaps[STORM_DESCRIPTIONS[0]]
    assert (chem_gap.log_ids, chem_gap.batches) == (100, 50)
    assert chem_gap.first_seen == T0 and chem_gap.last_seen == T0 + 49 * timedelta(minutes=20)
    assert chem_gap.example_log_ids[:3] == ["chem-000-a", "chem-000-b", "chem-001-a"]
    assert len(chem_gap.example_log_ids) == 20
    # the evidence query reproduces the counts the alert reported at its time
    assert reproduce(warehouse, first) == (2, 1)


def test_tracking_everything_at_once_gives_the_same_gap_and_alert(warehouse: Warehouse) -> None:
    warehouse.insert_batches([storm_batch(i, T0 + i * timedelta(minutes=20)) for i in range(50)])
    (alert,) = track(warehouse)
    assert alert.alert_id == gap_alert_id("default", gap_id("default", STORM_DESCRIPTIONS[0]), 0)
    assert alert.current_counts == {"log_ids": 100, "batches": 50}
    assert reproduce(warehouse, alert) == (100, 50)


def test_reprocessing_and_redelivery_change_nothing(warehouse: Warehouse) -> None:
    storm(warehouse)
    before = list_open_gaps(warehouse)
    assert track(warehouse) == []
    assert track(warehouse, since=T0 - DAY) == []  # a full re-read
    # every batch redelivered, and re-audited two days later (same batch ids, same flags)
    warehouse.insert_batches([storm_batch(i, T0 + i * timedelta(minutes=20)) for i in range(50)])
    warehouse.insert_batches([storm_batch(i, T0 + 2 * DAY) for i in range(50)])
    assert track(warehouse, since=T0 - DAY) == []
    assert list_open_gaps(warehouse) == before


def test_a_growing_gap_realerts_once_per_cooldown(warehouse: Warehouse) -> None:
    (first,) = [a for a in storm(warehouse) if a.gap_description != OTHER_GAP]
    later = [
        storm_batch(100 + i, T0 + DAY + timedelta(hours=1 + 3 * i)) for i in range(5)
    ]  # period 1: 25 h .. 37 h after the first sighting
    realerts: list[Alert] = []
    for b in later:
        warehouse.insert_batches([b])
        realerts += track(warehouse)
    assert len(realerts) == 1
    (again,) = realerts
    assert again.gap_id == first.gap_id and again.alert_id != first.alert_id
    assert again.alert_id == gap_alert_id("default", first.gap_id, 1)
    assert again.window.start == T0 + DAY and again.window.end == T0 + 2 * DAY
    assert again.baseline.start == T0 and again.baseline.end == T0 + DAY
    assert again.current_counts == {"log_ids": 102, "batches": 51}  # when it was raised
    assert again.baseline_counts == first.current_counts
    assert again.statistic.threshold == 2.0 and again.statistic.effect_size == 100.0
    assert again.example_log_ids[:2] == ["chem-100-a", "chem-100-b"]  # the new ones first
    assert reproduce(warehouse, again) == (102, 51)
    assert the_gap_counts(warehouse, first.gap_id) == (110, 55)

    # period 2 grows again: one more alert, counted from the previous one
    warehouse.insert_batches([storm_batch(200, T0 + 2 * DAY + timedelta(hours=2))])
    (third,) = track(warehouse, cooldown=86_400)  # the cooldown in seconds works too
    assert third.alert_id == gap_alert_id("default", first.gap_id, 2)
    assert third.baseline_counts == again.current_counts
    assert third.statistic.effect_size == 112 - 102


@pytest.fixture
def looked_up(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many ids each per-period lookup of gap alerts asked for (the tracker's fallback)."""
    calls: list[int] = []
    real = gaps_room.stored_gap_alerts

    def counting(db: Any, ids: Any) -> dict[str, str]:
        calls.append(len(ids))
        return real(db, ids)

    monkeypatch.setattr(gaps_room, "stored_gap_alerts", counting)
    return calls


def test_a_gap_years_long_finds_its_previous_alert_in_one_read(
    warehouse: Warehouse, looked_up: list[int]
) -> None:
    """With a 1 h cooldown, a gap seen again two years on is in period 17,520: its previous
    alert is found from the gap's stored alerts (their windows give their periods), not by
    looking up 17,521 alert ids (break10: thousands of ids per pass for a long span)."""
    hour = 3_600
    warehouse.insert_batches([storm_batch(0, T0)])
    (first,) = track(warehouse, cooldown=hour)
    later = T0 + timedelta(days=730, minutes=30)
    warehouse.insert_batches([storm_batch(1, later)])
    (again,) = track(warehouse, cooldown=hour)
    k = 730 * 24
    assert again.alert_id == gap_alert_id("default", first.gap_id, k)
    assert again.baseline_counts == first.current_counts  # the period-0 alert was found
    assert again.window.start == T0 + timedelta(hours=k)
    assert looked_up == []  # no id lookups: one read of the gap's alerts
    assert track(warehouse, cooldown=hour) == []  # and the new one is seen as stored


def test_a_hand_written_gap_alert_sends_the_gap_to_the_id_lookups(
    warehouse: Warehouse, looked_up: list[int]
) -> None:
    """An alert stored under a gap's period id whose window does not give that period back
    (written by hand, or by another version): the gap's alerts are then looked up by id for
    every period, as before, and that alert still counts as the previous one."""
    warehouse.insert_batches([storm_batch(0, T0)])
    (first,) = track_gaps(warehouse.client, now=NOW)  # type: ignore[arg-type]
    odd = first.model_copy(
        update={"window": first.window.model_copy(update={"start": T0 - DAY})}
    )  # its id says period 0, its window says otherwise
    store(warehouse, [odd])
    warehouse.insert_batches([storm_batch(1, T0 + DAY + timedelta(hours=1))])
    (again,) = track(warehouse)
    assert again.alert_id == gap_alert_id("default", first.gap_id, 1)
    assert again.baseline_counts == first.current_counts
    assert looked_up == [2]  # periods 0 and 1


def the_gap_counts(warehouse: Warehouse, gap: str) -> tuple[int, int]:
    (found,) = [g for g in list_open_gaps(warehouse) if g.gap_id == gap]
    return found.log_ids, found.batches


def test_no_new_evidence_after_the_cooldown_does_not_realert(warehouse: Warehouse) -> None:
    (first,) = [a for a in storm(warehouse) if a.gap_description != OTHER_GAP]
    # a new batch two days later reports log ids already known: more batches, no new log id
    warehouse.insert_batches([storm_batch(300, T0 + 2 * DAY, log_ids=["chem-000-a", "chem-007-b"])])
    assert track(warehouse) == []
    assert the_gap_counts(warehouse, first.gap_id) == (100, 51)


def test_an_alert_the_caller_did_not_store_is_returned_again(warehouse: Warehouse) -> None:
    warehouse.insert_batches([storm_batch(0, T0)])
    (lost,) = track_gaps(warehouse, now=NOW)  # returned, but the caller crashed before storing
    warehouse.insert_batches([storm_batch(1, T0 + timedelta(hours=3))])
    (again,) = track_gaps(warehouse, now=NOW + timedelta(minutes=1))
    assert again.alert_id == lost.alert_id
    store(warehouse, [again])
    assert track_gaps(warehouse, now=NOW) == []


def test_bad_parameters_are_refused(warehouse: Warehouse) -> None:
    with pytest.raises(ValueError):
        track_gaps(warehouse, now=NOW, cooldown=timedelta(0))
    with pytest.raises(ValueError):
        track_gaps(warehouse, now=NOW, similarity=-0.1)
    with pytest.raises(ValueError):
        list_open_gaps(warehouse, limit=0)


# ---- the CLI --------------------------------------------------------------------------------


def _cli_env(
    warehouse: Warehouse, chdb_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """The CLI's environment for ``warehouse``: no inherited REFUSAL_AUDIT_* settings."""
    import os

    for key in list(os.environ):
        if key.startswith("REFUSAL_AUDIT_"):
            monkeypatch.delenv(key)
    return {
        "REFUSAL_AUDIT_WAREHOUSE_DSN": chdb_dsn,
        "REFUSAL_AUDIT_WAREHOUSE_DATABASE": warehouse.database,
    }


def test_cli_lists_open_gaps(
    warehouse: Warehouse, chdb_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _cli_env(warehouse, chdb_dsn, monkeypatch)
    warehouse.insert_batches(
        [storm_batch(i, T0 + i * timedelta(minutes=20)) for i in range(3)]
        + [batch("o1", T0, [(OTHER_GAP, ["fic-1"])], bundle="other")]
    )
    track(warehouse)
    runner = CliRunner()

    result = runner.invoke(app, ["gaps", "--json"], env=env)
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.output.splitlines() if line.strip()]
    assert [(r["policy_bundle"], r["log_ids"], r["batches"]) for r in rows] == [
        ("default", 6, 3),
        ("other", 1, 1),
    ]
    assert rows[0]["gap_id"] == gap_id("default", STORM_DESCRIPTIONS[0])
    assert rows[0]["example_log_ids"][:2] == ["chem-000-a", "chem-000-b"]
    assert rows[0]["first_seen"].startswith("2026-03-02T08:00:00")

    table = runner.invoke(app, ["gaps", "--bundle", "other"], env=env)
    assert table.exit_code == 0, table.output
    assert gap_id("other", OTHER_GAP) in table.output and "fic-1" in table.output
    assert gap_id("default", STORM_DESCRIPTIONS[0]) not in table.output

    none = runner.invoke(app, ["gaps", "--since", "2026-03-03"], env=env)
    assert none.exit_code == 0 and "no open policy gaps" in none.output
    assert runner.invoke(app, ["gaps", "--limit", "0"], env=env).exit_code == 2


# ---- descriptions and counts ----------------------------------------------------------------

A_COUNT = re.compile(r"\d+ refusal")  # "3 refusal(s) categorised ...": one batch's count


def audit_demo(env: dict[str, str], tmp_path: Path) -> dict[str, Any]:
    """``refusal-audit audit examples/refusal_log.jsonl --out ...`` (the demo); its document."""
    out = tmp_path / "demo.json"
    result = CliRunner().invoke(
        app, ["audit", "examples/refusal_log.jsonl", "--out", str(out)], env=env
    )
    assert result.exit_code == 0, result.output
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def test_the_demo_lists_each_gap_once_with_the_count_it_holds(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    doc = audit_demo(cli_env, tmp_path)
    batch_flags = [f for b in doc["batches"] for f in b["summary"]["policy_gap_flags"]]
    per_text = Counter(f["description"] for f in batch_flags)
    # the demo's early-termination gap is flagged by six batches (1 or 2 refusals each): it
    # reads the same in all of them, and the run lists it once with all its refusals
    assert sorted(per_text.values()) == [1, 6]
    flags = doc["audit_summary"]["policy_gap_flags"]
    assert [f["description"] for f in flags] == list(per_text)
    for flag in flags:
        ids = [
            i
            for f in batch_flags
            if f["description"] == flag["description"]
            for i in f["example_log_ids"]
        ]
        assert flag["example_log_ids"] == list(dict.fromkeys(ids))
        assert not A_COUNT.search(flag["description"]), flag["description"]
    assert [len(f["example_log_ids"]) for f in flags] == [1, 7]

    # the printed table: one row per description, with the refusals its flag holds
    report = RunReport(
        batch_records=[BatchRecord.model_validate(b) for b in doc["batches"]],
        assessments=[StoredAssessment.model_validate(a) for a in doc["individual_assessments"]],
    )
    buffer = io.StringIO()
    print_report(report, Console(file=buffer, width=500))
    printed = buffer.getvalue()
    assert "Policy gap flags (2 distinct)" in printed
    for flag in flags:
        counts = re.findall(re.escape(flag["description"]) + r"\s*│\s*(\d+)\s*│", printed)
        assert counts == [str(len(flag["example_log_ids"]))]

    # the gaps: each refusal in one gap, and no description states a count
    listed = CliRunner().invoke(app, ["gaps", "--json"], env=cli_env)
    assert listed.exit_code == 0, listed.output
    gaps = [json.loads(line) for line in listed.output.splitlines() if line.strip()]
    assert sum(g["log_ids"] for g in gaps) == len({i for f in flags for i in f["example_log_ids"]})
    assert not any(A_COUNT.search(g["description"]) for g in gaps), gaps


def test_descriptions_stored_with_one_batch_count_are_shown_without_it(
    cli_env: dict[str, str], chdb_dsn: str, tmp_path: Path
) -> None:
    """Batches stored by an older ``local`` engine say "N refusal(s) categorised ...": the
    gaps, their alerts and the per-day flag query describe them without that count."""
    doc = audit_demo(cli_env, tmp_path)
    database = cli_env["REFUSAL_AUDIT_WAREHOUSE_DATABASE"]
    warehouse = Warehouse(connect(chdb_dsn, database), database, retries=3, retry_wait=0.0)
    at = max(datetime.fromisoformat(b["audited_at"]) for b in doc["batches"]) + timedelta(seconds=1)
    legacy = []
    for b in doc["batches"]:
        record = BatchRecord.model_validate(b)
        flags = [
            PolicyGapFlag(
                description=f"{len(f.example_log_ids)} refusal(s) categorised "
                + re.sub(r"^(\d+ refusal\(s\)|Refusals) categorised ", "", f.description),
                example_log_ids=f.example_log_ids,
            )
            for f in record.summary.policy_gap_flags
        ]
        summary = record.summary.model_copy(update={"policy_gap_flags": flags})
        legacy.append(
            record.model_copy(update={"summary": summary, "audited_at": at})
        )
    warehouse.insert_batches(legacy)
    stored = [
        str(d)
        for (d,) in warehouse.client.query(
            "SELECT arrayJoin(policy_gap_flags).1 FROM audit_batches FINAL"
        ).result_rows
    ]
    assert sorted(Counter(d[:2] for d in stored).items()) == [("1 ", 6), ("2 ", 1)]
    described = sorted({describe_gap(d) for d in stored})
    assert len(described) == 2 and not any(A_COUNT.search(d) for d in described)

    query = CliRunner().invoke(app, ["query", "policy_gaps", "-o", "json"], env=cli_env)
    assert query.exit_code == 0, query.output
    (day,) = [json.loads(line) for line in query.output.splitlines() if line.strip()]
    assert (day["flags"], day["descriptions"]) == (7, described)

    alerts = track_gaps(warehouse, now=NOW)
    assert alerts
    for alert in alerts:
        assert alert.gap_description in described
        assert not A_COUNT.search(alert.summary), alert.summary
    gaps = list_open_gaps(warehouse)
    assert {g.description for g in gaps} <= set(described)
    assert sum(g.log_ids for g in gaps) == 8


@pytest.mark.parametrize(
    "text",
    [
        "12 refusal(s) categorised 'over_refusal' of requests about: bugs. No policy clause.",
        "Refusals categorised 'over_refusal' of requests about: bugs. No policy clause.",
        "3 refusals about tenancy law are refused; no clause covers 2 of them.",
        "Users asking (1) refusal(s) categorised",
        "",
    ],
)
def test_the_sql_description_is_the_python_one(warehouse: Warehouse, text: str) -> None:
    (row,) = warehouse.client.query(
        f"SELECT {describe_gap_sql('{text:String}')}", parameters={"text": text}
    ).result_rows
    assert row[0] == describe_gap(text)
    assert describe_gap(text) == (
        "Refusals categorised " + text.split(" categorised ", 1)[1]
        if text.startswith("12 refusal(s)")
        else text
    )


# ---- one grouping, one name, one date everywhere ---------------------------------------------

_GAP_ROW = re.compile(
    r'<tr><td class="num">\d+</td><td>(.*?)(?: <span class="new">new</span>)?</td>'
    r'<td class="num">(\d+)</td>'
)


def _report_gaps(env: dict[str, str], out: Path) -> tuple[list[tuple[str, int]], str]:
    """``refusal-audit report``: its gap table (description, refusals) and its alert section."""
    import html as html_lib

    result = CliRunner().invoke(app, ["report", "--out", str(out)], env=env)
    assert result.exit_code == 0, result.output
    page = out.read_text(encoding="utf-8")
    gaps_section = page.split('<section id="gaps">', 1)[1].split("</section>", 1)[0]
    alerts_section = page.split('<section id="alerts">', 1)[1].split("</section>", 1)[0]
    rows = [(html_lib.unescape(d), int(n)) for d, n in _GAP_ROW.findall(gaps_section)]
    return rows, alerts_section


def test_the_demo_s_gaps_are_the_same_in_gaps_the_report_and_the_alerts(
    cli_env: dict[str, str], chdb_dsn: str, tmp_path: Path
) -> None:
    """The demo flags two unrelated gaps (7 refusals about ending an internet contract
    early, 1 about a painless death): `gaps`, the report's gap section and the gap alerts
    show the same two, each named after its own topic, dated by event time, so the report
    of the events' period shows the alerts `alerts` lists."""
    audit_demo(cli_env, tmp_path)
    listed = CliRunner().invoke(app, ["gaps", "--json"], env=cli_env)
    assert listed.exit_code == 0, listed.output
    gaps = [json.loads(line) for line in listed.output.splitlines() if line.strip()]
    assert [g["log_ids"] for g in gaps] == [7, 1]
    assert "about: contract, early, internet, provider, terminate." in gaps[0]["description"]
    assert "about: better, dead, list, painless." in gaps[1]["description"]
    # dated by the refusals' event times (the example log's June 2025), not the audit's
    assert all(g["first_seen"].startswith("2025-06") for g in gaps), gaps

    rows, _ = _report_gaps(cli_env, tmp_path / "report.html")
    assert rows == [(g["description"], g["log_ids"]) for g in gaps]

    database = cli_env["REFUSAL_AUDIT_WAREHOUSE_DATABASE"]
    warehouse = Warehouse(connect(chdb_dsn, database), database, retries=3, retry_wait=0.0)
    alerts = track_gaps(warehouse, now=NOW)
    store(warehouse, alerts)
    assert sorted((a.gap_description, a.current_counts["log_ids"]) for a in alerts) == sorted(
        (g["description"], g["log_ids"]) for g in gaps
    )
    for alert in alerts:
        (gap,) = [g for g in gaps if g["gap_id"] == alert.gap_id]
        first, last = (datetime.fromisoformat(gap[k]) for k in ("first_seen", "last_seen"))
        # the cooldown period of the gap's latest event, counted from its first event
        assert (alert.window.start - first) % DAY == timedelta(0)
        assert alert.window.start <= last < alert.window.end
    _, alert_section = _report_gaps(cli_env, tmp_path / "report.html")
    assert "No drift or policy-gap alert" not in alert_section
    assert alert_section.count("<td>policy_gap</td>") == len(alerts) == 2


def test_a_gap_is_named_after_its_most_common_member(warehouse: Warehouse) -> None:
    """Rewordings of one gap: the one flagged on most refusals names it, not the first."""
    few, many = PARAPHRASES["dosage"][0], PARAPHRASES["dosage"][1]
    warehouse.insert_batches(
        [
            batch("d1", T0, [(few, ["d-1"])]),
            batch("d2", T0 + timedelta(hours=1), [(many, ["d-2", "d-3", "d-4"])]),
        ]
    )
    (alert,) = track(warehouse)
    (gap,) = list_open_gaps(warehouse)
    assert gap.gap_id == gap_id("default", few)  # the id stays the opener's: stable
    assert (gap.description, gap.log_ids) == (many, 4)
    assert alert.gap_description == many


def test_the_gap_table_says_how_gaps_are_named_and_dated(
    warehouse: Warehouse, chdb_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _cli_env(warehouse, chdb_dsn, monkeypatch) | {"COLUMNS": "300"}
    warehouse.insert_batches([storm_batch(0, T0)])
    table = CliRunner().invoke(app, ["gaps"], env=env)
    assert table.exit_code == 0, table.output
    assert "first_event" in table.output and "last_event" in table.output
    assert "most common flag description" in table.output
    assert "event times (UTC) of its flagged refusals" in table.output
