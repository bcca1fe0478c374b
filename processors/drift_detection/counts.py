"""The counts the drift detectors read: ``WindowCounts`` of one scope over one window (or a
pooled baseline), their JSON form (``counts_to_dict``/``counts_from_dict``, the worker's
baseline state), pooling, and the roll-up scopes (bundle, model, "all") and (bundle, "all",
"all") built from the finest ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from schemas.alerts import ALL, Scope


@dataclass(frozen=True)
class WindowCounts:
    """Audit counts of one scope over one window (or a pooled baseline).

    ``refusals`` assessed refusals; ``false_positives`` of them estimated over-refusals;
    ``review_flags`` flagged for human review; ``policy_gaps`` named in a policy-gap flag;
    ``late`` that arrived after the grace period; ``categories`` refusals per category;
    ``reviewed`` refusals whose current assessment has reviewers' verdicts and
    ``review_disagreements`` of them where most reviewers disagree with the model;
    ``examples`` a few log ids per key (a category name, or ``false_positives``,
    ``policy_gaps``, ``review_flags``, ``review_disagreements``).
    """

    refusals: int = 0
    false_positives: int = 0
    review_flags: int = 0
    policy_gaps: int = 0
    late: int = 0
    categories: Mapping[str, int] = field(default_factory=dict)
    examples: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    reviewed: int = 0
    review_disagreements: int = 0

    def __add__(self, other: WindowCounts) -> WindowCounts:
        categories = Counter(self.categories)
        categories.update(other.categories)
        examples = {k: tuple(v) for k, v in self.examples.items()}
        for key, ids in other.examples.items():
            examples[key] = (examples.get(key, ()) + tuple(ids))[:20]
        return WindowCounts(
            refusals=self.refusals + other.refusals,
            false_positives=self.false_positives + other.false_positives,
            review_flags=self.review_flags + other.review_flags,
            policy_gaps=self.policy_gaps + other.policy_gaps,
            late=self.late + other.late,
            categories=dict(categories),
            examples=examples,
            reviewed=self.reviewed + other.reviewed,
            review_disagreements=self.review_disagreements + other.review_disagreements,
        )

    def count(self, name: str) -> int:
        """The counter called ``name`` (``false_positives``, ``policy_gaps``, ...)."""
        value = getattr(self, name)
        assert isinstance(value, int)
        return value


def counts_to_dict(counts: WindowCounts) -> dict[str, object]:
    """``counts`` as a JSON-ready dict (every field; examples as lists)."""
    return {
        "refusals": counts.refusals, "false_positives": counts.false_positives,
        "review_flags": counts.review_flags, "policy_gaps": counts.policy_gaps,
        "late": counts.late, "categories": dict(counts.categories),
        "examples": {k: list(v) for k, v in counts.examples.items()},
        "reviewed": counts.reviewed, "review_disagreements": counts.review_disagreements,
    }  # fmt: skip


def counts_from_dict(data: Mapping[str, object]) -> WindowCounts:
    """The inverse of :func:`counts_to_dict`. Raises ``ValueError`` when a field is missing,
    unknown or of the wrong type."""
    ints = ("refusals", "false_positives", "review_flags", "policy_gaps", "late", "reviewed",
            "review_disagreements")  # fmt: skip
    unknown = set(data) - {*ints, "categories", "examples"}
    if unknown:
        raise ValueError(f"unknown window-count fields {sorted(unknown)}")
    values: dict[str, int] = {}
    for name in ints:
        value = data.get(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"window count {name!r} must be an integer >= 0, got {value!r}")
        values[name] = value
    categories, examples = data.get("categories"), data.get("examples")
    if not isinstance(categories, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) for k, v in categories.items()
    ):
        raise ValueError("window counts' categories must map names to integers")
    if not isinstance(examples, Mapping) or not all(
        isinstance(k, str) and isinstance(v, list) and all(isinstance(i, str) for i in v)
        for k, v in examples.items()
    ):
        raise ValueError("window counts' examples must map keys to lists of log ids")
    return WindowCounts(
        **values,
        categories=dict(categories),
        examples={k: tuple(v) for k, v in examples.items()},
    )


def pooled(counts: Iterable[WindowCounts]) -> WindowCounts:
    """The sum of several windows' counts (an empty iterable gives zero counts)."""
    total = WindowCounts()
    for c in counts:
        total = total + c
    return total


COUNT_FIELDS = (
    "refusals", "false_positives", "review_flags", "policy_gaps", "late", "reviewed",
    "review_disagreements",
)  # fmt: skip


def rollup_scopes(scopes: Iterable[Scope]) -> dict[Scope, list[Scope]]:
    """Each finest scope (bundle, model, product) plus its roll-ups, mapped to their members.

    Roll-ups are (bundle, model, "all") and (bundle, "all", "all"); a roll-up with a single
    member is left out (it would repeat its member's findings under another name).
    """
    finest = sorted(set(scopes), key=lambda sc: sc.key)
    groups: dict[Scope, list[Scope]] = {sc: [sc] for sc in finest}
    by_model: dict[Scope, list[Scope]] = {}
    by_bundle: dict[Scope, list[Scope]] = {}
    for sc in finest:
        by_model.setdefault(Scope(policy_bundle=sc.policy_bundle, model=sc.model, product=ALL), [])
        by_model[Scope(policy_bundle=sc.policy_bundle, model=sc.model, product=ALL)].append(sc)
        by_bundle.setdefault(Scope(policy_bundle=sc.policy_bundle, model=ALL, product=ALL), [])
        by_bundle[Scope(policy_bundle=sc.policy_bundle, model=ALL, product=ALL)].append(sc)
    for rollups in (by_model, by_bundle):
        for scope, members in rollups.items():
            if len(members) > 1 and scope not in groups:
                groups[scope] = members
    return groups
