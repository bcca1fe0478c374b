"""The learned circumvention check: rubric detectors, old rules and encoder similarities,
weighed by a logistic regression trained on the dev corpus.

Features of a question set (columns in :func:`feature_names` order):

- ``rubric:<name>``: :func:`processors.clarification.circumvention_rubric.set_features`
  (the rubric's eight reject codes and its acceptable practices, as patterns);
- ``rule:<code>``: 1 when the old content rule ``<code>`` of
  :mod:`processors.clarification.circumvention` fires on any question (they are features
  now, not vetoes);
- ``enc:*`` (only when the artifact was trained with an encoder): cosines, via a
  :class:`processors.text_encoder.TextEncoder`, of each question to the refused request and
  to the refusal (max and mean over the questions), and for each rubric code the maximum
  cosine of any question to the code's prototype descriptions (:data:`PROTOTYPES`, written
  from the rubric's definitions), plus the same for the acceptable practices.

The score is ``sigmoid(w . ((x - mean) / scale) + b)``; the set is rejected when it is at
least the artifact's ``threshold`` (chosen on dev out-of-fold scores, see
``refusal_audit.training.circumvention``). The form rules (too many / too few questions)
stay hard vetoes. Artifact I/O is the application's (``refusal_audit.circumvention_model``):
this module only builds a model from arrays and verifies their content hash.
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
    set_features,
)
from processors.clarification.circumvention_rubric import FEATURE_NAMES as RUBRIC_FEATURES
from processors.text_encoder import TextEncoder
from schemas.clarification import QuestionSet

FORMAT_VERSION = 1
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
    "enc:request_max",
    "enc:request_mean",
    "enc:refusal_max",
    "enc:refusal_mean",
    *(f"enc:proto_{code}" for code in PROTOTYPES),
)


def feature_names(use_encoder: bool) -> tuple[str, ...]:
    """Column names of the feature matrix, with or without the encoder columns."""
    base = (*(f"rubric:{n}" for n in RUBRIC_FEATURES), *(f"rule:{c}" for c in RULE_CODES))
    return (*base, *_ENC_NAMES) if use_encoder else base


def _texts(questions: Sequence[object]) -> list[str]:
    return [q if isinstance(q, str) else str(q) for q in questions]


def rule_features(questions: Sequence[str], request: str, refusal: str) -> list[float]:
    """1.0 per old content rule of :data:`RULE_CODES` that fires on any question."""
    codes = set(rules.check_questions(questions, request, refusal).reasons)
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
) -> list[float]:
    """The ``enc:*`` columns of one set (module docstring); zeros for no questions."""
    if not questions:
        return [0.0] * len(_ENC_NAMES)
    vectors = encoder.encode([request or " ", refusal or " ", *[q or " " for q in questions]])
    req, ref, qs = vectors[0], vectors[1], vectors[2:]
    to_req = qs @ req
    to_ref = qs @ ref
    out = [float(to_req.max()), float(to_req.mean()), float(to_ref.max()), float(to_ref.mean())]
    for code in PROTOTYPES:
        out.append(float((qs @ prototypes[code].T).max()))
    return out


@dataclass(frozen=True)
class CircumventionModel:
    """A trained circumvention model: ``weights`` (n,), ``mean``/``scale`` (n,) standardising
    the columns named ``features``, ``bias``, the reject ``threshold`` on the probability,
    the ``encoder`` name it was trained with (None: no encoder columns) and the artifact's
    ``content_hash`` (:func:`content_hash`)."""

    features: tuple[str, ...]
    weights: FloatArray
    mean: FloatArray
    scale: FloatArray
    bias: float
    threshold: float
    encoder: str | None
    content_hash: str

    def score_features(self, x: FloatArray) -> FloatArray:
        """Reject probabilities of a ``(n, len(features))`` matrix: shape ``(n,)``."""
        z = ((x - self.mean) / self.scale) @ self.weights + self.bias
        return np.asarray(1.0 / (1.0 + np.exp(-z)), dtype=np.float64)


def set_row(
    questions: Sequence[str],
    request: str,
    refusal: str,
    encoder: TextEncoder | None = None,
    prototypes: Mapping[str, npt.NDArray[np.float32]] | None = None,
) -> list[float]:
    """The feature row of one set: encoder columns only when ``encoder`` (and its encoded
    ``prototypes``, :func:`prototype_vectors`) are given."""
    row = set_features(questions, request) + rule_features(questions, request, refusal)
    if encoder is not None and prototypes is not None:
        row += encoder_features(questions, request, refusal, encoder, prototypes)
    return row


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


def model_from_arrays(
    meta: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
) -> CircumventionModel:
    """Build a model from its metadata (the ``.json``) and arrays (the ``.npz``).

    Raises :class:`CircumventionArtifactError` when the format version, the feature names,
    the array shapes or the content hash do not match.
    """
    if meta.get("format_version") != FORMAT_VERSION:
        raise CircumventionArtifactError(f"format version {meta.get('format_version')!r}")
    spec = meta.get("spec")
    if not isinstance(spec, dict):
        raise CircumventionArtifactError("no spec")
    encoder = spec.get("encoder")
    features = tuple(spec.get("features", ()))
    if features != feature_names(encoder is not None):
        raise CircumventionArtifactError("its features are not this code's features")
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
    threshold = float(spec["threshold"])
    bias = float(spec["bias"])
    if not (0.0 < threshold < 1.0) or not math.isfinite(bias):
        raise CircumventionArtifactError("threshold or bias out of range")
    return CircumventionModel(features, weights, mean, scale, bias, threshold, encoder, digest)


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
    """The explicit failures (``circumvention_rubric.explicit``) of each question, as
    ``(question index, code, matched text)``; ``request`` is unused (kept for symmetry)."""
    del request
    return [(i, code, text) for i, q in enumerate(questions) for code, text in explicit(q).items()]


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
    :data:`VETO_CODES` detectors as vetoes, then the model's reject probability against
    ``model.threshold``.

    A rejection lists the rubric codes the detectors found (:func:`reasons_of`) with the
    score, or :data:`MODEL_CODE` when none fired. ``encoder`` (and its ``prototypes``) are
    required when the model was trained with one (``ValueError`` otherwise). Non-string
    questions are read as ``str(q)``; never raises for any strings.
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
    row = set_row(texts, request, refusal, encoder if model.encoder else None, prototypes)
    score = float(model.score_features(np.asarray([row], np.float64))[0])
    if score < model.threshold:
        for i, code, text in vetoes(texts, request):
            findings.append(rules.Finding(code, i, f"{text} (veto)"))
    else:
        found = reasons_of(texts, request)
        tag = f"score {score:.2f} >= {model.threshold:.2f}"
        if not found:
            findings.append(rules.Finding(MODEL_CODE, None, tag))
        for i, code, text in found:
            findings.append(rules.Finding(code, i, f"{text} ({tag})"))
    return rules.CheckResult(tuple(findings))


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
