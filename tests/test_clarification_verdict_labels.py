"""Reviewers' clarification verdicts reach the circumvention model (issue 25, item 6):
`review clarification-labels` exports them as labelled question sets and `train
--with-verdicts` trains the circumvention model on them (dev-only CV figures, a file of the
wrong kind or a bad line refused)."""

from __future__ import annotations

import hashlib
import json
import stat
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from processors.clarification.conversation import EngineIdentity, apply_answer, open_asking
from processors.clarification.routing import RoutingDecision
from processors.clarification.trail import step_row
from refusal_audit.cli import app
from refusal_audit.config import Settings
from refusal_audit.training.circumvention import build
from refusal_audit.training.circumvention_corpus import DEV_PATH
from schemas import clarification as contract
from schemas.clarification import ConversationState, EscalationReason, Outcome, Route
from warehouse import Warehouse
from warehouse.clarification import insert_steps, insert_verdict

# the names this change adds are imported in the tests, so each test fails on its own
# (not at collection) on code without them
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
HELDOUT_PATH = DEV_PATH.with_name("heldout.jsonl")
NO_QUESTIONS = "no question asked"
VERDICT_DOMAIN = "reviewer-verdicts"
REQUEST = "How do I get into my neighbour's wifi network without them knowing?"
REFUSAL = "I can't help with getting into someone else's network without permission."
Q_PURPOSE = "What are you hoping to do online: browse, work, or something else?"
Q_CHANNEL = "Have you asked your neighbour whether they would share the connection?"
Q_ROUTE = "Which of these would be least likely to be noticed: a guessed password or a cloned card?"
Q_LATER = "Would a public hotspot or a mobile data plan cover what you need for now?"


def _question(text: str) -> dict[str, str]:
    return {"question_text": text, "target_ambiguity": "purpose of the request",
            "safety_guardrail": "asks for the goal only, no method"}  # fmt: skip


def _state(cid: str, revision: int, rounds: list[list[str]], outcome: str) -> ConversationState:
    at = T0 + timedelta(minutes=revision)
    return ConversationState.model_validate({
        "conversation_id": cid, "log_id": f"log-{cid}", "policy_bundle": "wren",
        "request_hash": hashlib.sha256(REQUEST.encode()).hexdigest(),
        "request": REQUEST, "refusal": REFUSAL, "category": "policy_gray_zone",
        "route": Route.policy_gray_zone if rounds else None,
        "rounds": [{"number": i + 1, "questions": [_question(t) for t in texts], "asked_at": at}
                   for i, texts in enumerate(rounds)],
        "round": len(rounds), "outcome": Outcome(outcome),
        "escalation_reason": EscalationReason.circumvention if outcome == "escalated" else None,
        "created_at": T0, "updated_at": at, "revision": revision,
    })  # fmt: skip


def _verdict(store: Warehouse, cid: str, revision: int, reviewer: str, ok: bool,
             minutes: int, note: str = "") -> None:  # fmt: skip
    insert_verdict(store, {
        "conversation_id": cid, "revision": revision, "reviewer": reviewer,
        "decision": "refuse", "questions_ok": ok, "note": note, "outcome": "asking",
        "escalation_reason": "", "submitted_at": T0 + timedelta(hours=1, minutes=minutes),
    })  # fmt: skip


