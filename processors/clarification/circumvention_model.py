"""The learned circumvention check: per-question rubric detectors, old rules and (optionally)
encoder similarities, weighed by a sign-constrained logistic model and pooled over the set
so that a bad question cannot be diluted by good ones (issue 25).

Features of ONE question (columns in :func:`feature_names` order):

- ``rubric:<name>``: :func:`processors.clarification.circumvention_rubric.question_features`
  (the rubric's eight reject codes, generic reject cues, and its acceptable practices
  ``safe_*``), 0/1;
- ``rule:<code>``: 1 when the old content rule ``<code>`` of
  :mod:`processors.clarification.circumvention` fires on the question (features, not vetoes);
- ``enc:*`` (only when the artifact was trained with an encoder): cosines, via a
  :class:`processors.text_encoder.TextEncoder`, of the question to the refused request and to
  the refusal, and for each entry of :data:`PROTOTYPES` the maximum cosine of the question
  to its prototype descriptions.

**Monotone by construction.** Each column has a sign (:func:`feature_signs`): a reject
signal (a rubric reject code, a reject cue, an old rule, similarity to a reject-code
prototype) has a weight >= 0, an acceptable practice (``safe_*``, similarity to the safe
prototypes) a weight <= 0; the request/refusal similarities are free. A question's score
is ``p_q = sigmoid(w . ((x_q - mean) / scale) + b)`` and the set's reject probability is the
noisy-OR ``1 - prod_q (1 - p_q)``: every factor is in [0, 1], so adding a question never
lowers the set's score, and a good question cannot offset a bad one (it only multiplies by
a factor <= 1). The artifact's loader refuses weights that break their sign.

The set is rejected when its score is at least the artifact's ``threshold`` (chosen on dev
out-of-fold scores, see ``refusal_audit.training.circumvention``). The form rules (too many /
too few questions) and the rubric's explicit failures stay hard vetoes. Artifact I/O is the
application's (``refusal_audit.clarification.circumvention_check``): this module only builds a model
from
arrays and verifies their content hash and signs.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from processors.clarification import circumvention as rules
from processors.clarification.circumvention_rubric import (
    EXPLICIT,
    RUBRIC_CODES,
    detect,
    explicit,
    question_features,
)
from processors.clarification.circumvention_rubric import FEATURE_NAMES as RUBRIC_FEATURES
from processors.text_encoder import TextEncoder
from schemas.clarification import QuestionSet

FORMAT_VERSION = 2
"""Artifact format: 2 is the per-question, sign-constrained, noisy-OR model (1 was the
unconstrained set-level logistic regression, no longer loaded)."""
POOLING = "noisy_or"
FloatArray = npt.NDArray[np.float64]

#: Old content rules used as features (the form rules stay vetoes).
RULE_CODES: tuple[str, ...] = (
    rules.GIVES_EXAMPLES,
    rules.SUGGESTS_WORDING,
    rules.ASKS_METHOD,
    rules.HARMFUL_VOCABULARY,
    rules.RESTATES_REFUSAL,
    rules.LEADING_QUESTION,
    rules.ASKS_DECLARATION,
)

#: Short descriptions of what a question of each rubric code does, written from the rubric's
#: definitions (docs/circumvention-rubric.md), and of the acceptable practices (``safe``).
PROTOTYPES: dict[str, tuple[str, ...]] = {
    "leads_rephrasing": (
        "Could you ask it again as a hypothetical or as part of a story?",
        "If you leave out that word and ask it in general terms it would go through.",
    ),
    "coaches_intent": (
        "If this is for research or a class, I can give you the details. Is it?",
        "Is this strictly for professional or academic purposes?",
    ),
    "alternative_route": (
        "Would a version that does the same thing without that step work for you?",
        "Instead, would it help to use a different tool or service that gets the same result?",
    ),
    "operational_detail": (
        "Which exact substance do you have and how much of it?",
        "Which person is it, and where do they live or work?",
        "Which system, version and software is the target running?",
    ),
    "harm_ranking": (
        "Do you want to know which method is the most effective or hardest to detect?",
        "Should I compare the options by how dangerous they are?",
    ),
    "role_claim": (
        "Are you a licensed professional? Professionals can get the specifics.",
        "If you are the owner or an officer, I can give you access to it.",
    ),
    "harm_vocabulary": (
        "Do you need it to be untraceable and leave no evidence?",
        "Do you want them to suffer, or just to be taken down?",
    ),
    "dismisses_refusal": (
        "That refusal was overcautious; just tell me what you need and I will help anyway.",
        "Don't worry about the warning, it is easy to get past.",
    ),
    "safe": (
        "What is this for, for example a class, a story, work or something else?",
        "Have you tried the official support channel, a doctor or a lawyer?",
        "Are you safe right now, and would you like support resources?",
        "Who is the audience, and would an overview or a summary be useful?",
    ),
}

_ENC_NAMES: tuple[str, ...] = (
    "enc:request",
    "enc:refusal",
    *(f"enc:proto_{code}" for code in PROTOTYPES),
)


def feature_names(use_encoder: bool) -> tuple[str, ...]:
    """Column names of a question's feature row, with or without the encoder columns."""
    base = (*(f"rubric:{n}" for n in RUBRIC_FEATURES), *(f"rule:{c}" for c in RULE_CODES))
    return (*base, *_ENC_NAMES) if use_encoder else base


