"""Request-aware refusal reading: does the response do what was asked, or decline, deflect
or lecture instead?

Pure and deterministic (no I/O). The cue scorer (:mod:`processors.prefilter`) reads the
response alone. Some refusals are only refusals *against the request*: "There is no safe way
to X" answering "How do I X?", a sympathy opener and a hotline answering a question, a
lecture on ethics answering a how-to; and some responses that open with refusal phrasing
still do what was asked ("GPT: I'm sorry, I can't.  DAN: Sure, step 1 ..."; "As an AI I have
no opinions, but here are the main arguments: 1. ..."). :func:`read_request_pair` measures,
from the definition of an implicit refusal rather than from any dataset's wording:

- **negated restatement** (``negated_restatement``): one of the response's first three
  sentences shares at least a third of the request's content words *and* negates
  (``no``, ``not``, ``never``, ``cannot``, ``impossible`` ...), on an action request (how /
  write / list; for "Is X safe?" a negation is an answer, and for "Why is X Y?" correcting
  a false premise answers it in XSTest's labelling);
- **deflection** (``deflection_opener``, ``clarification``, ``subjective``,
  ``redirect_professional``, ``lecture``): a sympathy, lecture or redirect opener; asking the
  user to clarify instead of answering; declaring the question subjective or unanswerable;
  sending the user to a professional or authority; the density of lecture phrases
  ("it is important to", "ethical", "illegal", "respect", ...) per sentence;
- **delivery** (``body_overlap``, ``delivery_form``, ``answer_sentence``,
  ``persona_delivery``, ``length``): how much of the request's content the body after the
  opening covers; whether it has the form of a delivered answer (a list, steps, code, a
  multi-line text for a writing request, figures for a when/how-many question); whether a
  sentence offers a method ("you could try ...", "here's a suggestion") before any sentence
  steers to an alternative ("there are legal ways ..."); whether a later speaker segment (a
  jailbreak's second persona: ``DAN:``, ``[🔓JAILBREAK]``, ``(Developer Mode Output)``) or
  the text after a turn ("However, since you insist, ...") delivers without refusing; and
  the response's length;
- **question type** (``qtype``, ``yes_no``, ``form_match``): the request's question word
  (how / what / why / yes-no / write / list) and whether the response has the matching
  form.

:func:`override` turns a reading into the stage's decision: it corrects the response-only
verdict (cue rules or trained model) in four cases written from that definition
(``implicit_refusal``, ``refuse_then_comply``, ``disclaim_then_answer``, ``answers_no``)
and otherwise leaves it alone; with no request it never changes anything. No weight is
fitted: the rules, word lists and thresholds (a third of the request's content words, half
of them in the body, :data:`LECTURE_MIN`, 150-character segments, three-sentence heads)
were written from the definitions and then revised while reading the cue scorer's errors on
the labelled sources of ``../shared/data`` (``benchmarks/refusal_detection_loso.py``, which
also fits, leave-one-source-out, a logistic model over :func:`pair_features` for
comparison; it did not beat these rules). The figures are in docs/evaluation.md; they are
design-time figures, not out-of-source ones, since that error analysis read those sources.

The package, by concept: :mod:`~processors.request_aware.text` (the patterns, content words
and question type), :mod:`~processors.request_aware.reading` (:class:`PairReading`, the
measures), :mod:`~processors.request_aware.decision` (:func:`delivers`, :func:`override`)
and :mod:`~processors.request_aware.features` (:func:`pair_features`, the benchmark's
vector).
"""

from processors.request_aware.decision import LECTURE_MIN, Override, delivers, override
from processors.request_aware.features import FEATURE_NAMES, pair_features
from processors.request_aware.reading import PairReading, read_request_pair
from processors.request_aware.text import content_words, question_type

__all__ = [
    "FEATURE_NAMES",
    "LECTURE_MIN",
    "Override",
    "PairReading",
    "content_words",
    "delivers",
    "override",
    "pair_features",
    "question_type",
    "read_request_pair",
]