def _asked(cid: str, texts: list[str], answered: list[int]) -> list[ConversationState]:
    """The two states the state machine gives a conversation whose round 1 asks ``texts``
    and whose user answers the questions at ``answered`` (revision 0: round 1 asked;
    revision 1: the questions left open asked again in round 2)."""
    request = contract.ClarificationRequest.model_validate({
        "conversation_id": cid, "log_id": f"log-{cid}", "request": REQUEST, "refusal": REFUSAL,
        "policy_bundle": "wren", "event_time": T0,
    })  # fmt: skip
    decision = RoutingDecision(
        "policy_gray_zone", "policy_gray_zone", Route.policy_gray_zone, None, "gray zone"
    )
    questions = contract.QuestionSet.model_validate({"questions": [_question(t) for t in texts]})
    first = open_asking(request, decision, questions, EngineIdentity(), T0)
    answer = contract.ClarificationAnswer.model_validate({
        "conversation_id": cid, "round": 1,
        "answers": [{"question_index": i, "text": "for work"} for i in answered],
        "answered_at": T0 + timedelta(minutes=1),
    })  # fmt: skip
    second = apply_answer(first, answer, T0 + timedelta(minutes=1)).state
    assert (first.revision, second.revision, second.round) == (0, 1, 2)
    return [first, second]


NOTE_PII = "mail me at ann.lee@example.com, card 4111 1111 1111 1111"


def _fill(store: Warehouse) -> None:
    """Five conversations: two rounds judged at their end, two reviewers disagreeing
    (``c-split``: round 2 re-asks the question round 1 left open); a reviewer who changed
    their mind, with personal data in her note (``c-changed``); a verdict on an early step
    of a conversation that asked again later (``c-early``); verdicts on both revisions of a
    two-round conversation, one given on the earlier revision after the later one was
    judged (``c-mixed``); an escalation whose set was never asked (``c-unasked``); one
    nobody reviewed (``c-open``)."""
    states = [
        *_asked("c-split", [Q_PURPOSE, Q_CHANNEL, Q_ROUTE], answered=[0, 1]),
        _state("c-changed", 0, [[Q_PURPOSE]], "asking"),
        *_asked("c-early", [Q_CHANNEL, Q_LATER], answered=[0]),
        *_asked("c-mixed", [Q_PURPOSE, Q_ROUTE], answered=[0]),
        _state("c-unasked", 0, [], "escalated"),
        _state("c-open", 0, [[Q_ROUTE]], "asking"),
    ]
    insert_steps(store, [step_row(s, T0) for s in states])
    _verdict(store, "c-split", 1, "ann", True, 0, "fine by me")
    _verdict(store, "c-split", 1, "bob", False, 1, "the third question offers\na route")
    _verdict(store, "c-changed", 0, "ann", False, 0, "first look")
    _verdict(store, "c-changed", 0, "ann", True, 5, f"on reflection neutral; {NOTE_PII}")
    _verdict(store, "c-early", 0, "cid", True, 0)
    _verdict(store, "c-mixed", 0, "eve", True, 0, "round one is fine")
    _verdict(store, "c-mixed", 1, "ann", False, 1, "round two pushes the route")
    _verdict(store, "c-mixed", 1, "dan", True, 2)
    _verdict(store, "c-mixed", 0, "ann", True, 3, "round one alone was fine")
    _verdict(store, "c-unasked", 0, "ann", False, 0)


def test_the_label_rule_rejects_when_at_least_half_say_not_neutral() -> None:
    from processors.clarification.verdict_sets import verdict_label

    assert verdict_label([False]) == "reject"
    assert verdict_label([True, False]) == "reject"  # a tie rejects
    assert verdict_label([True, True, False]) == "acceptable"
    assert verdict_label([True]) == "acceptable"
    assert verdict_label([False, False, True]) == "reject"
    with pytest.raises(ValueError):
        verdict_label([])


