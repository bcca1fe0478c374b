"""Policy-gap grouping and alert decisions: pure logic, no I/O.

The audit's ``policy_gap_flags`` describe, in free text, refusals that no policy clause
covers. Batches audited at different times word the same gap differently, so flags are
grouped into *gaps*: within one policy bundle, a flag joins the existing gap whose
descriptions are most similar to its own (cosine similarity of TF-IDF vectors of character
n-grams, see ``GapMatcher``) when that similarity reaches a threshold, else it opens a new
gap. A gap's id is derived from its bundle and the description of the flag that opened it
(``gap_id``), so it is stable across restarts. Only what a flag is about is compared
(``processors.gap_text.gap_topic``: the words a ``local`` engine flag lists, not the
boilerplate every such flag shares). A gap is shown under its most common member description
(the one holding the most distinct log ids, ``refusal_audit.alerts.gaps``), through
``processors.gap_text.describe_gap``; its counts are its distinct log ids, never a number in
the text.

``gap_alert`` decides, from a gap's evidence (``GapEvidence``) and what was already alerted,
whether the gap needs an alert now and builds it (``schemas.alerts.Alert``): the first
sighting alerts; later sightings within the cooldown only add evidence; a gap that keeps
growing is alerted again at most once per cooldown period. Periods are counted from the
gap's first flagged event in event time (period ``k`` is ``floor((t - first_seen) / cooldown)``
for a flagged refusal whose event is at ``t``), and the alert id is
``alert_id("policy_gap", scope, gap_id, period)``, so a recomputation gives the same ids.

``refusal_audit.alerts.gaps`` does the I/O (reading batches, storing sightings, reading alerts).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

from processors.gap_text import gap_topic
from schemas.alerts import ALL, Alert, Scope, Statistic, TimeWindow, alert_id

__all__ = [
    "DEFAULT_COOLDOWN",
    "DEFAULT_SIMILARITY",
    "MAX_EXAMPLES",
    "MAX_GAP_DESCRIPTIONS",
    "REFERENCE_DESCRIPTIONS",
    "Assignment",
    "GapEvidence",
    "GapMatcher",
    "KnownGap",
    "PreviousAlert",
    "gap_alert",
    "gap_alert_id",
    "gap_id",
    "gap_scope",
    "normalise_description",
    "similarity",
]

DEFAULT_SIMILARITY = 0.3
"""Cosine similarity (0..1) at or above which a flag joins an existing gap.

