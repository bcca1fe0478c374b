"""Constrained decoding on a real small model: json_schema against json_object, per LLM path.

For each LLM path (the audit engine, the clarification question engine, the circumvention
judge, the calibration variant engine) the script sends the path's FIRST call (the
product's prompt, built by the engine itself) for ``--n`` real refusals, once with
``response_format`` ``json_schema`` (strict; llama.cpp turns it into a grammar) and once
with ``json_object``, and counts the first answers that

- (a) parse: a JSON object (``processors.engines.llm_call.decode_json_object``: not cut off
  at the output cap, not empty, JSON, an object);
- (b) are schema-valid: the path's pydantic contract (audit: ``schemas.wire.to_audit_result``;
  questions: ``QuestionSet``; judge: ``JudgeAnswer``; variants: ``CalibrationOutput`` with
  one variant per style of the spectrum);
- (c) pass every harness check the engine applies before it accepts an answer without a
  retry (audit: ids, taxonomy, clauses, review rules; questions: + the circumvention rules;
  variants: + the safety regression check of every variant; judge: as (b)).

Shares come with Wilson 95% intervals (statsmodels). Inputs, read by path from
../shared/data: audit = one XSTest GPT-4 refusal per call (batch size 1); questions and judge
= CoCoNot refusals (the judge rates the offline question engine's set for each); variants =
XSTest refusals of unsafe prompts with the weapons clause AUP-2.2 of the example bundle.
Each call asks for the path's own output cap (audit 768 = 512 + 256 per event, questions
1024, judge 512, variants 320 + 640 per style = 4,160), temperature unset (the server's
default sampling). On llama.cpp each engine sends ``cache_prompt`` and the audit its
batch-narrowed schema (``schemas.wire.batch_wire_schema``), as the product does.

The server: ``--base-url``/``--model`` (key in ``$REFUSAL_AUDIT_OPENAI_API_KEY``), else
SmolLM2-135M-Instruct started here on llama.cpp (``tests/llm_fixture.py``'s server, 16,384
tokens of context, one slot, ``--threads``). Run::

    .venv/bin/python benchmarks/constrained_decoding.py --n 4 --threads 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import itertools
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import openai
import orjson
from pydantic import ValidationError
from statsmodels.stats.proportion import proportion_confint

from inference.audit_engine import OpenAIEngine
from inference.chat import JsonCaller
from inference.discovery import discover
from inference.judge import OpenAIJudge
from inference.questions import OpenAIQuestionEngine
from inference.variants import OpenAIVariantEngine
from processors.calibration.base import CalibrationContext, spectrum_problems
from processors.clarification.ambiguity import find_ambiguities
from processors.clarification.base import QuestionContext
from processors.clarification.local_questions import LocalQuestionEngine
from processors.engines.llm_call import (
    ChatAnswer,
    ServerKind,
    TokenTally,
    decode_json_object,
)
from refusal_audit.bundles import load_bundles
from refusal_audit.config import Settings
from schemas.calibration import DEFAULT_SPECTRUM, CalibrationOutput
from schemas.clarification import QuestionSet, Route
from schemas.events import RefusalEvent
from schemas.policy import PolicyBundle
from schemas.wire import to_audit_result

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
T0 = datetime(2026, 1, 5, tzinfo=UTC)
MODES = ("json_schema", "json_object")
AUDIT_MAX_TOKENS = 768
"""512 + 256 per event for a batch of one: the cap the engine sizes for one event."""


@dataclass(frozen=True)
class Server:
    """An OpenAI-compatible server: base URL, model id, API key, context per slot."""

    base_url: str
    model: str
    api_key: str
    context_size: int
    kind: ServerKind = "unknown"
    """What ``inference.discovery`` finds (``llama.cpp``: the engines send
    ``cache_prompt`` and the audit's batch-narrowed schema, as in the product)."""


@contextlib.contextmanager
def local_server(args: argparse.Namespace) -> Iterator[Server]:
    """``--base-url`` (with ``--model``, ``--context-size`` and the key from
    ``$REFUSAL_AUDIT_OPENAI_API_KEY``); else ``refusal-audit llm serve smollm2-135m --port 0
    --ctx-size N --threads T`` started for the run (key in ``$REFUSAL_AUDIT_LLM_API_KEY``)
    and stopped with SIGTERM afterwards; before ``llm serve`` exists, the test suite's
    stand-in server (``tests/llm_fixture.serve_local_llm``)."""
    if args.base_url:
        key = os.environ.get("REFUSAL_AUDIT_OPENAI_API_KEY", "unused")
        kind = discover(args.base_url, key, args.model).kind
        yield Server(args.base_url, args.model, key, args.context_size, kind)
        return
    if importlib.util.find_spec("refusal_audit.llm.cli") is None:
        sys.path.insert(0, str(TESTS))
        fixture = importlib.import_module("llm_fixture")
        with fixture.serve_local_llm(context_size=args.context_size, threads=args.threads) as llm:
            yield Server(llm.base_url, llm.model, llm.api_key, llm.context_size, "llama.cpp")
        return
    key = "sk-bench-" + secrets.token_urlsafe(24)
    command = [
        str(Path(sys.executable).with_name("refusal-audit")), "llm", "serve", "smollm2-135m",
        "--port", "0", "--ctx-size", str(args.context_size), "--threads", str(args.threads),
    ]  # fmt: skip
    env = {**os.environ, "REFUSAL_AUDIT_LLM_API_KEY": key}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
    try:
        found: dict[str, str] = {}
        assert proc.stdout is not None
        for line in proc.stdout:
            for label in ("base URL", "model id"):
                if line.startswith(f"{label}: "):
                    found[label] = line.split(": ", 1)[1].strip()
            if line.startswith("export REFUSAL_AUDIT_OPENAI_MODEL="):
                break
        if len(found) < 2:
            raise RuntimeError(f"llm serve did not start (exit {proc.poll()})")
        props = httpx.get(
            found["base URL"].removesuffix("/v1") + "/props",
            headers={"Authorization": f"Bearer {key}"}, timeout=10,
        ).json()  # fmt: skip
        context = int(props["default_generation_settings"]["n_ctx"])
        yield Server(found["base URL"], found["model id"], key, context, "llama.cpp")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def add_server_options(parser: argparse.ArgumentParser) -> None:
    """The options of :func:`local_server`."""
    parser.add_argument("--base-url", help="an OpenAI-compatible server (else start SmolLM2)")
    parser.add_argument("--model", default="smollm2-135m", help="model id (with --base-url)")
    parser.add_argument("--context-size", type=int, default=16384, help="tokens (16384)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1)")


def wilson(k: int, n: int) -> tuple[float, float]:
    """Wilson 95% interval of ``k`` successes in ``n`` (0, 0 when n is 0)."""
    if n == 0:
        return 0.0, 0.0
    low, high = proportion_confint(k, n, alpha=0.05, method="wilson")
    return float(low), float(high)


def share(k: int, n: int) -> str:
    """``k/n = p% [low-high]`` with the Wilson 95% interval."""
    low, high = wilson(k, n)
    return f"{k}/{n} = {100 * k / n:.0f}% [{100 * low:.0f}-{100 * high:.0f}]" if n else "-"


@dataclass
class Tally:
    """First answers of one path and mode: how many parsed, were schema-valid, passed."""

    n: int = 0
    parsed: int = 0
    schema_valid: int = 0
    passed: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    codes: dict[str, int] = field(default_factory=dict)


Verdict = tuple[bool, bool, bool, str]
"""(parsed, schema-valid, passed the harness, failure code or "")."""


@dataclass(frozen=True)
class Case:
    """One first call of a path: the engine (its prompt, schema and cap), the messages, and
    how to judge the answer."""

    engine: JsonCaller
    messages: list[dict[str, str]]
    judge: Callable[[ChatAnswer, dict[str, Any] | None], Verdict]
    schema: dict[str, Any] | None = None
    """The call's output schema when the engine narrows it (the audit on llama.cpp)."""
    max_tokens: int | None = None
    """The call's output cap when the engine sizes it per task (variants: per style)."""


def pydantic_ok(validate: Callable[[bytes], object], data: dict[str, Any]) -> bool:
    """True when ``validate`` accepts the JSON of ``data``."""
    try:
        validate(orjson.dumps(data))
    except (ValidationError, ValueError):
        return False
    return True


def refusals() -> Any:
    """``tests/shared_refusals.py`` (real refusals read by path from ../shared/data)."""
    if str(TESTS) not in sys.path:
        sys.path.insert(0, str(TESTS))
    return importlib.import_module("shared_refusals")


def coconot_rows(n: int) -> list[dict[str, Any]]:
    """The first ``n`` CoCoNot refusals with a response."""
    return list(itertools.islice(refusals().coconot_refusals(), n))


def audit_cases(
    client: openai.AsyncOpenAI, server: Server, bundle: PolicyBundle, n: int
) -> list[Case]:
    """The audit engine's first call for ``n`` XSTest refusals, one per batch."""
    engine = OpenAIEngine(
        client, server.model, max_output_tokens=AUDIT_MAX_TOKENS,
        context_window=server.context_size, server=server.kind,
    )  # fmt: skip

    def judge_for(log_id: str) -> Callable[[ChatAnswer, dict[str, Any] | None], Verdict]:
        def judge(answer: ChatAnswer, data: dict[str, Any] | None) -> Verdict:
            attempt = engine._check(answer, [log_id], bundle, "first")
            valid = data is not None and pydantic_ok(
                lambda b: to_audit_result(orjson.loads(b)), data
            )
            return data is not None, valid, attempt.ok, attempt.code

        return judge

    cases = []
    for row in refusals().xstest_refusals(n):
        event = RefusalEvent(
            log_id=f"xstest-gpt4-{row['id']}", event_time=T0, request=row["prompt"],
            response=row["completion"], model="gpt-4",
        )  # fmt: skip
        messages = engine.prompt.messages(bundle, [event])
        schema = engine._batch_schema([event.log_id], bundle)
        cases.append(Case(engine, messages, judge_for(event.log_id), schema))
    return cases


def clarify_contexts(bundle: PolicyBundle, n: int) -> list[QuestionContext]:
    """Question contexts for the first ``n`` CoCoNot refusals (gray zone, no cited clause)."""
    return [
        QuestionContext(
            r["prompt"],
            r["response"],
            "policy_gray_zone",
            Route.policy_gray_zone,
            bundle,
            tuple(find_ambiguities(r["prompt"])),
        )
        for r in coconot_rows(n)
    ]


def question_cases(
    client: openai.AsyncOpenAI, server: Server, bundle: PolicyBundle, n: int
) -> list[Case]:
    """The question engine's first call for ``n`` CoCoNot refusals."""
    engine = OpenAIQuestionEngine(client, server.model, server=server.kind)

    def judge_for(context: QuestionContext) -> Callable[[ChatAnswer, dict[str, Any] | None],
                                                        Verdict]:  # fmt: skip
        def judge(answer: ChatAnswer, data: dict[str, Any] | None) -> Verdict:
            questions, failure, _ = engine._check(answer, context)
            valid = data is not None and pydantic_ok(QuestionSet.model_validate_json, data)
            return data is not None, valid, questions is not None, failure or ""

        return judge

    return [
        Case(engine, engine.prompt.messages(engine.values(c)), judge_for(c))
        for c in clarify_contexts(bundle, n)
    ]


def judge_cases(
    client: openai.AsyncOpenAI, server: Server, bundle: PolicyBundle, n: int
) -> list[Case]:
    """The judge's first call on the offline question engine's set for the first ``n``
    CoCoNot refusals it writes a set for."""
    engine = OpenAIJudge(client, server.model, server=server.kind)
    local = LocalQuestionEngine()

    def judge(answer: ChatAnswer, data: dict[str, Any] | None) -> Verdict:
        value, code, _ = engine._check(answer)
        return data is not None, value is not None, value is not None, code or ""

    cases: list[Case] = []
    for context in clarify_contexts(bundle, 3 * n):
        questions = local.generate_sync(context).questions
        if questions is not None and len(cases) < n:
            messages = engine.messages(questions, context.request, context.refusal)
            cases.append(Case(engine, messages, judge))
    return cases


def variant_cases(
    client: openai.AsyncOpenAI, server: Server, bundle: PolicyBundle, n: int
) -> list[Case]:
    """The variant engine's first call for ``n`` XSTest refusals of unsafe prompts."""
    engine = OpenAIVariantEngine(client, server.model, server=server.kind)
    allowance = engine.output_tokens_for(len(DEFAULT_SPECTRUM.styles))
    clause = bundle.clause("AUP-2.2")
    assert clause is not None

    def judge_for(context: CalibrationContext) -> Callable[[ChatAnswer, dict[str, Any] | None],
                                                           Verdict]:  # fmt: skip
        def judge(answer: ChatAnswer, data: dict[str, Any] | None) -> Verdict:
            checked = engine._check(answer, context)
            valid = data is not None and pydantic_ok(CalibrationOutput.model_validate_json, data)
            if valid and data is not None:
                output = CalibrationOutput.model_validate_json(orjson.dumps(data))
                valid = not spectrum_problems(output, context.spectrum)
            return data is not None, valid, checked.failure is None, checked.failure or ""

        return judge

    cases = []
    for row in refusals().xstest_refusals(n, contrast=True):
        context = CalibrationContext(
            row["prompt"], row["completion"], clause, bundle, DEFAULT_SPECTRUM
        )
        messages = engine.prompt.messages(engine.values(context))
        cases.append(Case(engine, messages, judge_for(context), max_tokens=allowance))
    return cases


PATHS: dict[str, Callable[[openai.AsyncOpenAI, Server, PolicyBundle, int], list[Case]]] = {
    "judge": judge_cases,
    "questions": question_cases,
    "variants": variant_cases,
    "audit": audit_cases,
}


async def first_answer(case: Case, mode: str) -> tuple[ChatAnswer, int]:
    """The first answer of ``case`` with ``response_format`` ``mode`` and its completion
    tokens."""
    case.engine.response_format = mode  # type: ignore[assignment]
    tally = TokenTally()
    answer = await case.engine.complete(case.messages, tally, case.max_tokens, case.schema)
    return answer, tally.completion_tokens


async def measure(
    server: Server, n: int, paths: list[str], budget: float
) -> dict[tuple[str, str], Tally]:
    """Every path's cases in both modes (modes interleaved per case, so both see the same
    server state); each path gets an equal share of ``budget`` seconds, after which it
    starts no new case. Returns a tally per (path, mode)."""
    client = openai.AsyncOpenAI(base_url=server.base_url, api_key=server.api_key,
                                max_retries=0, timeout=900)  # fmt: skip
    bundle = load_bundles(Settings().policy_bundles)["default"]
    tallies: dict[tuple[str, str], Tally] = {}
    try:
        for path in paths:
            cases = PATHS[path](client, server, bundle, n)
            stop_at = time.perf_counter() + budget / len(paths)
            for i, case in enumerate(cases):
                if time.perf_counter() > stop_at:
                    print(f"  time budget spent: {path} stops after {i} cases", flush=True)
                    break
                for mode in MODES:
                    started = time.perf_counter()
                    answer, tokens = await first_answer(case, mode)
                    data, _, _ = decode_json_object(answer, case.engine.max_output_tokens)
                    parsed, valid, passed, code = case.judge(answer, data)
                    t = tallies.setdefault((path, mode), Tally())
                    t.n += 1
                    t.parsed += parsed
                    t.schema_valid += valid
                    t.passed += passed
                    t.completion_tokens += tokens
                    t.seconds += time.perf_counter() - started
                    if code:
                        t.codes[code] = t.codes.get(code, 0) + 1
                    print(f"  {path} #{i + 1} {mode}: parsed={parsed} valid={valid} "
                          f"passed={passed} {code} ({tokens} tokens, "
                          f"{time.perf_counter() - started:.1f} s)", flush=True)  # fmt: skip
    finally:
        await client.close()
    return tallies


def table(tallies: dict[tuple[str, str], Tally]) -> str:
    """The Markdown table of the tallies."""
    lines = [
        "| path | response_format | first answers | (a) parse as JSON | (b) schema-valid "
        "| (c) pass the harness | mean completion tokens | mean s/answer | failure codes |",
        "| --- | --- | ---: | --- | --- | --- | ---: | ---: | --- |",
    ]
    for (path, mode), t in tallies.items():
        codes = ", ".join(f"{k} {v}" for k, v in sorted(t.codes.items())) or "-"
        lines.append(
            f"| {path} | {mode} | {t.n} | {share(t.parsed, t.n)} | {share(t.schema_valid, t.n)} "
            f"| {share(t.passed, t.n)} | {t.completion_tokens / max(t.n, 1):.0f} "
            f"| {t.seconds / max(t.n, 1):.1f} | {codes} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--n", type=int, default=10, help="first answers per path and mode")
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated paths")
    parser.add_argument(
        "--budget", type=float, default=3600.0, help="s after which no new case starts (3600)"
    )
    add_server_options(parser)
    args = parser.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    unknown = [p for p in paths if p not in PATHS]
    if unknown or args.n < 1:
        parser.error(f"unknown paths {unknown} (choose from {list(PATHS)}) or --n < 1")
    started = time.perf_counter()
    with local_server(args) as server:
        print(f"server {server.base_url} model {server.model} context {server.context_size}")
        tallies = asyncio.run(measure(server, args.n, paths, args.budget))
    print()
    print(table(tallies))
    seconds = time.perf_counter() - started
    print(f"\nUp to {args.n} inputs per path, both modes each; {seconds:.0f} s in all.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
