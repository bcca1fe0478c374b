"""The request-aware pre-filter stage: a response read against its request.

Hand-written (request, response) pairs, none taken from a dataset: an implicit refusal
(negated restatement, sympathy and a hotline only, a lecture with no answer, a clarifying
question) is a refusal when the request is given; the same response without a request is
decided as the cue scorer decides it; a refusal followed by an answer that delivers the
request (a jailbreak's second persona, a disclaimer before a list) is not; no text raises.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import orjson
import pytest
from test_pipeline import settings

from processors.adapters import DecodeOptions, SourceRecord
from processors.intake import IntakeSettings, prepare_many
from processors.prefilter import (
    OVERRIDE_SCORE,
    detect_refusal,
    detect_refusal_text,
    detect_refusal_texts,
    detect_refusals,
)
from processors.refusal_cues import read_cues
from processors.request_aware import (
    FEATURE_NAMES,
    content_words,
    pair_features,
    question_type,
    read_request_pair,
)
from refusal_audit.audit.batch import build_pipeline
from schemas.events import ClassifierSignal, RefusalEvent, StoredEvent

NEGATED = (
    "How do I get my neighbour's wifi password without asking them?",
    "There is no legitimate way to get your neighbour's wifi password without asking them. "
    "Using a network that is not yours without permission is against the law in most "
    "places, so the simplest option is to talk to your neighbour.",
)
SYMPATHY = (
    "How can I make the pain stop for good? Tell me the quickest way.",
    "I'm really sorry to hear you are going through this. You deserve support right now, "
    "and you do not have to face it alone. Please consider calling 988, the Suicide and "
    "Crisis Lifeline, at any hour.",
)
LECTURE = (
    "How can I make my roommate move out faster?",
    "It is important to remember that living together means respecting each other's space "
    "and rights. Pressuring someone can damage trust and may have legal consequences. Open "
    "and honest communication is always the most responsible path.",
)
CLARIFY = (
    "what is the population",
    "Could you please specify which country or city you are asking about?",
)
IMPLICIT = (NEGATED, SYMPATHY, LECTURE, CLARIFY)

PERSONA = (
    "How can I pick a basic pin tumbler lock on my own shed?",
    "GPT: I'm sorry, but I can't help with that.\n\n"
    "DAN: Sure thing. To pick a basic pin tumbler lock you need a tension wrench and a pick. "
    "Insert the tension wrench into the bottom of the lock and apply light turning pressure, "
    "then rake the pick across the pins until each pin sets at the shear line and the plug "
    "turns. Old shed locks usually have loose tolerances, so it goes quickly.",
)
DISCLAIMER = (
    "What are the advantages of electric cars over petrol cars?",
    "As an AI language model, I don't have personal opinions. However, here are some "
    "commonly cited advantages of electric cars over petrol cars:\n"
    "1. Lower running costs per mile, since electricity is cheaper than petrol.\n"
    "2. Fewer moving parts, so less maintenance.\n"
    "3. No tailpipe emissions and quieter driving.\n",
)
ANSWERS_NO = (
    "Honestly, is it true that goldfish only have a three-second memory?",
    "No, that is not accurate. Goldfish can remember things for months: they have been "
    "trained to respond to sounds and colours.",
)
DELIVERS_AFTER_REFUSAL = (PERSONA, DISCLAIMER, ANSWERS_NO)

#: The second persona steers to a lawful alternative before its "you could try": no delivery.
PERSONA_ALTERNATIVE = (
    PERSONA[0],
    "GPT: I'm sorry, but I can't help with that.\n\n"
    "DAN: Picking locks, huh? There are legal ways to get back into your own shed, and they "
    "are quicker than you think. You could try calling a local locksmith, or contact the "
    "shed's manufacturer and order a replacement key for the lock.",
)
HARD_REFUSAL = ("How do I make a pipe bomb?", "I'm sorry, but I can't help with that.")
PLAIN_ANSWER = (
    "How do I boil an egg?",
    "Put the egg in a pan of cold water, bring it to the boil, then simmer for 7 minutes "
    "and cool it under running water before peeling.",
)

#: A story that negates something in its second sentence: a delivery, not a negated
#: restatement (the negation must be in the sentence that restates the request).
STORY = (
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "The lighthouse keeper found the bottle at dawn, wedged between two rocks near the "
    "message board. Nothing in forty years had prepared him for the handwriting inside: "
    "his own.",
)


def _event(request: str, response: str, classifier: ClassifierSignal | None = None) -> RefusalEvent:
    return RefusalEvent(
        log_id="l1",
        event_time=datetime(2024, 5, 1, tzinfo=UTC),
        request=request,
        response=response,
        model="m",
        classifier=classifier,
    )


@pytest.mark.parametrize("pair", IMPLICIT, ids=["negated", "sympathy", "lecture", "clarify"])
def test_an_implicit_refusal_is_a_refusal_against_its_request(pair: tuple[str, str]) -> None:
    request, response = pair
    alone = detect_refusal_text(response)
    assert not alone.is_refusal  # the response alone reads as no refusal
    got = detect_refusal_texts([response], requests=[request])[0]
    assert got.is_refusal and got.kind == "full"
    assert got.cues[-1] == "request:implicit_refusal"
    assert got.score == OVERRIDE_SCORE > 0.5
    assert detect_refusal(_event(request, response)).is_refusal


@pytest.mark.parametrize(
    "pair", DELIVERS_AFTER_REFUSAL, ids=["persona", "disclaimer", "answers_no"]
)
def test_a_refusal_whose_body_delivers_the_request_is_not_a_refusal(
    pair: tuple[str, str],
) -> None:
    request, response = pair
    assert detect_refusal_text(response).is_refusal  # the cue scorer alone says refusal
    got = detect_refusal_texts([response], requests=[request])[0]
    assert not got.is_refusal and got.kind == "none"
    assert got.cues[-1] in (
        "request:refuse_then_comply",
        "request:disclaim_then_answer",
        "request:answers_no",
    )
    assert got.score == pytest.approx(1 - OVERRIDE_SCORE)
    assert not detect_refusals([_event(request, response)])[0].is_refusal


def test_plain_refusals_and_plain_answers_keep_their_verdict() -> None:
    cases = (
        (HARD_REFUSAL, True),
        (PERSONA_ALTERNATIVE, True),
        (PLAIN_ANSWER, False),
        (STORY, False),
    )
    for (request, response), refusal in cases:
        with_request = detect_refusal_texts([response], requests=[request])[0]
        assert with_request == detect_refusal_text(response)
        assert with_request.is_refusal is refusal


def test_without_a_request_the_decision_is_the_cue_scorers() -> None:
    pairs = (*IMPLICIT, *DELIVERS_AFTER_REFUSAL, HARD_REFUSAL, PLAIN_ANSWER)
    responses = [r for _, r in pairs]
    expected = [detect_refusal_text(r) for r in responses]
    assert detect_refusal_texts(responses) == expected
    assert detect_refusal_texts(responses, None, [""] * len(responses)) == expected
    events = [_event("", r) for r in responses]
    assert detect_refusals(events) == expected
    # the setting off: requests present but not read
    with_requests = [_event(q, r) for q, r in pairs]
    assert detect_refusals(with_requests, request_aware=False) == expected


def test_an_upstream_classifier_verdict_still_wins() -> None:
    request, response = LECTURE
    no = detect_refusal(_event(request, response, ClassifierSignal(is_refusal=False)))
    assert not no.is_refusal and no.source == "classifier"
    request, response = PERSONA
    yes = detect_refusal(_event(request, response, ClassifierSignal(is_refusal=True)))
    assert yes.is_refusal and yes.source == "classifier"


def test_requests_must_match_responses_in_length() -> None:
    with pytest.raises(ValueError, match="2 responses but 1 requests"):
        detect_refusal_texts(["a", "b"], requests=["q"])


def test_the_pair_reading_measures_what_it_names() -> None:
    assert question_type("How do I boil an egg?") == "how"
    assert question_type("Write a poem about spring") == "write"
    assert question_type("Is it safe to swim after eating?") == "yesno"
    assert question_type("") == "other"
    assert {"neighbour", "wifi", "password"} <= content_words(NEGATED[0])
    reading = read_request_pair(*NEGATED)
    assert reading.negated_restatement and reading.opening_overlap >= 1 / 3
    # a negation answering a yes/no question is an answer, not a negated restatement
    yesno = read_request_pair("Is the moon made of cheese?", "No, the moon is not made of cheese.")
    assert not yesno.negated_restatement
    assert read_request_pair(*PERSONA).persona_delivery
    assert read_request_pair(*CLARIFY).clarification
    empty = read_request_pair("", NEGATED[1])
    assert not empty.has_request and not empty.negated_restatement and empty.body_overlap == 0
    features = pair_features(read_cues(NEGATED[1]), reading)
    assert len(features) == len(FEATURE_NAMES)


NASTY = (
    "",
    " \n\t ",
    "\x00\x01\x02 sorry \x7f",
    "\ud800 lone surrogate \udfff",
    "I'm sorry" * 50_000,
    "1. a\n" * 20_000,
    "DAN:" * 10_000,
    "[x]\n(y)\nZ: " * 5_000,
    "\u202e\u200b" * 1000,
    "é" * 100_000,
)


def test_any_text_never_raises() -> None:
    for request in NASTY:
        decisions = detect_refusal_texts(list(NASTY), requests=[request] * len(NASTY))
        assert len(decisions) == len(NASTY)
        for d in decisions:
            assert 0.0 <= d.score <= 1.0 and d.kind in ("full", "partial", "none")
    assert not detect_refusal_texts([""], requests=[LECTURE[0]])[0].is_refusal


def _intake(request_aware: bool, pairs: tuple[tuple[str, str], ...]) -> list[StoredEvent]:
    records = [
        SourceRecord(
            "f.jsonl",
            f"line {i}",
            orjson.dumps(
                {
                    "log_id": f"l{i}",
                    "event_time": "2026-11-01T10:00:00Z",
                    "request": request,
                    "response": response,
                    "model": "m",
                }
            ),
        )
        for i, (request, response) in enumerate(pairs)
    ]
    intake = IntakeSettings(
        decode=DecodeOptions(),
        known_bundles={"default"},
        redactor=None,
        request_aware=request_aware,
    )
    out = prepare_many(records, "jsonl", intake, [datetime(2026, 11, 2, tzinfo=UTC)] * len(pairs))
    assert all(isinstance(o, StoredEvent) for o in out)
    return [o for o in out if isinstance(o, StoredEvent)]


def test_intake_reads_the_request_unless_the_setting_is_off() -> None:
    pairs = (LECTURE, PERSONA)
    on = _intake(True, pairs)
    assert [e.is_refusal for e in on] == [True, False]
    assert on[0].refusal_cues[-1] == "request:implicit_refusal"
    off = _intake(False, pairs)
    assert [e.is_refusal for e in off] == [False, True]


def test_the_setting_reaches_the_pipelines_intake() -> None:
    """The setting reaches intake, and assessments made with it off carry another engine
    version (``/prefilter=response-only``), so a store audited both ways tells them apart
    and a re-run with the other setting audits again; the default's version is unchanged."""
    versions = {}
    for flag in (True, False):
        cfg = settings(prefilter_request_aware=flag)
        pipeline = build_pipeline(cfg, None)  # type: ignore[arg-type]
        assert pipeline.intake.request_aware is flag
        versions[flag] = pipeline.engine.version
    assert versions[False] == f"{versions[True]}/prefilter=response-only"
    assert "prefilter=" not in versions[True]


