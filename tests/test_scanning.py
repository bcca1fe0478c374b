"""The one-pass scanner (processors.scanning) changes no output: the plain ``re`` path is the
oracle.

Every text the tests already use (string constants of tests/*.py, the fixtures, the example
logs, the synthetic PII corpus) and every text of the real data files (../shared/data:
XSTest, CoCoNot, GPTFuzz, Reuter; read by path), plus generated adversarial variants (case,
Unicode look-alikes and digits, long blank runs, lone surrogates, empty), go through the
redaction, the cue reading, the pre-filter (with the request-aware stage), the local engine's
cue finder and the local engine itself, once with the RE2 set and once with it
off (``engine_disabled``: the plain ``re`` path); the outputs must be identical. A direct
check asserts the guarantee itself: a pattern that matches a text (or a piece of it, for the
sets that cover pieces) is always among the scan's candidates.
"""

from __future__ import annotations

import ast
import csv
import json
import logging
import random
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import pytest
from conftest import REPO_ROOT, SHARED_DATA
from pii_corpus import generate_corpus

from processors import redaction, refusal_cues, scanning
from processors.engines import local_cues
from processors.engines.local import LocalEngine
from processors.policy import PolicyBundle
from processors.prefilter import detect_refusal_text, detect_refusal_texts
from processors.refusal_cues import read_cues, refusal_kind
from processors.request_aware import pair_features, read_request_pair, reading
from schemas.events import RefusalEvent

T = TypeVar("T")


