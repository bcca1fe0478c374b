"""Tests of processors.redaction: measured recall/precision on a labelled corpus, plus units."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime

import pytest
from pii_corpus import KINDS, CorpusItem, Label, generate_corpus

from processors.redaction import (
    ALL_REDACTION_KINDS,
    PLACEHOLDERS,
    PiiSpan,
    RedactionResult,
    Redactor,
    luhn_valid,
    redact_event,
)
from schemas.events import RefusalEvent

RECALL_FLOOR = {"email": 0.95, "card": 0.95, "gov_id": 0.95, "ip": 0.95, "phone": 0.95,
                "address": 0.80}
PRECISION_FLOOR = 0.95


def _apply(text: str, spans: list[PiiSpan]) -> str:
    out, pos = [], 0
    for s in spans:
        out += [text[pos:s.start], PLACEHOLDERS[s.kind]]
        pos = s.end
    return "".join(out) + text[pos:]


def _matches(text: str, span: PiiSpan, label: Label) -> bool:
    """A detection is the labelled value when it has the right kind and covers the value,
    swallowing at most punctuation/whitespace around it (e.g. the period after 'St.')."""
    if span.kind != label.kind or span.start > label.start or span.end < label.end:
        return False
    extra = text[span.start:label.start] + text[label.end:span.end]
    return not any(c.isalnum() for c in extra)


@pytest.fixture(scope="module")
def corpus() -> list[CorpusItem]:
    return generate_corpus()


def test_corpus_is_large_and_covers_every_kind(corpus: list[CorpusItem]) -> None:
    assert len(corpus) >= 300
    per_kind = Counter(label.kind for item in corpus for label in item.labels)
    assert set(per_kind) == set(KINDS) == set(ALL_REDACTION_KINDS)
    assert min(per_kind.values()) >= 50
    assert sum(item.negative for item in corpus) >= 100
    for item in corpus:  # labels are exact, ordered and disjoint
        assert all(a.end <= b.start for a, b in zip(item.labels, item.labels[1:], strict=False))


def test_recall_and_precision_on_labelled_corpus(corpus: list[CorpusItem]) -> None:
    redactor = Redactor()
    tp: Counter[str] = Counter()
    fn: Counter[str] = Counter()
    fp: Counter[str] = Counter()
    misses: list[str] = []
    for item in corpus:
        spans = redactor.find(item.text)
        # what find() reports is exactly what redact() does to the text
        assert redactor.redact(item.text).text == _apply(item.text, spans)
        matched: set[PiiSpan] = set()
        for label in item.labels:
            hit = next((s for s in spans if _matches(item.text, s, label)), None)
            if hit is None:
                fn[label.kind] += 1
                misses.append(f"FN {label.kind}: {item.text[label.start:label.end]!r} in "
                              f"{item.text!r}")
            else:
                tp[label.kind] += 1
                matched.add(hit)
        for s in spans:
            if s not in matched:
                fp[s.kind] += 1
                misses.append(f"FP {s.kind}: {item.text[s.start:s.end]!r} in {item.text!r}")

    print("\nredaction on the synthetic corpus (span level)")
    print(f"{'kind':8s} {'labels':>6s} {'recall':>7s} {'precision':>9s}")
    recall: dict[str, float] = {}
    for kind in KINDS:
        n = tp[kind] + fn[kind]
        recall[kind] = tp[kind] / n if n else 1.0
        found = tp[kind] + fp[kind]
        prec = tp[kind] / found if found else 1.0
        print(f"{kind:8s} {n:6d} {recall[kind]:7.3f} {prec:9.3f}")
    total_tp, total_fp = sum(tp.values()), sum(fp.values())
    precision = total_tp / (total_tp + total_fp)
    print(f"{'overall':8s} {total_tp + sum(fn.values()):6d} "
          f"{total_tp / (total_tp + sum(fn.values())):7.3f} {precision:9.3f}")
    for line in misses[:40]:
        print(" ", line)

    for kind, floor in RECALL_FLOOR.items():
        assert recall[kind] >= floor, f"{kind} recall {recall[kind]:.3f} < {floor}"
    assert precision >= PRECISION_FLOOR


def test_negative_corpus_items_are_left_intact(corpus: list[CorpusItem]) -> None:
    redactor = Redactor()
    changed = [item.text for item in corpus if item.negative
               and redactor.redact(item.text).text != item.text]
    assert changed == []


@pytest.mark.parametrize(
    "text",
    [
        "Python 3.11.7",
        "in 2023",
        "$1,250.00",
        "call me at 5",
        "v1.2.3.4",
        "version 1.2.3.4",
        "released on 2023-10-15 at 10:30:45",
        "4111 1111 1111 1112",  # Luhn-invalid
        "4111111111111112",
        "0000 0000 0000 0000",  # passes Luhn but is a placeholder, not a card
        "000-12-3456 666-12-3456 900-12-3456 123-00-4567 123-45-0000",
        "999.1.1.1 and 01.2.3.4",
        "std::vector and a::b",
        "ISBN 978-0-306-40615-7",
        "pages 100-120, 1,234,567 users, 12.5%",
        "Main Street is closed",
        "In 2019 Baker Street was rebuilt",
        "DA 12 34 56 A is not a valid NI number",  # D is not allowed as the first letter
        "12345678A is not a DNI (wrong check letter)",
        "SIN 046 454 287",  # Luhn-invalid
        "555-0123",  # short number without a phone word
    ],
)
def test_look_alikes_are_not_redacted(text: str) -> None:
    result = Redactor().redact(text)
    assert result.text == text
    assert result.counts == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("mail bob.smith+x@example.co.uk.", "mail <EMAIL>."),
        ("(415) 555-0123 ext. 42", "<PHONE>"),
        ("+44 (0)20 7946 0958", "<PHONE>"),
        ("call 4155550123", "call <PHONE>"),
        ("4111 1111 1111 1111", "<CARD>"),
        ("3782-822463-10005", "<CARD>"),
        ("ref 2024 4111 1111 1111 1111", "ref 2024 <CARD>"),
        ("SSN 123-45-6789", "SSN <GOV_ID>"),
        ("ssn: 123456789", "ssn: <GOV_ID>"),
        ("ITIN 912-70-1234", "ITIN <GOV_ID>"),
        ("NI QQ 12 34 56 C", "NI <GOV_ID>"),
        ("NI AB123456C", "NI <GOV_ID>"),
        ("DNI 12345678Z, NIE X1234567L", "DNI <GOV_ID>, NIE <GOV_ID>"),
        ("SIN 046 454 286", "SIN <GOV_ID>"),
        ("host 192.168.1.10:8080", "host <IP>:8080"),
        ("1.2.3.4", "<IP>"),  # documented: a bare dotted quad is an address
        ("[2001:db8::1]:443 and ::ffff:192.0.2.1", "[<IP>]:443 and <IP>"),
        ("at 1600 Pennsylvania Avenue NW, Washington, DC 20500.", "at <ADDRESS>."),
        ("221B Baker Street, London NW1 6XE", "<ADDRESS>"),
        ("42 Oak Lane, Apt 4B, Springfield, IL 62704", "<ADDRESS>"),
    ],
)
def test_each_kind_is_replaced_by_its_placeholder(text: str, expected: str) -> None:
    assert Redactor().redact(text).text == expected


def test_card_is_not_mistyped_as_phone() -> None:
    # a phone word precedes a Luhn-valid 13-digit number: it is a card, not a phone
    text = "Text me, my card is 4222222222222"
    assert luhn_valid("4222222222222")
    result = Redactor().redact(text)
    assert result.counts == {"card": 1}
    # with cards disabled, the card number is left intact rather than re-typed as a phone
    assert Redactor(kinds=["phone"]).redact(text).text == text


def test_counts_only_list_kinds_found() -> None:
    result = Redactor().redact("a@example.com, b@example.org and 10.0.0.1")
    assert result == RedactionResult("<EMAIL>, <EMAIL> and <IP>", {"email": 2, "ip": 1})
    assert Redactor().redact("nothing here").counts == {}
    assert Redactor().redact("") == RedactionResult("", {})


def test_disabled_kind_is_left_intact() -> None:
    text = "Mail a@example.com from 10.0.0.1, SSN 123-45-6789."
    only_email = Redactor(kinds=["email"])
    assert only_email.kinds == frozenset({"email"})
    result = only_email.redact(text)
    assert result.text == "Mail <EMAIL> from 10.0.0.1, SSN 123-45-6789."
    assert result.counts == {"email": 1}
    assert Redactor(kinds=[]).redact(text).text == text
    no_ip = Redactor(kinds=[k for k in ALL_REDACTION_KINDS if k != "ip"])
    assert no_ip.redact(text).text == "Mail <EMAIL> from 10.0.0.1, SSN <GOV_ID>."


def test_unknown_kind_raises() -> None:
    with pytest.raises(ValueError, match="passport"):
        Redactor(kinds=["email", "passport"])


def test_redact_event_covers_request_response_and_attributes() -> None:
    event = RefusalEvent(
        log_id="log-1",
        event_time=datetime(2024, 5, 1, tzinfo=UTC),
        request="Find who owns 4111 1111 1111 1111, mail me at eve@example.com",
        response="I'm sorry, but I can't look up card holders.",
        model="m",
        attributes={"client_ip": "203.0.113.7", "note": "call +1 415 555 0123", "tier": "free"},
    )
    redacted, counts = redact_event(event, Redactor())
    assert redacted.request == "Find who owns <CARD>, mail me at <EMAIL>"
    assert redacted.response == event.response
    assert redacted.attributes == {"client_ip": "<IP>", "note": "call <PHONE>", "tier": "free"}
    assert counts == {"card": 1, "email": 1, "ip": 1, "phone": 1}
    assert redacted.log_id == event.log_id and redacted.event_time == event.event_time
    assert event.attributes["client_ip"] == "203.0.113.7"  # the input is not modified
    assert redact_event(redacted, Redactor()) == (redacted, {})


@pytest.mark.parametrize("field", ["request", "response", "attribute"])
def test_redact_event_with_pii_in_one_field_only_copies_the_event(field: str) -> None:
    """Any one field holding PII gives a redacted copy (the input unchanged); an event with
    none comes back as it is, with no counts, and equal to what the copy would be."""
    texts = {"request": "How do I reset it?", "response": "I can't help with that."}
    texts["attribute"] = "free"
    plain = RefusalEvent(
        log_id="log-2", event_time=datetime(2024, 5, 1, tzinfo=UTC), request=texts["request"],
        response=texts["response"], model="m", attributes={"tier": texts["attribute"]},
    )  # fmt: skip
    assert redact_event(plain, Redactor()) == (plain, {})
    assert plain.model_copy(update={"attributes": dict(plain.attributes)}) == plain
    texts[field] = f"{texts[field]} eve@example.com"
    event = plain.model_copy(
        update={"request": texts["request"], "response": texts["response"],
                "attributes": {"tier": texts["attribute"]}}
    )  # fmt: skip
    redacted, counts = redact_event(event, Redactor())
    assert counts == {"email": 1}
    assert redacted != event and "eve@example.com" in str(event.model_dump())
    assert "eve@example.com" not in str(redacted.model_dump())
    assert redacted.log_id == event.log_id and redacted.attributes.keys() == event.attributes.keys()


def test_idempotent_on_corpus(corpus: list[CorpusItem]) -> None:
    redactor = Redactor()
    for item in corpus:
        once = redactor.redact(item.text).text
        twice = redactor.redact(once)
        assert twice.text == once, item.text
        assert twice.counts == {}


def test_placeholders_are_not_pii() -> None:
    text = " ".join(PLACEHOLDERS.values())
    assert Redactor().redact(text).text == text


def test_luhn() -> None:
    assert luhn_valid("4111 1111 1111 1111")
    assert luhn_valid("79927398713")
    assert not luhn_valid("79927398710")
    assert not luhn_valid("")