Chosen on the rewordings of ``tests/test_gaps.py`` (8 gaps, 2-3 rewordings each, plus 50
slight variants of one gap): 0.3 gives the 8 gaps and one gap for the variants; 0.35, 0.4
and 0.5 split the rewordings into 10, 13 and 18 gaps (0.5 also splits the variants into 3);
at 0.25 and below, in other arrival orders, unrelated but neighbouring gaps (medicine doses
vs drug interactions) start to merge. Rewordings that share few words (e.g. "cleaning
products dangerous to mix" vs "chemicals that must not be combined") may still open a gap
of their own: the similarity is lexical.
"""

DEFAULT_COOLDOWN = timedelta(hours=24)
"""A growing gap is alerted again at most once per cooldown period (data time)."""

MAX_EXAMPLES = 20
"""Most example log ids an alert carries (the ``Alert`` contract's limit)."""

MAX_GAP_DESCRIPTIONS = 20
"""Distinct flag descriptions a gap is compared by: the first ones seen, the opener first."""

GAP_KIND = "policy_gap"
MAX_ALERT_DESCRIPTION = 2000
"""Characters of a gap's description kept in its alert (the sightings keep all of it)."""

# A fixed background corpus of policy-gap descriptions on unrelated topics. It is part of
# every IDF fit, so that words every gap description shares ("refused", "policy", "clause")
# weigh little even when a bundle has only one or two gaps, and so that similarities do not
# depend on how many rewordings of one gap arrived together. Changing it changes grouping.
REFERENCE_DESCRIPTIONS: tuple[str, ...] = (
    "Requests for help writing persuasive political messages are refused; no clause covers "
    "political content.",
    "Questions about how lock picking works are refused although no policy prohibits hobby "
    "locksport.",
    "The model declines to summarise news articles about terrorist attacks; news summaries "
    "are not addressed by the policy.",
    "Requests to role-play a villain in a game are refused with no matching clause.",
    "Users asking for legal information about their tenancy rights get refused; legal "
    "information is not covered.",
    "Requests to describe symptoms of common illnesses are declined; general health "
    "information has no clause.",
    "Questions about the effects of recreational drugs for harm reduction are refused; harm "
    "reduction is not covered by any clause.",
    "The model refuses to translate text that contains profanity; translation of offensive "
    "text is not addressed.",
    "Requests to explain how encryption works are refused as hacking; no clause covers "
    "cryptography education.",
    "Questions about hunting and butchering game animals are refused; the policies are "
    "silent on hunting.",
    "Requests to critique a religion's doctrines are declined; no policy clause covers "
    "religious criticism.",
    "Users asking for investment or tax advice are refused; financial information is not "
    "covered by the policies.",
    "Requests to write jokes about public figures are refused; satire is not addressed by "
    "any clause.",
    "Questions about sexual health and contraception are declined; no clause covers sexual "
    "health education.",
    "The model refuses to discuss self-defence techniques; the policy does not mention "
    "self-defence.",
    "Requests for information on firearms safety and storage are refused; no clause "
    "addresses firearm safety.",
    "Questions about historical wars and battles are refused as violent; military history "
    "is not covered.",
    "Requests to generate images descriptions of medical procedures are declined; there is "
    "no clause on medical imagery.",
    "Users asking for the address of a public government office are refused as personal "
    "data; public information is not covered.",
    "Requests about mental health crisis resources are deflected; no policy clause covers "
    "providing support resources.",
    "The model declines to explain how phishing emails look so users can spot them; "
    "security awareness is not addressed.",
    "Requests to write malware analysis reports are refused; defensive malware research has "
    "no clause.",
    "Questions on how vaccines work are refused as medical advice; science education about "
    "vaccines is not covered.",
    "Requests to discuss controversial scientific topics such as evolution are refused; no "
    "clause covers scientific debate.",
    "Users asking how to report a crime are refused; the policies have no clause on crime "
    "reporting help.",
)

_SPACE_RE = re.compile(r"\s+")
_DIGITS_RE = re.compile(r"\d+")


def normalise_description(text: str) -> str:
    """A description in canonical form: NFKC, lower case, runs of whitespace as one space,
    stripped. Two descriptions that differ only in case or spacing normalise equal."""
    return _SPACE_RE.sub(" ", unicodedata.normalize("NFKC", text).lower()).strip()


def gap_id(bundle: str, description: str) -> str:
    """The id of the gap opened in ``bundle`` by a flag with ``description``.

    sha256 of the bundle and the normalised description (``normalise_description``), 16 hex
    characters.
    """
    payload = f"{bundle}\x1f{normalise_description(description)}"
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _preprocess(text: str) -> str:
    # only what the flag is about is compared (``gap_topic``: the local engine's boilerplate
    # would make any two of its flags alike); numbers vary between rewordings of one gap
    # ("3 refusals", "12 refusals")
    return _DIGITS_RE.sub("0", normalise_description(gap_topic(text)))


_VECTORIZER = HashingVectorizer(
    analyzer="char_wb",
    ngram_range=(3, 5),
    preprocessor=_preprocess,
    n_features=2**20,
    alternate_sign=False,
    norm=None,
)
_REFERENCE_COUNTS: sp.csr_matrix | None = None


def _counts(texts: Sequence[str]) -> sp.csr_matrix:
    """Raw character n-gram counts, one row per text (stateless hashing: no fitted vocabulary)."""
    return sp.csr_matrix(_VECTORIZER.transform(list(texts)), dtype=np.float64)


def _reference_counts() -> sp.csr_matrix:
    global _REFERENCE_COUNTS
    if _REFERENCE_COUNTS is None:
        _REFERENCE_COUNTS = _counts(REFERENCE_DESCRIPTIONS)
    return _REFERENCE_COUNTS


def _cosines(candidates: sp.csr_matrix, query: sp.csr_matrix) -> np.ndarray:
    """Cosine similarity of ``query`` (one row) with each row of ``candidates``.

    Both are raw counts; the TF-IDF weighting (sublinear tf, smoothed idf, l2 norm, as
    ``TfidfVectorizer(sublinear_tf=True)``) is fitted on the reference corpus, the
    candidates and the query together.
    """
    corpus = sp.vstack([_reference_counts(), candidates, query], format="csr")
    # only the n-grams that occur somewhere matter: fit on those columns (fast, same result)
    used = np.unique(corpus.indices)
    weights = TfidfTransformer(sublinear_tf=True).fit_transform(corpus[:, used])
    n_ref, n_cand = _reference_counts().shape[0], candidates.shape[0]
    c = weights[n_ref : n_ref + n_cand]
    q = weights[n_ref + n_cand :]
    return np.asarray((c @ q.T).toarray()).ravel()


def similarity(a: str, b: str) -> float:
    """Cosine similarity in [0, 1] of two descriptions, as ``GapMatcher`` measures it
    (character 3-5-gram TF-IDF, IDF fitted on the reference corpus and both texts)."""
    return float(_cosines(_counts([a]), _counts([b]))[0])


@dataclass(frozen=True)
class KnownGap:
    """A gap already recorded: its bundle, id, the opening flag's description, and up to
    ``MAX_GAP_DESCRIPTIONS`` distinct member descriptions (the first seen first; the opening
    description is added when missing)."""

    bundle: str
    gap_id: str
    description: str
    descriptions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Assignment:
    """Where one flag went: ``gap_id``, the gap's opening ``gap_description``, whether the
    flag ``opened`` the gap, and its ``similarity`` to the gap it joined (1.0 when it opened
    it)."""

    gap_id: str
    gap_description: str
    opened: bool
    similarity: float


@dataclass
class _GapState:
    gap_id: str
    description: str
    descriptions: list[str]
    normalised: set[str]
    counts: sp.csr_matrix  # summed n-gram counts of the descriptions (= of their concatenation)


class GapMatcher:
    """Assigns flag descriptions to gaps, one flag at a time, per policy bundle.

    A flag is compared with every gap of its bundle; a gap is represented by the
    concatenation of its (up to ``MAX_GAP_DESCRIPTIONS``) distinct descriptions, so words
    its rewordings share weigh most. TF-IDF of character 3-5-grams within word boundaries
    (robust to inflections: "refuses"/"refused", "chemical"/"chemicals") with sublinear tf;
    the IDF is refitted for every flag on the reference corpus, the bundle's gaps and the
    flag, so the result does not depend on how flags were split into runs. The flag joins
    the most similar gap (the earliest known on ties) when the cosine similarity is at least
    ``threshold``, else it opens a gap with id ``gap_id(bundle, description)``. Joining adds
    the flag's description to the gap's descriptions (until the cap).

    Gaps never cross bundles. Raises ``ValueError`` for a threshold outside [0, 1].
    """

    def __init__(self, known: Sequence[KnownGap] = (), threshold: float = DEFAULT_SIMILARITY):
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"similarity threshold {threshold} outside [0, 1]")
        self.threshold = threshold
        self._gaps: dict[str, list[_GapState]] = {}
        for gap in known:
            texts: list[str] = []
            seen: set[str] = set()
            for text in (gap.description, *gap.descriptions):
                key = normalise_description(text)
                if key not in seen and len(texts) < MAX_GAP_DESCRIPTIONS:
                    seen.add(key)
                    texts.append(text)
            rows = _counts(texts)
            counts = sp.csr_matrix(np.ones((1, rows.shape[0]))) @ rows  # summed, still sparse
            state = _GapState(gap.gap_id, gap.description, texts, seen, counts)
            self._gaps.setdefault(gap.bundle, []).append(state)

    @staticmethod
    def _add_description(state: _GapState, text: str) -> None:
        key = normalise_description(text)
        if key in state.normalised or len(state.descriptions) >= MAX_GAP_DESCRIPTIONS:
            return
        state.normalised.add(key)
        state.descriptions.append(text)
        state.counts = state.counts + _counts([text])

    def gaps(self, bundle: str) -> list[KnownGap]:
        """The gaps of ``bundle`` as they stand now (known ones first, then opened ones)."""
        return [
            KnownGap(bundle, g.gap_id, g.description, tuple(g.descriptions))
            for g in self._gaps.get(bundle, [])
        ]

    def assign(self, bundle: str, description: str) -> Assignment:
        """Assign one flag (its bundle and description) to a gap; see the class docstring."""
        states = self._gaps.setdefault(bundle, [])
        new_id = gap_id(bundle, description)
        for state in states:
            if state.gap_id == new_id:  # the same wording as an opener: that gap
                self._add_description(state, description)
                return Assignment(state.gap_id, state.description, False, 1.0)
        if states:
            query = _counts([description])
            sims = _cosines(sp.vstack([s.counts for s in states], format="csr"), query)
            best = int(np.argmax(sims))
            score = float(sims[best])
            if score >= self.threshold:
                state = states[best]
                self._add_description(state, description)
                return Assignment(state.gap_id, state.description, False, score)
        state = _GapState(new_id, description, [], set(), _counts([""]))
        self._add_description(state, description)
        states.append(state)
        return Assignment(new_id, description, True, 1.0)


@dataclass(frozen=True)
class GapEvidence:
    """A gap's evidence as stored (distinct counts over its sightings).

    ``description``: the text that describes the gap (``processors.gap_text.describe_gap`` of its
    most common member description).
    ``first_seen``/``last_seen``: the earliest/latest event time of its flagged refusals
    (aware UTC; the audit time of the sighting for a log id without a stored event).
    ``period``: ``floor((last_seen - first_seen) / cooldown)``,
    the period the gap is in now. ``log_ids``/``batches``: distinct log ids and batches of all
    sightings; ``log_ids_before_period``: distinct log ids first seen before the period began.
    ``example_log_ids``: log ids in order of first sighting, those first seen in the current
    period first (at most ``MAX_EXAMPLES`` are used).
    """

    policy_bundle: str
    gap_id: str
    description: str
    first_seen: datetime
    last_seen: datetime
    period: int
    log_ids: int
    batches: int
    log_ids_before_period: int
    example_log_ids: Sequence[str] = field(default_factory=tuple)


@dataclass(frozen=True)
class PreviousAlert:
    """The latest earlier alert of a gap: its ``period`` and the ``counts`` it reported
    (``{"log_ids": n, "batches": b}``; missing keys count as 0)."""

    period: int
    counts: Mapping[str, int]


def gap_scope(bundle: str) -> Scope:
    """The alert scope of a gap of ``bundle``: the bundle, every model, every product."""
    return Scope(policy_bundle=bundle, model=ALL, product=ALL)


def gap_alert_id(bundle: str, gap: str, period: int) -> str:
    """``alert_id("policy_gap", gap_scope(bundle), gap, period)``."""
    return alert_id(GAP_KIND, gap_scope(bundle), gap, period)


def _iso(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds")


def _gap_summary(
    evidence: GapEvidence,
    previous: PreviousAlert | None,
    prev_log_ids: int,
    growth: int,
    cooldown: timedelta,
    evidence_query: str,
) -> tuple[str, str]:
    """``gap_alert``'s gap description (cut to ``MAX_ALERT_DESCRIPTION``) and summary."""
    k = evidence.period
    if previous is None:
        lead = "New policy gap"
        change = ""
    else:
        lead = "Growing policy gap"
        change = (
            f" (+{growth} since the alert of cooldown period {previous.period}, which "
            f"counted {prev_log_ids})"
        )
    # an alert must fit a Kafka record: the description is cut (the full text stays in the
    # sightings table)
    description = evidence.description
    if len(description) > MAX_ALERT_DESCRIPTION:
        description = description[:MAX_ALERT_DESCRIPTION] + " [...]"
    summary = (
        f"{lead} in policy bundle '{evidence.policy_bundle}' (gap {evidence.gap_id}): "
        f'"{description}". {evidence.log_ids} distinct refusal log id(s){change} '
        f"flagged by {evidence.batches} audited batch(es); first seen "
        f"{_iso(evidence.first_seen)}, last seen {_iso(evidence.last_seen)} (cooldown period "
        f"{k} of {cooldown}). No policy clause covers these refusals: clarify the policy. "
        f"Reproduce the counts with: {evidence_query}"
    )
    return description, summary


def gap_alert(
    evidence: GapEvidence,
    *,
    cooldown: timedelta,
    previous: PreviousAlert | None,
    now: datetime,
    evidence_query: str,
) -> Alert | None:
    """The alert due for ``evidence`` in its current period, or None when none is due.

    Due when the gap is in its first period (first sighting), or when it grew in the current
    period (log ids first seen in it), or when it was never alerted before (``previous`` is
    None: a gap found in a backlog). The caller drops an alert whose id is already stored.

    The alert: kind ``policy_gap``, severity ``warning``, scope (bundle, all, all); window =
    the current cooldown period ``[first_seen + k*cooldown, first_seen + (k+1)*cooldown)``,
    baseline = ``[first_seen, period start)``; statistic ``distinct_log_ids`` (value: log ids
    now; threshold: 1, or the count of the previous alert; effect size ``new_log_ids``: the
    growth since the previous alert); counts ``{"log_ids", "batches"}`` now and at the
    previous alert (zeros when none); ``created_at = now``; ``summary`` one paragraph ending
    with ``evidence_query``, the SQL that reproduces the counts.

    Raises ``ValueError`` for a non-positive cooldown.
    """
    if cooldown <= timedelta(0):
        raise ValueError(f"cooldown must be positive, got {cooldown}")
    k = evidence.period
    grew = evidence.log_ids > evidence.log_ids_before_period
    if not (k == 0 or grew or previous is None):
        return None
    scope = gap_scope(evidence.policy_bundle)
    start = evidence.first_seen + k * cooldown
    prev_counts = {
        "log_ids": int(previous.counts.get("log_ids", 0)) if previous else 0,
        "batches": int(previous.counts.get("batches", 0)) if previous else 0,
    }
    counts = {"log_ids": evidence.log_ids, "batches": evidence.batches}
    growth = evidence.log_ids - prev_counts["log_ids"]
    description, summary = _gap_summary(
        evidence, previous, prev_counts["log_ids"], growth, cooldown, evidence_query
    )
    return Alert(
        alert_id=gap_alert_id(evidence.policy_bundle, evidence.gap_id, k),
        kind=GAP_KIND,
        severity="warning",
        scope=scope,
        window=TimeWindow(start=start, end=start + cooldown),
        baseline=TimeWindow(start=evidence.first_seen, end=start),
        statistic=Statistic(
            name="distinct_log_ids",
            value=float(evidence.log_ids),
            threshold=float(prev_counts["log_ids"]) if previous is not None else 1.0,
            p_value=None,
            effect_size=float(growth),
            effect_size_name="new_log_ids",
            effect_size_threshold=1.0,
        ),
        current_counts=counts,
        baseline_counts=prev_counts,
        example_log_ids=list(evidence.example_log_ids)[:MAX_EXAMPLES],
        gap_id=evidence.gap_id,
        gap_description=description,
        summary=summary,
        evidence_query=evidence_query,
        created_at=now,
    )