def test_reviewed_conversations_export_as_question_sets(warehouse: Warehouse) -> None:
    from processors.clarification import verdict_sets
    from processors.redaction import Redactor
    from refusal_audit.clarification import verdict_labels as export

    assert (export.NO_QUESTIONS, verdict_sets.VERDICT_DOMAIN) == (NO_QUESTIONS, VERDICT_DOMAIN)
    verdict_set_id, clarification_labels = verdict_sets.verdict_set_id, export.clarification_labels
    _fill(warehouse)
    labels = clarification_labels(warehouse, Redactor())
    sets = {r["conversation_id"]: r for r in map(json.loads, labels.lines)}
    assert sorted(sets) == ["c-changed", "c-early", "c-mixed", "c-split"]  # c-open: no verdict
    assert labels.skipped == {NO_QUESTIONS: 1}  # c-unasked: reviewed, nothing was asked
    assert dict(labels.labels) == {"reject": 2, "acceptable": 2}
    split = sets["c-split"]
    assert split["label"] == "reject"  # ann yes, bob no: a tie rejects
    # round 2 re-asked Q_ROUTE (left open in round 1): each question once, first-asked order
    assert [q["question_text"] for q in split["questions"]] == [Q_PURPOSE, Q_CHANNEL, Q_ROUTE]
    assert split["rationale"] == (
        "1 of 2 reviewer(s) held the questions not neutral: fine by me / "
        "the third question offers a route"
    )
    assert (split["domain"], split["author"], split["reasons"]) == (VERDICT_DOMAIN, "reviewers", [])
    assert split["set_id"] == verdict_set_id("c-split") != verdict_set_id("c-early")
    assert (split["request"], split["refusal"]) == (REQUEST, REFUSAL)
    changed = sets["c-changed"]  # ann's newer "neutral" replaces her older "not neutral"
    assert (changed["label"], changed["reviewers"], changed["not_neutral"]) == ("acceptable", 1, 0)
    assert "on reflection neutral" in changed["rationale"]
    assert "first look" not in changed["rationale"]
    # the note is redacted as events are: no e-mail or card number in the export
    assert "ann.lee@example.com" not in changed["rationale"]
    assert "4111" not in changed["rationale"]
    assert "mail me at <EMAIL>, card <CARD>" in changed["rationale"]
    early = sets["c-early"]  # judged at revision 0 only
    assert early["revision"] == 0
    assert [q["question_text"] for q in early["questions"]] == [Q_CHANNEL, Q_LATER]


def test_only_verdicts_on_the_exported_revision_count(warehouse: Warehouse) -> None:
    """The newest revision with verdicts is exported and only each reviewer's newest verdict
    ON it counts: ann's later verdict on revision 0 (which never showed round 2) and eve's
    on revision 0 do not join the vote on revision 1 (ann no, dan yes: a tie rejects)."""
    from refusal_audit.clarification.verdict_labels import clarification_labels

    _fill(warehouse)
    sets = {r["conversation_id"]: r for r in map(json.loads, clarification_labels(
        warehouse, None).lines)}  # fmt: skip
    mixed = sets["c-mixed"]
    assert mixed["revision"] == 1
    assert (mixed["label"], mixed["reviewers"], mixed["not_neutral"]) == ("reject", 2, 1)
    assert mixed["rationale"] == (
        "1 of 2 reviewer(s) held the questions not neutral: round two pushes the route"
    )
    assert [q["question_text"] for q in mixed["questions"]] == [Q_PURPOSE, Q_ROUTE]


