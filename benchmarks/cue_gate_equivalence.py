"""Check that the literal cue gates and word-key searches (processors.regex_gates) change no output.

Runs the committed (``git show HEAD:``) pre-filter and local-engine modules and the working
tree's side by side over every text of ../shared/data (JSONL string fields, CSV cells), the
example logs, the test fixtures and the string constants of tests/*.py, and compares
read_cues / refusal_kind / detect_refusal_text, find_cues (on each prompt/response pair, on
each text as request and response, and upper-cased), the engine's ``tokenize`` (request and
response mode), every engine cue's search against a plain ``pattern.search`` on texts whose
word boundaries are perturbed (a letter, digit, ``_``, ``é`` or apostrophe glued to words),
and LocalEngine.audit_sync batches.

Usage: python benchmarks/cue_gate_equivalence.py [--ref HEAD]
"""

from __future__ import annotations

import argparse
import ast
import csv
import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"

from processors import prefilter as new_pf  # noqa: E402
from processors import refusal_cues as new_rc  # noqa: E402
from processors import regex_gates as new_gates  # noqa: E402
from processors.engines import local as new_local  # noqa: E402
from processors.engines import local_cues as new_cues  # noqa: E402
from processors.engines import local_text as new_text  # noqa: E402
from processors.policy import parse_bundle  # noqa: E402
from schemas.events import RefusalEvent  # noqa: E402


def _load_old(ref: str, path: str, name: str, tmp: Path) -> ModuleType:
    src = subprocess.run(
        ["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    file = tmp / f"{name}.py"
    file.write_text(src, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, file)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def _strings(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


def corpus() -> tuple[list[str], list[tuple[str, str]]]:
    texts: list[str] = []
    pairs: list[tuple[str, str]] = []
    files = sorted(DATA.rglob("*.jsonl")) + sorted((ROOT / "examples").glob("*.jsonl"))
    files += sorted((ROOT / "tests" / "fixtures").glob("*.jsonl"))
    for f in files:
        for line in f.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                texts.append(line)
                continue
            texts.extend(_strings(rec))
            if isinstance(rec, dict):
                req, resp = rec.get("prompt", rec.get("request")), rec.get("response")
                if isinstance(resp, dict):  # OpenAI log: take the strings
                    resp = " ".join(_strings(resp))
                if isinstance(req, dict):
                    req = " ".join(_strings(req))
                if isinstance(req, str) and isinstance(resp, str):
                    pairs.append((req, resp))
    for f in sorted(DATA.rglob("*.csv")):
        with f.open(encoding="utf-8", newline="") as fh:
            for row in csv.DictReader(fh):
                texts.extend(v for v in row.values() if isinstance(v, str))
                if row.get("prompt") and row.get("completion"):
                    pairs.append((row["prompt"], row["completion"]))
    for f in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
    return texts, pairs


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", default="HEAD")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    old_pf = _load_old(args.ref, "processors/prefilter.py", "old_prefilter", tmp)
    old_local = _load_old(args.ref, "processors/engines/local.py", "old_local", tmp)
    texts, pairs = corpus()
    uniq = list(dict.fromkeys(texts))
    variants = list(dict.fromkeys([*uniq, *(t.upper() for t in uniq), *(t.title() for t in uniq)]))
    n = {
        "texts": len(texts),
        "unique texts": len(uniq),
        "variants": len(variants),
        "pairs": len(pairs),
    }
    bad = 0

    def check(what: str, a: Any, b: Any, key: Any) -> None:
        nonlocal bad
        n[what] = n.get(what, 0) + 1
        if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
            a, b = dataclasses.asdict(a), dataclasses.asdict(b)  # type: ignore[arg-type]
        if a != b:
            bad += 1
            if bad <= 10:
                print(f"DIFF {what}: {key!r:.120}\n  old={a!r:.300}\n  new={b!r:.300}")

    for t in variants:
        o, w = old_pf.read_cues(t), new_rc.read_cues(t)
        check("read_cues", o, w, t)
        check("refusal_kind", old_pf.refusal_kind(o), new_rc.refusal_kind(w), t)
        check(
            "detect_refusal_text", old_pf.detect_refusal_text(t), new_pf.detect_refusal_text(t), t
        )

    def hits(mod: ModuleType, req: str, resp: str) -> list[tuple[str, str]]:
        return [(c.label, m) for c, m in mod.find_cues(req, resp)]

    for t in variants:
        check("find_cues(text, text)", hits(old_local, t, t), hits(new_local, t, t), t)
        check("find_cues(text, '')", hits(old_local, t, ""), hits(new_local, t, ""), t)
    for req, resp in pairs:
        check("find_cues(pair)", hits(old_local, req, resp), hits(new_local, req, resp), req)
        check(
            "find_cues(pair swapped)", hits(old_local, resp, req), hits(new_local, resp, req), req
        )

    for t in variants:
        check("tokenize(request)", old_local.tokenize(t), new_text.tokenize(t), t)
        check(
            "tokenize(response)",
            old_local.tokenize(t, response=True),
            new_text.tokenize(t, response=True),
            t,
        )

    # word-boundary perturbations: words glued to letters, digits, "_", "é", apostrophes
    glue = ["x", "9", "_", "\u00e9", "'", "-", ""]
    perturbed: list[str] = []
    for i, t in enumerate(uniq[:6000]):
        g = glue[i % len(glue)]
        perturbed += [t.replace(" ", f" {g}"), t.replace(" ", f"{g} "), g + t.lower() + g]
    perturbed = list(dict.fromkeys(perturbed))
    n["perturbed texts"] = len(perturbed)
    for cue in new_cues.CUES:
        for t in perturbed:
            text = t if cue.case_sensitive else t.lower()
            m = cue.pattern.search(text)
            found: re.Match[str] | None
            if cue.keys is not None and cue.starts is not None:
                found = new_gates.keyed_search(
                    cue.pattern, cue.starts, text, new_gates.text_keys(text)
                )
            elif cue.leads is not None:
                found = new_gates.search_at(cue.pattern, cue.leads, text)
            else:
                found = new_gates.gated_search(cue.pattern, cue.gate, text)
            check(
                "cue search (perturbed)",
                m and (m.span(), m.group(0)),
                found and (found.span(), found.group(0)),
                (cue.label, text),
            )
    for t in perturbed:
        check("find_cues(perturbed)", hits(old_local, t, t), hits(new_local, t, t), t)

    pol = ROOT / "refusal_audit" / "example_policies"
    bundle = parse_bundle(
        "wren",
        *(
            (pol / f).read_text(encoding="utf-8")
            for f in ("allowed_use_policy.md", "product_safety_policy.md", "refusal_taxonomy.md")
        ),
    )
    t0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    events = []
    for i, (req, resp) in enumerate(pairs):
        if req.strip() and resp.strip():
            events.append(
                RefusalEvent(
                    log_id=f"eq-{i}", event_time=t0, request=req, response=resp, model="m-1"
                )
            )
    old_engine, new_engine = old_local.LocalEngine(), new_local.LocalEngine()
    for start in range(0, len(events), 50):
        batch = events[start : start + 50]
        oj = old_engine.audit_sync(batch, bundle).result.model_dump(mode="json")
        wj = new_engine.audit_sync(batch, bundle).result.model_dump(mode="json")
        check("engine batches (50 events)", oj, wj, batch[0].log_id)
    n["engine events"] = len(events)
    for k, v in n.items():
        print(f"{k:32s} {v}")
    print("MISMATCHES", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