def _strings(obj: Any) -> Iterator[str]:
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for value in obj.values():
            yield from _strings(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _strings(value)


def _pair(record: Any) -> tuple[str, str] | None:
    """(request, response) of a log or data record (an OpenAI-shaped field: its strings)."""
    if not isinstance(record, dict):
        return None
    sides = [
        record.get("prompt", record.get("request")),
        record.get("response", record.get("completion")),
    ]
    request, response = (" ".join(_strings(v)) if isinstance(v, dict) else v for v in sides)
    if isinstance(request, str) and isinstance(response, str):
        return request, response
    return None


def _records(path: Path) -> Iterator[Any]:
    """The rows of a CSV file (dicts), or the records of a JSONL file (a line that is not
    JSON comes as its string)."""
    if path.suffix == ".csv":
        with path.open(encoding="utf-8", newline="") as fh:
            yield from csv.DictReader(fh)
        return
    for line in path.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
        try:
            yield json.loads(line)
        except ValueError:
            yield line


def _read(files: list[Path]) -> tuple[list[str], list[tuple[str, str]]]:
    """Every string of the files' records, and the (request, response) pairs among them."""
    records = [record for path in files for record in _records(path)]
    texts = [text for record in records for text in _strings(record)]
    pairs = [found for record in records if (found := _pair(record)) is not None]
    return texts, pairs


@cache
def known_texts() -> tuple[list[str], list[tuple[str, str]]]:
    """The texts (and request/response pairs) the existing tests and examples use."""
    files = sorted((REPO_ROOT / "examples").rglob("*.jsonl"))
    files += sorted((REPO_ROOT / "tests" / "fixtures").rglob("*.jsonl"))
    texts, pairs = _read(files)
    for path in sorted((REPO_ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
    texts.extend(item.text for item in generate_corpus())
    return list(dict.fromkeys(texts)), pairs


@cache
def data_texts() -> tuple[list[str], list[tuple[str, str]]]:
    """Every text (and pair) of the real data files under ../shared/data."""
    if not (SHARED_DATA / "xstest").is_dir():
        pytest.fail(f"shared data not found at {SHARED_DATA}; tests need ../shared/data")
    files = sorted(SHARED_DATA.rglob("*.jsonl")) + sorted(SHARED_DATA.rglob("*.csv"))
    texts, pairs = _read(files)
    return list(dict.fromkeys(texts)), pairs


_LOOKALIKES = {
    "k": "\u212a",  # KELVIN SIGN: folds to k under re.IGNORECASE
    "s": "\u017f",  # LATIN SMALL LETTER LONG S: folds to s
    "i": "\u0130",  # LATIN CAPITAL LETTER I WITH DOT ABOVE
    "'": "\u2019",
    " ": "\u00a0",
    "e": "\u00e9",
}
_DIGITS = {
    "arabic-indic": "\u0660",  # \d in re, not ASCII
    "fullwidth": "\uff10",
}


def variants(text: str, rng: random.Random) -> list[str]:
    """Adversarial variants of ``text``: case, Unicode look-alikes and non-ASCII digits,
    glued word boundaries, long blank runs, a lone surrogate, the empty text."""
    out = [text.upper(), text.title(), text.swapcase(), ""]
    for old, new in _LOOKALIKES.items():
        out.append(text.replace(old, new))
    for zero in _DIGITS.values():
        out.append("".join(chr(ord(zero) + int(c)) if c.isascii() and c.isdigit() else c
                           for c in text))  # fmt: skip
    glue = rng.choice(["x", "9", "_", "\u00e9", "-", "\u200b"])
    out += [text.replace(" ", f" {glue}"), text.replace(" ", f"{glue} ")]
    out += [text + " " * 400 + text, "\n" * 400 + text, text.replace(" ", " \t\n\n  ")]
    out.append(text + "\udcff")
    return out


def adversarial(texts: list[str], n: int, seed: int) -> list[str]:
    """Variants of a fixed sample of ``n`` of ``texts``; for 10 of them also runs of 20,000
    blanks (a pattern that went quadratic on blank runs would show here as a time-out)."""
    rng = random.Random(seed)
    seeds = rng.sample(texts, min(n, len(texts)))
    out = [v for t in seeds for v in variants(t, rng)]
    out += [t + " " * 20_000 + t for t in seeds[:10]] + ["\n\n \t" * 5_000 + t for t in seeds[:10]]
    return list(dict.fromkeys(out))


def both(fn: Callable[[], T]) -> tuple[T, T]:
    """``fn()`` with the scanner, then with the plain ``re`` path (the oracle)."""
    scanned = fn()
    with scanning.engine_disabled():
        oracle = fn()
    return scanned, oracle


def _assert_same(label: str, items: list[Any], fn: Callable[[Any], Any]) -> None:
    scanned, oracle = both(lambda: [fn(x) for x in items])
    diffs = [(x, a, b) for x, a, b in zip(items, scanned, oracle, strict=True) if a != b]
    assert not diffs, f"{label}: {len(diffs)} differ, first {diffs[0]!r:.600}"


def test_engine_is_installed() -> None:
    """The install ships google-re2, so CI measures and tests the scanner, not the fallback."""
    assert scanning.engine_available()


# --- the guarantee, pattern by pattern --------------------------------------------------------

_SETS: list[tuple[str, scanning.PatternSet, bool]] = [
    ("redaction", redaction._SCAN, False),
    ("refusal cues", refusal_cues._SCAN, True),
    ("request-aware (norm)", reading._NORM_SCAN, True),
    ("request-aware (response)", reading._RESPONSE_SCAN, True),
    *((f"local cues {key}", s, False) for key, s in local_cues._SCAN_SETS.items()),
]


@pytest.mark.integration
@pytest.mark.parametrize(("name", "patterns", "pieces"), _SETS, ids=[s[0] for s in _SETS])
def test_no_match_is_missed(name: str, patterns: scanning.PatternSet, pieces: bool) -> None:
    """Every pattern that matches a text is a candidate of it (and of any text holding it as
    a piece, for the sets built with ``substrings=True``)."""
    rng = random.Random(name)
    base, _ = known_texts()
    data, _ = data_texts()
    texts = [*rng.sample(base, 2000), *rng.sample(data, 1000)]
    texts += [*adversarial(base, 150, 1), *adversarial(data, 100, 2)]
    texts += [t.lower() for t in texts]
    missed: list[tuple[int, str]] = []
    for text in texts:
        may = patterns.candidates(text)
        assert may is not None
        for i, pattern in enumerate(patterns.patterns):
            if i not in may and pattern.search(text):
                missed.append((i, text))
            if pieces and len(text) > 4 and i not in may:
                a = rng.randrange(len(text))
                b = rng.randrange(a, len(text) + 1)
                if pattern.search(text[a:b]):
                    missed.append((i, text[a:b]))
    assert not missed, f"{name}: {len(missed)} missed, first {missed[0]!r:.400}"


def test_expressions_widen_python_only_constructs() -> None:
    """Look-arounds, back-references, possessive repeats, Unicode classes and case folding
    become wider byte expressions; the scan still finds what ``re`` finds."""
    cases = {
        r"(?<!\w)k\w+(?=\s)": ["k\u00e9lvin\u00a0", "kelvin\t"],
        r"(?i)kelvin": ["\u212aELVIN", "KeLvIn"],
        r"(\d)-\1": ["\u0663-\u0663", "7-7"],
        r"\d++x": ["\uff11x", "12x"],
        r"^\bcaf\u00e9\b$": ["caf\u00e9"],
        r"(?m)^end": ["start\nend"],
        r"(?s)a.b": ["a\nb", "a\u00e9b"],
        r"[^\W\d_]{3}": ["\u00e9\u00e8\u00ea"],
        # a negated class under re.IGNORECASE keeps the letters it does not name (widening
        # the class must not narrow its complement); re.ASCII's \S holds U+001C..U+001F
        r"(?i)x[^\d]y": ["xay", "XaY"],
        r"(?i)x[^\s]y": ["xqy"],
        r"(?i)x[^\x00-\x1f\x7f-\x9f]y": ["xay"],
        r"(?i)x[^\u00e9\d]y": ["xby", "x\u00e8y"],
        r"(?a)x\Sy": ["x\x1cy"],
        r"(?a)x[^\s]y": ["x\x1fy"],
    }
    import re

    for source, texts in cases.items():
        patterns = scanning.PatternSet([re.compile(source)])
        for text in texts:
            assert re.search(source, text), (source, text)
            assert patterns.candidates(text) == {0}, (source, text)
    assert scanning.PatternSet([re.compile("abc")]).candidates("xyz") == set()


def test_a_failed_scan_means_search_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """When RE2 gives up on a text (no sentinel in its answer), the candidates are ``None``."""
    import re

    patterns = scanning.PatternSet([re.compile("abc")])
    assert patterns.candidates("xabc") == {0}

    class GaveUp:
        def Match(self, data: bytes) -> None:  # RE2's answer when its DFA runs out of memory
            return None

    monkeypatch.setattr(patterns, "_set", GaveUp())
    assert patterns.candidates("xabc") is None


def test_fallback_without_re2(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the engine every pattern is searched (candidates ``None``) and it says so once."""
    import re

    monkeypatch.setattr(scanning, "_re2", None)
    monkeypatch.setattr(scanning, "_fallback_logged", False)
    with caplog.at_level(logging.WARNING, logger="processors.scanning"):
        first = scanning.PatternSet([re.compile("abc")])
        scanning.PatternSet([re.compile("def")])
    assert first.candidates("abc") is None
    assert not scanning.engine_available()
    notes = [r for r in caplog.records if "google-re2 is not importable" in r.getMessage()]
    assert len(notes) == 1


# --- outputs, scanner vs oracle ---------------------------------------------------------------


def _redaction(text: str) -> tuple[Any, ...]:
    redactor = redaction.Redactor()
    result = redactor.redact(text)
    return tuple(redactor.find(text)), result.text, result.counts


def _cues(text: str) -> tuple[Any, ...]:
    reading = read_cues(text)
    return reading, refusal_kind(reading), detect_refusal_text(text)


def _hits(pair: tuple[str, str]) -> list[tuple[str, str]]:
    return [(c.label, m) for c, m in local_cues.find_cues(*pair)]


def _features(pair: tuple[str, str]) -> tuple[float, ...]:
    request, response = pair
    reading = read_cues(response)
    return pair_features(reading, read_request_pair(request, response, reading))


def _assert_same_everywhere(texts: list[str], pairs: list[tuple[str, str]]) -> None:
    """Redaction and cue reading of ``texts``; cue finder, request-aware features and the
    pre-filter's decisions (request-aware stage on) of ``pairs``."""
    _assert_same("redaction", texts, _redaction)
    _assert_same("cue reading", texts, _cues)
    _assert_same("find_cues", pairs, _hits)
    _assert_same("request-aware features", pairs, _features)
    requests = [p[0] for p in pairs]
    responses = [p[1] for p in pairs]
    scanned, oracle = both(lambda: detect_refusal_texts(responses, requests=requests))
    assert scanned == oracle


def test_same_output_on_the_tests_texts() -> None:
    """Every text the tests use and their adversarial variants (each also as a request and
    response pair with itself)."""
    texts, pairs = known_texts()
    many = list(dict.fromkeys([*texts, *adversarial(texts, 500, 7)]))
    _assert_same_everywhere(many, [*pairs, *((t, t) for t in many), *((t, "") for t in texts[::4])])


@pytest.mark.integration
def test_same_output_on_the_data_files() -> None:
    """Every text and request/response pair (also swapped) of ../shared/data, and the
    adversarial variants of a sample of the texts."""
    texts, pairs = data_texts()
    many = list(dict.fromkeys([*texts, *adversarial(texts, 300, 8)]))
    _assert_same_everywhere(many, [*pairs, *((b, a) for a, b in pairs[::3])])


@pytest.mark.integration
def test_same_local_engine_results(example_bundle: PolicyBundle) -> None:
    """LocalEngine.audit_sync over the example log and the data files' pairs, in batches."""
    _, test_pairs = known_texts()
    _, pairs = data_texts()
    t0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    events = [
        RefusalEvent(log_id=f"scan-{i}", event_time=t0, request=req, response=resp, model="m")
        for i, (req, resp) in enumerate([*test_pairs, *pairs])
        if req.strip() and resp.strip()
    ]
    batches = [events[i : i + 50] for i in range(0, len(events), 50)]
    engine = LocalEngine()

    def run() -> list[Any]:
        return [
            engine.audit_sync(b, example_bundle).result.model_dump(mode="json") for b in batches
        ]

    scanned, oracle = both(run)
    assert scanned == oracle


def test_random_classes_never_miss() -> None:
    """Random (negated) classes of ASCII, non-ASCII, ranges and categories, under each flag,
    against every character that matters: a character ``re`` accepts is a candidate."""
    import re

    rng = random.Random(26)
    items = ["a", "K", "s", "0", "_", " ", "\\d", "\\w", "\\s", "\\W", "\\S", "\\D", "a-f"]
    items += ["\u00e9", "\u212a", "\u017f", "\\x00-\\x1f", "\\x7f-\\x9f", "\u0100-\u017f"]
    chars = [chr(c) for c in range(128)] + ["\u00e9", "\u212a", "\u017f", "\u0130", "\u0660"]
    for _ in range(300):
        body = "".join(rng.sample(items, rng.randint(1, 3)))
        flags = rng.choice(["", "(?i)", "(?a)", "(?ai)"])
        source = f"{flags}<[{rng.choice(['', '^'])}{body}]>"
        pattern = re.compile(source)
        patterns = scanning.PatternSet([pattern])
        for ch in chars:
            text = f"<{ch}>"
            if pattern.search(text):
                assert patterns.candidates(text) == {0}, (source, text)