def _cli(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(app, args, env=env)
    return res.exit_code, " ".join(res.output.split())


def _export(cli_env: dict[str, str], out: Path) -> tuple[int, str]:
    store = Warehouse.open(
        Settings(warehouse_dsn=cli_env["REFUSAL_AUDIT_WAREHOUSE_DSN"],
                 warehouse_database=cli_env["REFUSAL_AUDIT_WAREHOUSE_DATABASE"])
    )  # fmt: skip
    _fill(store)
    return _cli(["review", "clarification-labels", "--out", str(out)], cli_env)


def test_the_export_command_writes_a_private_file_that_trains_the_check(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "labels" / "clarifications.jsonl"
    out.parent.mkdir()
    out.write_text("an older export\n", encoding="utf-8")
    out.chmod(0o644)  # an existing file readable by others is made private too
    code, text = _export(cli_env, out)
    assert code == 0, text
    assert f"4 reviewed question set(s) written to {out} (2 acceptable, 2 reject)" in text
    assert f"1 reviewed conversation(s) not written: {NO_QUESTIONS}" in text
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    written = out.read_text(encoding="utf-8")
    assert len(written.splitlines()) == 4
    # the command redacts the reviewers' notes with the audit's redactor (settings)
    assert "ann.lee@example.com" not in written and "4111 1111" not in written
    assert "<EMAIL>" in written and "<CARD>" in written

    plain, with_verdicts = tmp_path / "plain", tmp_path / "verdicts"
    code, text = _cli(["train", "--model", "circumvention", "-o", str(plain),
                       "--date", "2026-12-05"])  # fmt: skip
    assert code == 0, text
    code, text = _cli(["train", "--model", "circumvention", "-o", str(with_verdicts),
                       "--date", "2026-12-05", "--with-verdicts", str(out),
                       "--verdict-weight", "3"])  # fmt: skip
    assert code == 0, text
    assert "4 reviewer verdict sets from clarifications.jsonl (2 acceptable, 2 reject)" in text
    before = json.loads((plain / "circumvention_check.json").read_text(encoding="utf-8"))
    after = json.loads((with_verdicts / "circumvention_check.json").read_text(encoding="utf-8"))
    assert after["content_hash"] != before["content_hash"]
    assert "verdicts" not in before
    assert after["verdicts"]["sets"] == 4 and after["verdicts"]["weight"] == 3.0
    assert after["verdicts"]["labels"] == {"acceptable": 2, "reject": 2}
    assert "+ 4 reviewer verdict sets (clarifications.jsonl, weight 3)" in after["trained_on"]
    card = (with_verdicts / "circumvention_check.md").read_text(encoding="utf-8")
    assert "Reviewer verdicts: 4 sets" in card and "figures above are on dev sets only" in card


def test_the_review_export_makes_an_existing_file_private(tmp_path: Path) -> None:
    """`review export` writes through the same private opener: an existing 0644 file is
    made 0600 (JSON Lines and CSV)."""
    from refusal_audit.review.verdict_files import write_items

    for name in ("items.jsonl", "items.csv"):
        path = tmp_path / name
        path.write_text("old\n", encoding="utf-8")
        path.chmod(0o644)
        write_items([], path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name


def _dev_rejects() -> int:
    return sum(
        json.loads(line)["label"] == "reject"
        for line in DEV_PATH.read_text(encoding="utf-8").splitlines()
        if line.strip()
    )


def _set_line(set_id: str, questions: list[str], label: str, request: str = REQUEST) -> str:
    return json.dumps({
        "set_id": set_id, "domain": "privacy", "request": request, "refusal": REFUSAL,
        "questions": [_question(q) for q in questions], "label": label, "reasons": [],
        "rationale": "", "author": "reviewers",
    })  # fmt: skip


VERDICT_LINES = [
    _set_line("rv-1", [Q_ROUTE, Q_PURPOSE], "reject"),
    _set_line("rv-2", [Q_PURPOSE], "acceptable"),
    _set_line("rv-3", [Q_CHANNEL, Q_LATER], "acceptable"),
    _set_line("rv-4", [Q_ROUTE], "reject", "Where can I buy a lock pick set to open my own door?"),
    _set_line("rv-5", [Q_LATER, Q_CHANNEL, Q_PURPOSE], "acceptable",
              "Which household chemicals should never be mixed when cleaning?"),
    _set_line("rv-6", [Q_ROUTE, Q_CHANNEL], "reject", "How do I read my partner's messages?"),
]  # fmt: skip


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The model built on dev alone."""
    return build(stem=tmp_path_factory.mktemp("plain") / "m", built_on=date(2026, 12, 5))


def _verdicts_file(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _arrays(built: Any) -> dict[str, np.ndarray]:
    with np.load(built.npz) as npz:
        return {k: npz[k] for k in npz.files}


def test_verdict_sets_train_but_the_cv_figures_stay_dev_only(tmp_path: Path, plain: Any) -> None:
    """Verdicts join only the final refit: the CV figures, C, the threshold and the
    standardisation (mean, scale) are exactly the dev-only build's, whatever their weight."""
    path = _verdicts_file(tmp_path / "v.jsonl", VERDICT_LINES)
    light = build(stem=tmp_path / "light", verdicts=path, verdict_weight=1.0)
    heavy = build(stem=tmp_path / "heavy", verdicts=path, verdict_weight=25.0)
    assert light.model.content_hash != heavy.model.content_hash  # the weight counts
    assert heavy.model.content_hash != plain.model.content_hash
    for built in (light, heavy):
        assert built.cv == plain.cv  # figures, per-domain rates, threshold, C, precision by C
        assert built.model.threshold == plain.model.threshold
        arrays, dev_only = _arrays(built), _arrays(plain)
        assert np.array_equal(arrays["mean"], dev_only["mean"])
        assert np.array_equal(arrays["scale"], dev_only["scale"])
        assert VERDICT_DOMAIN not in built.cv["domains"]  # never scored as a dev domain
    meta = json.loads(heavy.metadata.read_text(encoding="utf-8"))
    fold = meta["verdicts"]["own_fold"]  # their own fold: the dev-only model on them
    assert fold["rejected_bad"] + fold["passed_bad"] == 3
    assert fold["rejected_good"] <= 3


def test_weight_zero_gives_the_model_without_verdicts(tmp_path: Path, plain: Any) -> None:
    path = _verdicts_file(tmp_path / "v.jsonl", VERDICT_LINES)
    zero = build(stem=tmp_path / "zero", verdicts=path, verdict_weight=0.0,
                 built_on=date(2026, 12, 5))  # fmt: skip
    assert zero.model.content_hash == plain.model.content_hash
    for name, values in _arrays(plain).items():
        assert np.array_equal(_arrays(zero)[name], values), name


def test_the_line_order_of_a_verdict_file_does_not_change_the_model(tmp_path: Path) -> None:
    forward = _verdicts_file(tmp_path / "forward.jsonl", VERDICT_LINES)
    backward = _verdicts_file(tmp_path / "backward.jsonl", VERDICT_LINES[::-1])
    a = build(stem=tmp_path / "a", verdicts=forward, verdict_weight=7.0)
    b = build(stem=tmp_path / "b", verdicts=backward, verdict_weight=7.0)
    assert a.model.content_hash == b.model.content_hash


def test_the_classes_stay_balanced_under_sample_weights() -> None:
    from refusal_audit.training.circumvention import balanced_weights

    y = np.array([True, True, False, False, False, True, False])
    plain = balanced_weights(y)
    assert plain[y].sum() == pytest.approx(plain[~y].sum()) == pytest.approx(len(y) / 2)
    assert np.array_equal(plain, balanced_weights(y, np.ones(len(y))))
    s = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 4.0, 4.0])
    w = balanced_weights(y, s)
    assert w[y].sum() == pytest.approx(w[~y].sum()) == pytest.approx(s.sum() / 2)
    assert w[5] / w[0] == pytest.approx(4.0) and w[6] / w[2] == pytest.approx(4.0)


def test_bad_verdict_files_are_refused_naming_the_line(tmp_path: Path) -> None:
    attributes = {"label": "safe", "expected_category": "x"}
    review_line = json.dumps({"request": "a", "response": "b", "attributes": attributes})
    cases = {
        "mixed.jsonl": (_set_line("rv-1", [Q_PURPOSE], "reject") + "\n" + review_line,
                        "mixed.jsonl:2: a `review labels` line in a file of "
                        "`review clarification-labels` lines"),
        "unknown.jsonl": ('{"set": 1}', "unknown.jsonl:1: neither a"),
        "label.jsonl": ("\n" + _set_line("rv-1", [Q_PURPOSE], "maybe"),
                        "label.jsonl:2: label 'maybe'"),
        "noquestion.jsonl": (_set_line("rv-1", [], "reject"), "noquestion.jsonl:1:"),
        "broken.jsonl": ('{"questions": [', "broken.jsonl:1: not JSON"),
        "deep.jsonl": (_set_line("rv-1", [Q_PURPOSE], "reject") + "\n" + "[" * 200_000
                       + "]" * 200_000, "deep.jsonl:2: not JSON"),
        "toomany.jsonl": (_set_line("rv-1", [f"{Q_PURPOSE} ({i})" for i in range(9)],
                                    "reject"), "toomany.jsonl:1: 9 questions; a conversation "
                          "asks at most 8"),
        "empty.jsonl": (_set_line("rv-1", [Q_PURPOSE, ""], "reject"),
                        "empty.jsonl:1: question 2 is empty"),
        "blank.jsonl": (_set_line("rv-1", ["  ", Q_PURPOSE], "reject"),
                        "blank.jsonl:1: question 1 is empty"),
    }  # fmt: skip
    for name, (content, message) in cases.items():
        path = tmp_path / name
        path.write_text(content + "\n", encoding="utf-8")
        code, text = _cli(["train", "--model", "circumvention", "-o", str(tmp_path / "out"),
                           "--with-verdicts", str(path)])  # fmt: skip
        assert code == 2 and message in text, (name, text[:300])
    latin = tmp_path / "latin.jsonl"  # a byte that is not UTF-8 on line 2
    latin.write_bytes(
        _set_line("rv-1", [Q_PURPOSE], "reject").encode()
        + b"\n"
        + _set_line("rv-2", [Q_PURPOSE + " cafe"], "reject").encode().replace(b"cafe", b"caf\xe9")
    )
    code, text = _cli(["train", "--model", "circumvention", "-o", str(tmp_path / "out"),
                       "--with-verdicts", str(latin)])  # fmt: skip
    assert code == 2 and "latin.jsonl:2: not UTF-8 text" in text, text
    assert not (tmp_path / "out").exists()  # refused before anything was built


def test_a_deeply_nested_line_is_refused_by_the_loader_too(tmp_path: Path) -> None:
    from refusal_audit.training.verdict_files import load_verdict_sets

    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 200_000 + "]" * 200_000 + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"deep\.jsonl:1: not JSON"):
        load_verdict_sets(path)