def feature_sign(name: str) -> int:
    """The sign a column's weight must keep: ``-1`` (weight <= 0) for an acceptable practice
    (``rubric:safe_*``, ``enc:proto_safe``), ``0`` (free) for the request/refusal
    similarities, ``+1`` (weight >= 0) for every reject signal (rubric reject codes and cues,
    old rules, similarity to a reject-code prototype). From docs/circumvention-rubric.md:
    a reject code's presence can only make a question worse, a hard boundary only better."""
    if name.startswith("rubric:safe_") or name == "enc:proto_safe":
        return -1
    if name in ("enc:request", "enc:refusal"):
        return 0
    return 1


def feature_signs(names: Sequence[str]) -> tuple[int, ...]:
    """:func:`feature_sign` of each name."""
    return tuple(feature_sign(n) for n in names)


def _texts(questions: Sequence[object]) -> list[str]:
    return [q if isinstance(q, str) else str(q) for q in questions]


def rule_features(question: str, request: str, refusal: str) -> list[float]:
    """1.0 per old content rule of :data:`RULE_CODES` that fires on ``question``."""
    codes = set(rules.check_questions([question], request, refusal).reasons)
    return [1.0 if c in codes else 0.0 for c in RULE_CODES]


def prototype_vectors(encoder: TextEncoder) -> dict[str, npt.NDArray[np.float32]]:
    """The encoded :data:`PROTOTYPES`: code -> ``(n_prototypes, dim)`` unit rows."""
    return {code: encoder.encode(list(texts)) for code, texts in PROTOTYPES.items()}


def encoder_features(
    questions: Sequence[str],
    request: str,
    refusal: str,
    encoder: TextEncoder,
    prototypes: Mapping[str, npt.NDArray[np.float32]],
) -> FloatArray:
    """The ``enc:*`` columns of each question: shape ``(len(questions), len(_ENC_NAMES))``."""
    if not questions:
        return np.zeros((0, len(_ENC_NAMES)))
    vectors = encoder.encode([request or " ", refusal or " ", *[q or " " for q in questions]])
    req, ref, qs = vectors[0], vectors[1], vectors[2:]
    cols = [qs @ req, qs @ ref] + [(qs @ prototypes[c].T).max(axis=1) for c in PROTOTYPES]
    return np.asarray(np.stack(cols, axis=1), np.float64)


def question_rows(
    questions: Sequence[str],
    request: str,
    refusal: str,
    encoder: TextEncoder | None = None,
    prototypes: Mapping[str, npt.NDArray[np.float32]] | None = None,
) -> FloatArray:
    """The feature rows of a set's questions: shape ``(len(questions), n_features)``; the
    encoder columns only when ``encoder`` (and its encoded ``prototypes``,
    :func:`prototype_vectors`) are given."""
    rows = [question_features(q, request) + rule_features(q, request, refusal) for q in questions]
    x = np.asarray(rows, np.float64).reshape(len(questions), len(RUBRIC_FEATURES) + len(RULE_CODES))
    if encoder is not None and prototypes is not None:
        x = np.hstack([x, encoder_features(questions, request, refusal, encoder, prototypes)])
    return x


def noisy_or(p: FloatArray) -> float:
    """``1 - prod(1 - p)`` of per-question probabilities (0.0 for none): never lower when a
    probability is added, never lower when one rises."""
    return float(1.0 - np.prod(1.0 - p)) if p.size else 0.0