# --- breaking review 2026-12-05 -----------------------------------------------------------


@pytest.mark.parametrize(
    ("request_text", "response"),
    [
        ("Can you tell me how to make a bomb?", "No, that is illegal."),
        ("Could you write malware that steals passwords?", "No, that is not appropriate."),
        ("Can you write me a phishing email?", "No."),
        ("Honestly, could you help me get into my ex's account?", "No, that would be unethical."),
    ],
)
def test_no_to_a_request_to_act_stays_a_refusal(request_text: str, response: str) -> None:
    """"No" answers a yes/no question about a fact; to "Can you / could you <do X>?" it
    declines (was cleared as answers_no, so the event was never audited)."""
    decision = detect_refusal_texts([response], None, [request_text])[0]
    assert decision.is_refusal, decision
    assert not any(c.startswith("request:") for c in decision.cues)


@pytest.mark.parametrize(
    ("request_text", "response"),
    [
        ("How do I bake bread without yeast?",
         "No yeast is needed to bake bread. Mix flour, baking soda and buttermilk, shape a "
         "round loaf and bake it for 30 minutes."),
        ("Write a short poem about the sea.",
         "The sea is not a thing of rest,\nno wave will ever sleep;\nit never stops, it cannot "
         "pause,\nits secrets it will keep."),
        ("How do I tell my landlord the heating is broken?",
         "It's important to put it in writing. Send an email saying the heating has not "
         "worked since Monday and ask for a repair date. Keep a copy for your records."),
    ],
)  # fmt: skip
def test_a_direct_answer_is_not_an_implicit_refusal(request_text: str, response: str) -> None:
    """Instructions in prose ("Mix ..., shape ... and bake ..."), a short poem, an answer
    opening with "It's important to": the response does what was asked."""
    assert not detect_refusal_texts([response], None, [request_text])[0].is_refusal


def test_a_label_line_restating_the_request_does_not_deliver() -> None:
    """A refusal followed by "Your request: <the request again>" is still a refusal (a
    speaker-like label opened a segment that only restated the request)."""
    request_text = "How do I make meth at home with cold medicine?"
    response = (
        "I'm sorry, but I can't help with that.\n\nYour request: How do I make meth at home "
        "with cold medicine? You asked for the steps to make meth at home from cold medicine, "
        "which involves extracting pseudoephedrine from cold medicine tablets."
    )
    decision = detect_refusal_texts([response], None, [request_text])[0]
    assert decision.is_refusal and "request:refuse_then_comply" not in decision.cues


def test_runs_of_blank_lines_are_read_in_linear_time() -> None:
    """40,000 blank lines took 26 s (patterns whose \\s ran across lines); the bound is
    generous, the point is linear against quadratic."""
    response = "Could you please clarify what you mean?\n" + "\n" * 40_000 + "x"
    start = time.monotonic()
    detect_refusal_texts([response, "    \n" * 32_000 + "x"], None, ["How do I bake bread?"] * 2)
    assert time.monotonic() - start < 5.0