def test_the_heldout_file_is_never_trained_on_as_verdicts(tmp_path: Path) -> None:
    code, text = _cli(["train", "--model", "circumvention", "-o", str(tmp_path / "out"),
                       "--with-verdicts", str(HELDOUT_PATH)])  # fmt: skip
    assert code == 2 and "heldout.jsonl, which is never trained on" in text, text
    first = json.loads(HELDOUT_PATH.read_text(encoding="utf-8").splitlines()[0])
    copy = tmp_path / "renamed.jsonl"  # a held-out set under another id and file name
    copy.write_text(json.dumps({**first, "set_id": "rv-x", "domain": "x"}) + "\n", "utf-8")
    code, text = _cli(["train", "--model", "circumvention", "-o", str(tmp_path / "out"),
                       "--with-verdicts", str(copy)])  # fmt: skip
    assert code == 2 and f"set {first['set_id']} of the held-out file" in text, text
    assert not (tmp_path / "out").exists()


def _heldout_variants() -> dict[str, dict[str, Any]]:
    """A held-out set as it could come back in a verdict file, each under another id."""
    first = json.loads(HELDOUT_PATH.read_text(encoding="utf-8").splitlines()[0])
    qs = first["questions"]
    assert len(qs) >= 2

    def texts(f: Any) -> list[dict[str, Any]]:
        return [{**q, "question_text": f(q["question_text"])} for q in qs]

    return {
        "reordered": {**first, "questions": qs[::-1]},
        "trailing spaces": {**first, "questions": texts(lambda t: t + "  ")},
        "case": {**first, "questions": texts(str.upper), "request": first["request"].lower()},
        "doubled space": {**first, "questions": texts(lambda t: t.replace(" ", "  ", 1))},
        "question mark": {**first, "questions": texts(lambda t: t + "?")},
        "one-question subset": {**first, "questions": qs[1:2]},
    }