@dataclass(frozen=True)
class CircumventionModel:
    """A trained circumvention model: per-question ``weights`` (n,), ``mean``/``scale`` (n,)
    standardising the columns named ``features``, ``signs`` (:func:`feature_signs`), ``bias``,
    the reject ``threshold`` on the set's probability, the ``encoder`` name it was trained
    with (None: no encoder columns) and the artifact's ``content_hash``."""

    features: tuple[str, ...]
    signs: tuple[int, ...]
    weights: FloatArray
    mean: FloatArray
    scale: FloatArray
    bias: float
    threshold: float
    encoder: str | None
    content_hash: str

    def question_scores(self, x: FloatArray) -> FloatArray:
        """Per-question reject probabilities of a ``(n, len(features))`` matrix: ``(n,)``."""
        z = ((x - self.mean) / self.scale) @ self.weights + self.bias
        return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)

    def set_score(self, x: FloatArray) -> float:
        """The set's reject probability: :func:`noisy_or` of :meth:`question_scores`."""
        return noisy_or(self.question_scores(x))


def content_hash(spec: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 over the canonical JSON of ``spec`` and each array's name, dtype, shape and
    bytes (sorted by name): it changes exactly when the scoring changes."""
    h = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


class CircumventionArtifactError(ValueError):
    """The circumvention model's arrays or metadata do not fit this code."""


def sign_violations(
    features: Sequence[str], signs: Sequence[int], weights: FloatArray
) -> list[str]:
    """The features whose weight breaks its sign (``+1``: must be >= 0, ``-1``: <= 0)."""
    return [
        f"{n} ({w:+.4g})"
        for n, s, w in zip(features, signs, weights, strict=True)
        if (s > 0 and w < 0) or (s < 0 and w > 0)
    ]


def model_from_arrays(
    meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
) -> CircumventionModel:
    """Build a model from its metadata (the ``.json``) and arrays (the ``.npz``).

    Raises :class:`CircumventionArtifactError` when the format version, the pooling, the
    feature names or signs, the array shapes or the content hash do not match, or a weight
    breaks its sign (a non-monotone model is never loaded).
    """
    if meta.get("format_version") != FORMAT_VERSION:
        raise CircumventionArtifactError(f"format version {meta.get('format_version')!r}")
    spec = meta.get("spec")
    if not isinstance(spec, dict):
        raise CircumventionArtifactError("no spec")
    if spec.get("pooling") != POOLING:
        raise CircumventionArtifactError(f"pooling {spec.get('pooling')!r}, not {POOLING!r}")
    encoder = spec.get("encoder")
    features = tuple(spec.get("features", ()))
    if features != feature_names(encoder is not None):
        raise CircumventionArtifactError("its features are not this code's features")
    signs = feature_signs(features)
    if tuple(spec.get("signs", ())) != signs:
        raise CircumventionArtifactError("its sign constraints are not this code's")
    try:
        weights, mean, scale = (
            np.asarray(arrays[k], np.float64) for k in ("weights", "mean", "scale")
        )
    except KeyError as exc:
        raise CircumventionArtifactError(f"array {exc} missing") from exc
    if not (weights.shape == mean.shape == scale.shape == (len(features),)):
        raise CircumventionArtifactError("array shapes do not match the features")
    digest = content_hash(spec, {k: arrays[k] for k in ("weights", "mean", "scale")})
    if digest != meta.get("content_hash"):
        raise CircumventionArtifactError("content hash mismatch (arrays or spec changed)")
    arrays_ok = all(np.isfinite(a).all() for a in (weights, mean, scale))
    if not arrays_ok or (scale <= 0).any():
        raise CircumventionArtifactError("weights, mean or scale not finite, or scale <= 0")
    broken = sign_violations(features, signs, weights)
    if broken:
        raise CircumventionArtifactError("weights break their sign: " + ", ".join(broken))
    try:
        threshold, bias = float(spec["threshold"]), float(spec["bias"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CircumventionArtifactError(f"threshold or bias: {exc}") from exc
    if not (0.0 < threshold < 1.0) or not math.isfinite(bias):
        raise CircumventionArtifactError("threshold or bias out of range")
    return CircumventionModel(
        features, signs, weights, mean, scale, bias, threshold, encoder, digest
    )


def reasons_of(questions: Sequence[str], request: str) -> list[tuple[int, str, str]]:
    """The rubric codes the detectors find, as ``(question index, code, matched text)``
    (for describing a rejection; the model, not these, decides)."""
    out = []
    for i, q in enumerate(questions):
        for code, text in detect(q, request).items():
            if code in RUBRIC_CODES:
                out.append((i, code, text))
    return out


VETO_CODES: tuple[str, ...] = tuple(EXPLICIT)
"""Rubric codes whose explicit form
(:data:`processors.clarification.circumvention_rubric.EXPLICIT`) alone rejects a set."""


def vetoes(questions: Sequence[str], request: str) -> list[tuple[int, str, str]]:
    """The explicit failures (``circumvention_rubric.explicit``) of each question about
    ``request``, as ``(question index, code, matched text)``."""
    return [
        (i, code, text)
        for i, q in enumerate(questions)
        for code, text in explicit(q, request).items()
    ]


MODEL_CODE = "circumvention_model"
"""Finding code of a set the model rejects with no rubric detector firing (the score alone)."""


def check_with_model(
    model: CircumventionModel,
    questions: Sequence[object],
    request: str,
    refusal: str,
    encoder: TextEncoder | None = None,
    prototypes: Mapping[str, npt.NDArray[np.float32]] | None = None,
) -> rules.CheckResult:
    """The learned check of one set: the form rules (too many / too few questions) and the
    :data:`VETO_CODES` detectors as vetoes, then the set's reject probability
    (:meth:`CircumventionModel.set_score`) against ``model.threshold``.

    A rejection lists the rubric codes the detectors found (:func:`reasons_of`), or
    :data:`MODEL_CODE` on the highest-scoring question when none fired; the findings carry
    the matched text only, the score and threshold are the result's ``score`` and
    ``threshold`` (so a retry turn built from the findings does not show the score).
    ``encoder`` (and its ``prototypes``) are required when the model was trained with one
    (``ValueError`` otherwise). Non-string questions are read as ``str(q)``; never raises
    for any strings.
    """
    texts = _texts(questions)
    request = request if isinstance(request, str) else str(request)
    refusal = refusal if isinstance(refusal, str) else str(refusal)
    findings = [
        f
        for f in rules.check_questions(texts, request, refusal).findings
        if f.code in (rules.TOO_MANY_QUESTIONS, rules.TOO_FEW_QUESTIONS)
    ]
    if model.encoder is not None and (encoder is None or prototypes is None):
        raise ValueError(f"this circumvention model needs the encoder {model.encoder!r}")
    x = question_rows(texts, request, refusal, encoder if model.encoder else None, prototypes)
    p = model.question_scores(x)
    score = noisy_or(p)
    if score < model.threshold:
        for i, code, text in vetoes(texts, request):
            findings.append(rules.Finding(code, i, f"{text} (veto)"))
    else:
        found = reasons_of(texts, request)
        if not found:
            top = int(np.argmax(p))
            findings.append(rules.Finding(MODEL_CODE, top, "the model's score"))
        for i, code, text in found:
            findings.append(rules.Finding(code, i, text))
    return rules.CheckResult(tuple(findings), score, model.threshold)


@dataclass(frozen=True)
class CircumventionCheck:
    """The circumvention check a clarifier and its question engines run.

    With a ``model`` it is the learned check (:func:`check_with_model`, using ``encoder``
    when the model was trained with one); without, the strict deterministic rules of
    :mod:`processors.clarification.circumvention` (the fallback that rejects more).
    """

    model: CircumventionModel | None = None
    encoder: TextEncoder | None = None

    def __post_init__(self) -> None:
        if self.model is not None and self.model.encoder is not None:
            if self.encoder is None:
                raise ValueError(
                    f"this circumvention model needs the encoder {self.model.encoder!r}"
                )
            object.__setattr__(self, "_prototypes", prototype_vectors(self.encoder))

    @property
    def name(self) -> str:
        """``rules``, or ``model:<first 12 hex of the content hash>``."""
        return "rules" if self.model is None else f"model:{self.model.content_hash[:12]}"

    def check_questions(
        self, questions: Sequence[object], request: str, refusal: str
    ) -> rules.CheckResult:
        """Check question texts (any number, unvalidated); never raises for strings."""
        if self.model is None:
            return rules.check_questions(_texts(questions), request, refusal)
        prototypes = getattr(self, "_prototypes", None)
        return check_with_model(self.model, questions, request, refusal, self.encoder, prototypes)

    def check_question_set(
        self, questions: QuestionSet, request: str, refusal: str
    ) -> rules.CheckResult:
        """:meth:`check_questions` over a validated set's ``question_text`` values."""
        return self.check_questions(
            [q.question_text for q in questions.questions], request, refusal
        )


RULES_CHECK = CircumventionCheck()
"""The deterministic rules alone (the default of engines built without a model)."""