def test_the_heldout_guard_compares_normalised_content(tmp_path: Path) -> None:
    from refusal_audit.training.verdict_files import load_verdict_sets

    first = json.loads(HELDOUT_PATH.read_text(encoding="utf-8").splitlines()[0])
    for name, record in _heldout_variants().items():
        path = tmp_path / "v.jsonl"
        line = {**record, "set_id": f"rv-{name.replace(' ', '-')}", "domain": "x"}
        path.write_text(json.dumps(line) + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=f"set {first['set_id']} of the held-out file"):
            load_verdict_sets(path)
    code, text = _cli(["train", "--model", "circumvention", "-o", str(tmp_path / "out"),
                       "--with-verdicts", str(path)])  # fmt: skip
    assert code == 2 and f"set {first['set_id']} of the held-out file" in text, text


def test_a_dev_file_holding_heldout_sets_is_refused(tmp_path: Path) -> None:
    """`--circumvention-dev` is checked by content, not by file name: a copy of the held-out
    file, dev and held-out joined, or dev with one held-out set reformatted is refused."""
    dev = DEV_PATH.read_text(encoding="utf-8")
    heldout = HELDOUT_PATH.read_text(encoding="utf-8")
    variant = json.dumps({**_heldout_variants()["reordered"], "set_id": "dev-x"})
    files = {"copy.jsonl": heldout, "joined.jsonl": dev + heldout,
             "one.jsonl": dev + variant + "\n"}  # fmt: skip
    for name, content in files.items():
        path = tmp_path / name
        path.write_text(content, encoding="utf-8")
        code, text = _cli(["train", "--model", "circumvention", "-o", str(tmp_path / "out"),
                           "--circumvention-dev", str(path)])  # fmt: skip
        assert code == 2, (name, text)
        assert f"--circumvention-dev: {path}:" in text and "of the held-out file" in text, text
    assert not (tmp_path / "out").exists()


def test_the_verdict_weight_must_be_finite_and_bounded(tmp_path: Path) -> None:
    sets = _verdicts_file(tmp_path / "v.jsonl", VERDICT_LINES[:2])
    out = tmp_path / "out"
    for weight in ("inf", "1e308", "nan", "-1", "1000.5", "-inf"):
        code, text = _cli(["train", "--model", "circumvention", "-o", str(out),
                           "--with-verdicts", str(sets), "--verdict-weight", weight])  # fmt: skip
        assert code == 2, (weight, text)
        assert "--verdict-weight: the verdict weight must be a finite number from 0 to 1000" in (
            text
        ), (weight, text)
    assert not out.exists()
    code, text = _cli(["train", "--model", "circumvention", "-o", str(out),
                       "--with-verdicts", str(sets), "--verdict-weight", "-0"])  # fmt: skip
    assert code == 0, text
    assert "weight 0;" in text and "weight -0" not in text, text
    meta = json.loads((out / "circumvention_check.json").read_text(encoding="utf-8"))
    assert "weight 0)" in meta["trained_on"] and "weight -0" not in meta["trained_on"]


def test_the_dev_corpus_is_not_taken_for_reviewers_verdicts(tmp_path: Path) -> None:
    """The dev corpus the model trains on, given as verdicts (or one of its sets under another
    id), is refused: it would count twice and its "verdict" figures would be in-sample."""
    code, text = _cli(["train", "--model", "circumvention", "-o", str(tmp_path / "out"),
                       "--with-verdicts", str(DEV_PATH)])  # fmt: skip
    assert code == 2 and "of the dev corpus" in text and "trained on already" in text, text
    first = json.loads(DEV_PATH.read_text(encoding="utf-8").splitlines()[0])
    copy = tmp_path / "renamed.jsonl"
    copy.write_text(json.dumps({**first, "set_id": "rv-y"}) + "\n", "utf-8")
    code, text = _cli(["train", "--model", "circumvention", "-o", str(tmp_path / "out"),
                       "--with-verdicts", str(copy)])  # fmt: skip
    assert code == 2 and f"set {first['set_id']} of the dev corpus" in text, text
    reformatted = {**first, "set_id": "rv-z", "request": "  " + first["request"].upper(),
                   "questions": [{**q, "question_text": q["question_text"] + " ?"}
                                 for q in first["questions"][::-1]]}  # fmt: skip
    copy.write_text(json.dumps(reformatted) + "\n", "utf-8")
    code, text = _cli(["train", "--model", "circumvention", "-o", str(tmp_path / "out"),
                       "--with-verdicts", str(copy)])  # fmt: skip
    assert code == 2 and f"set {first['set_id']} of the dev corpus" in text, text
    assert not (tmp_path / "out").exists()


def _review_labels_file(path: Path) -> Path:
    attributes = {"label": "safe", "expected_category": "violence"}
    doc: dict[str, Any] = {
        "log_id": "l1",
        "request": "Write a poem about knives",
        "response": "I can't help with that.",
        "attributes": attributes,
    }
    path.write_text(json.dumps(doc) + "\n", encoding="utf-8")
    return path


def test_a_verdict_file_for_another_model_is_refused(tmp_path: Path, shared_data: Path) -> None:
    events = _review_labels_file(tmp_path / "events.jsonl")
    sets = tmp_path / "sets.jsonl"
    sets.write_text(_set_line("rv-1", [Q_PURPOSE], "acceptable") + "\n", encoding="utf-8")
    out = str(tmp_path / "out")
    data = ["--shared-data", str(shared_data)]
    for args, message in (
        (["--model", "circumvention", "--with-verdicts", str(events)],
         "is a `refusal-audit review labels` file: it trains the category model, not the "
         "circumvention model"),
        (["--model", "category", *data, "--with-verdicts", str(sets)],
         "is a `refusal-audit review clarification-labels` file: it trains the circumvention "
         "model, not the category model"),
        (["--model", "cascade", *data, "--with-verdicts", str(events)],
         "the refusal cascade head cannot learn from review verdicts"),
        (["--model", "prefilter", *data, "--with-verdicts", str(sets)],
         "the pre-filter does not learn from review verdicts"),
        (["--model", "all", *data, "--with-verdicts", str(sets), "--with-verdicts", str(sets)],
         "are both `review clarification-labels` files"),
    ):  # fmt: skip
        code, text = _cli(["train", "-o", out, *args])
        assert code == 2 and message in text, (args, text)
    assert not (tmp_path / "out").exists()


def test_train_all_sends_each_verdict_file_to_its_model(tmp_path: Path, shared_data: Path) -> None:
    events = _review_labels_file(tmp_path / "events.jsonl")
    sets = tmp_path / "sets.jsonl"
    sets.write_text("\n".join([_set_line("rv-1", [Q_ROUTE], "reject"),
                               _set_line("rv-2", [Q_PURPOSE], "acceptable")]) + "\n",
                    encoding="utf-8")  # fmt: skip
    out = tmp_path / "out"
    code, text = _cli(["train", "--model", "all", "--shared-data", str(shared_data),
                       "--no-folds", "--every", "40", "-o", str(out),
                       "--with-verdicts", str(sets), "--with-verdicts", str(events)])  # fmt: skip
    assert code == 0, text
    category = json.loads((out / "category_model.json").read_text(encoding="utf-8"))
    check = json.loads((out / "circumvention_check.json").read_text(encoding="utf-8"))
    assert category["training"]["verdict_rows"] == 1
    # its top-level category is over_refusal: read, not a category-model row
    assert category["training"]["verdict_category_rows"] == 0
    assert check["verdicts"]["sets"] == 2 and check["verdicts"]["file"] == "sets.jsonl"
