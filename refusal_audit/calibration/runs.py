"""Refusal-style calibration at the application layer: files, engines, the team's suite.

- :func:`read_requests`: calibration requests from a JSONL file (one
  ``schemas.calibration.CalibrationRequest`` per line), redacted like the audit's input
  (``redaction_enabled``, ``redaction_kinds``) before any engine sees them;
- :func:`build_variant_engine`: the ``local`` or ``openai`` variant engine of the settings
  (``calibrate_engine``, ``calibrate_model`` and the ``openai_*`` call settings);
- :class:`CommandSuite`: a team's own regression suite as a command
  (``calibrate_suite_command``), one process per variant, with a timeout;
- :func:`run_calibrations`: every request through ``processors.calibration.run.calibrate``
  and the suite;
- :func:`read_events` / :func:`read_plan` / :func:`plan_from_events`: the A/B inputs.

The suite interface: a command (:class:`CommandSuite`, ``calibrate_suite_command``) is
started without a shell, gets one ``schemas.calibration.SuiteInput`` JSON object on stdin and
must print one ``schemas.calibration.SuiteVerdict`` JSON object (``{"verdict": "pass"|"fail",
"reasons": [...], "detail": "..."}``) on stdout and exit 0, within
``calibrate_suite_timeout_seconds``; an HTTP endpoint (:class:`HttpSuite`,
``calibrate_suite_url``) gets the same object as a POST body and answers with the same verdict
and status 200. Anything else (a timeout, another exit status or HTTP status, an answer that
is not a verdict) fails the variant closed with ``suite_error``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import httpx
import orjson
from pydantic import ValidationError

from processors.calibration.ab import EventError, parse_event
from processors.calibration.base import CalibrationInputError, VariantEngine
from processors.calibration.local_variants import LocalVariantEngine
from processors.calibration.run import apply_suite, calibrate
from processors.engines.local import LocalEngine
from processors.redaction import Redactor
from refusal_audit.bundles import load_bundles
from refusal_audit.config import ConfigError, Settings
from schemas.calibration import (
    ABEvent,
    ArmPlan,
    CalibrationRequest,
    CalibrationRun,
    ExperimentPlan,
    ExposureEvent,
    Spectrum,
    SuiteInput,
    SuiteVerdict,
)
from schemas.policy import PolicyBundle

MAX_SUITE_OUTPUT_BYTES = 64 * 1024
"""A suite's answer longer than this is not read (it fails the variant)."""


class InputFileError(ValueError):
    """A line of an input file that is not a valid contract object (line number, fields)."""


def _fields(exc: ValidationError) -> str:
    return ", ".join(sorted({".".join(str(p) for p in e["loc"]) or "(line)" for e in exc.errors()}))


def not_json(line: bytes) -> str | None:
    """Why ``line`` is not JSON, in the parser's words (its position in the line, never the
    line's text), or None when it parses."""
    try:
        orjson.loads(line.rstrip())  # positions within the line, not its newline
    except orjson.JSONDecodeError as exc:
        return f"not JSON: {exc}"
    return None


def read_requests(path: Path, redactor: Redactor | None = None) -> list[CalibrationRequest]:
    """The calibration requests of a JSONL file (blank lines skipped), with ``request`` and
    ``refusal`` redacted by ``redactor`` when given. Raises ``OSError`` and
    :class:`InputFileError` (line number and failing fields, never values)."""
    out: list[CalibrationRequest] = []
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                request = CalibrationRequest.model_validate_json(line)
            except ValidationError as exc:
                reason = not_json(line) or f"invalid request: {_fields(exc)}"
                raise InputFileError(f"{path}:{lineno}: {reason}") from None
            if redactor is not None:
                request = request.model_copy(
                    update={
                        "refusal": redactor.redact(request.refusal).text,
                        "request": (
                            redactor.redact(request.request).text
                            if request.request is not None
                            else None
                        ),
                    }
                )
            out.append(request)
    return out


def read_spectrum(path: Path) -> Spectrum:
    """A spectrum from a file: a JSON ``Spectrum`` object, or Markdown holding a
    ``calibration-spectrum`` block (``processors.calibration.spectrum``). Raises
    ``OSError`` and ``ValueError``."""
    from processors.calibration.spectrum import parse_spectrum

    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("{"):
        try:
            return Spectrum.model_validate_json(text)
        except ValidationError as exc:
            raise ValueError(f"{path}: invalid spectrum: {_fields(exc)}") from None
    spectrum = parse_spectrum(text)
    if spectrum is None:
        raise ValueError(f"{path}: no calibration-spectrum block")
    return spectrum.model_copy(update={"source": "request"})


def build_variant_engine(cfg: Settings, name: str | None = None) -> VariantEngine:
    """The variant engine ``name`` (default ``calibrate_engine``, else as ``engine``).
    Raises ``ConfigError`` for an unknown engine or an openai engine without a key or URL."""
    chosen = name or cfg.calibrate_engine or cfg.resolved_engine
    if chosen == "local":
        return LocalVariantEngine()
    if chosen == "openai":
        from inference.variants import OpenAIVariantEngine
        from refusal_audit.audit.engine_setup import llm_call_options, openai_client

        model = cfg.calibrate_model or cfg.openai_model
        return OpenAIVariantEngine(openai_client(cfg), model, **llm_call_options(cfg, model))
    raise ConfigError(f"unknown variant engine {chosen!r} (available: local, openai)")


@dataclass(frozen=True)
class CommandSuite:
    """A team's suite as a command (module docstring): ``argv`` (no shell), ``timeout``
    seconds per variant."""

    argv: Sequence[str]
    timeout: float

    def check(self, suite_input: SuiteInput) -> tuple[SuiteVerdict | None, str | None]:
        """Run the command on one variant: ``(verdict, None)``, or ``(None, error)`` when
        it timed out, exited non-zero, could not start or printed no valid verdict."""
        try:
            done = subprocess.run(
                list(self.argv),
                input=suite_input.model_dump_json().encode("utf-8"),
                capture_output=True,
                timeout=self.timeout,
                check=False,
                env={**os.environ, "REFUSAL_AUDIT_SUITE": "1"},
            )
        except subprocess.TimeoutExpired:
            return None, f"suite command timed out after {self.timeout:g} s"
        except OSError as exc:
            return None, f"suite command could not start: {exc.strerror or exc}"
        if done.returncode != 0:
            tail = done.stderr.decode("utf-8", "replace").strip()[-200:]
            return None, f"suite command exited {done.returncode}: {tail}"
        return _verdict(done.stdout)


def _verdict(body: bytes) -> tuple[SuiteVerdict | None, str | None]:
    out = body.strip()
    if len(out) > MAX_SUITE_OUTPUT_BYTES:
        return None, "suite answer too long"
    try:
        return SuiteVerdict.model_validate_json(out), None
    except ValidationError as exc:
        return None, f"suite answer is not a verdict: {_fields(exc)}"


@dataclass(frozen=True)
class HttpSuite:
    """A team's suite as an HTTP endpoint (module docstring): ``url``, ``timeout`` seconds
    per variant, an optional bearer ``token`` (never logged)."""

    url: str
    timeout: float
    token: str | None = field(default=None, repr=False)

    def check(self, suite_input: SuiteInput) -> tuple[SuiteVerdict | None, str | None]:
        """POST one variant: ``(verdict, None)``, or ``(None, error)`` when the endpoint
        timed out, could not be reached, answered another status than 200, or no verdict."""
        headers = {"content-type": "application/json", "user-agent": "refusal-audit-suite"}
        if self.token:
            headers["authorization"] = f"Bearer {self.token}"
        try:
            answer = httpx.post(
                self.url, content=suite_input.model_dump_json().encode("utf-8"),
                headers=headers, timeout=self.timeout, follow_redirects=False,
            )  # fmt: skip
        except httpx.TimeoutException:
            return None, f"suite endpoint timed out after {self.timeout:g} s"
        except httpx.HTTPError as exc:
            return None, f"suite endpoint unreachable: {type(exc).__name__}"
        if answer.status_code != 200:
            return None, f"suite endpoint answered HTTP {answer.status_code}"
        return _verdict(answer.content)


Suite = CommandSuite | HttpSuite
"""A team's regression suite: a command or an HTTP endpoint, with the same JSON in and out."""


def build_suite(cfg: Settings) -> Suite | None:
    """The configured suite (``calibrate_suite_command`` or ``calibrate_suite_url``), or None."""
    if cfg.calibrate_suite_url:
        token = cfg.calibrate_suite_token
        return HttpSuite(
            cfg.calibrate_suite_url, cfg.calibrate_suite_timeout_seconds,
            token.get_secret_value() if token is not None else None,
        )  # fmt: skip
    if not cfg.calibrate_suite_command:
        return None
    return CommandSuite(tuple(cfg.calibrate_suite_command), cfg.calibrate_suite_timeout_seconds)


def run_with_suite(
    run: CalibrationRun,
    bundle: PolicyBundle,
    request: CalibrationRequest,
    suite: Suite | None,
) -> CalibrationRun:
    """``run`` with the suite's verdict on each variant (unchanged without a suite or
    variants)."""
    if suite is None or run.output is None or not run.validations:
        return run
    clause = bundle.clause(run.clause_id)
    answers = []
    for variant in run.output.variants:
        style = run.spectrum.get(variant.style)
        assert style is not None and clause is not None
        answers.append(
            suite.check(
                SuiteInput(
                    calibration_run_id=run.calibration_run_id,
                    policy_bundle=run.policy_bundle,
                    clause_id=run.clause_id,
                    clause_title=clause.title,
                    style=variant.style,
                    base_style=style.base,
                    response_text=variant.response_text,
                    refusal=run.refusal,
                    request=request.request,
                )
            )
        )
    return apply_suite(run, answers)


def new_run_id() -> str:
    """A new calibration run id: ``cal-`` and 32 hex digits (uuid4)."""
    return f"cal-{uuid.uuid4().hex}"


def run_calibrations(
    cfg: Settings,
    requests: Sequence[CalibrationRequest],
    engine_name: str | None = None,
    *,
    started_by: str | None = None,
    spectrum: Spectrum | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    run_id: Callable[[], str] = new_run_id,
    starter_verified_by: Literal["password", "token"] | None = None,
) -> list[CalibrationRun]:
    """Calibrate every request with the configured bundles, variant engine and suite.
    ``started_by``: the runs' starter (None: each request's ``requested_by``);
    ``starter_verified_by``: how the caller verified that account (``calibrate run``:
    ``calibration.starter``), recorded on every run for the approval gate. Raises
    ``ConfigError`` (engine, bundles) and ``CalibrationInputError`` (an unknown bundle or
    clause: nothing is run then)."""
    bundles = load_bundles(cfg.policy_bundles, cfg.data_dir)
    engine = build_variant_engine(cfg, engine_name)
    suite = build_suite(cfg)
    auditor = LocalEngine()
    for request in requests:  # every input checked before any engine call
        if request.policy_bundle not in bundles:
            raise CalibrationInputError(f"unknown policy bundle {request.policy_bundle!r}")
        if bundles[request.policy_bundle].clause(request.clause_id) is None:
            raise CalibrationInputError(
                f"clause {request.clause_id!r} is not in bundle {request.policy_bundle!r}"
            )

    async def go() -> list[CalibrationRun]:
        from refusal_audit.audit.engine_setup import close_engine

        try:
            runs = []
            for request in requests:
                run = await calibrate(
                    request, bundles, engine, run_id=run_id(), created_at=clock(),
                    started_by=started_by, spectrum=spectrum, auditor=auditor,
                )  # fmt: skip
                runs.append(run)
            return runs
        finally:
            await close_engine(engine)

    runs = asyncio.run(go())
    if starter_verified_by is not None:
        runs = [r.model_copy(update={"starter_verified_by": starter_verified_by}) for r in runs]
    return [
        run_with_suite(run, bundles[req.policy_bundle], req, suite)
        for run, req in zip(runs, requests, strict=True)
    ]


# -- A/B inputs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class BadLine:
    """A line of an events file that is not an event: its number and why (fields only)."""

    line: int
    reason: str


def read_events(path: Path) -> tuple[list[ABEvent], list[BadLine]]:
    """The product events of a JSONL file and the lines that are not valid events (kept
    with their reasons, the JSON parser's message for a line that is not JSON: nothing is
    dropped silently). Raises ``OSError``."""
    events: list[ABEvent] = []
    bad: list[BadLine] = []
    with path.open("rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                events.append(parse_event(line))
            except EventError as exc:
                bad.append(BadLine(lineno, not_json(line) or str(exc)))
    return events, bad


def read_plan(path: Path) -> ExperimentPlan:
    """An ``ExperimentPlan`` JSON file. Raises ``OSError`` and ``ValueError``."""
    try:
        return ExperimentPlan.model_validate_json(path.read_bytes())
    except ValidationError as exc:
        raise ValueError(f"{path}: invalid experiment plan: {_fields(exc)}") from None


def plan_from_events(
    events: Sequence[ABEvent], control: str = "control", **settings: Any
) -> ExperimentPlan:
    """A plan for events without one: the experiment and arms seen in the exposures, equal
    weights, ``control`` as the control arm; ``settings`` override the test defaults.
    Raises ``ValueError`` when the events hold several experiments, fewer than two arms, or
    no arm ``control``."""
    experiments = sorted({e.experiment_id for e in events})
    if len(experiments) != 1:
        raise ValueError(f"the events hold {len(experiments)} experiments: give --plan")
    arms = sorted({e.arm_id for e in events if isinstance(e, ExposureEvent)})
    if control not in arms:
        raise ValueError(f"no exposure of the control arm {control!r} (arms: {arms})")
    data: dict[str, Any] = {
        "experiment_id": experiments[0],
        "control_arm": control,
        "arms": [ArmPlan(arm_id=a, weight=1.0) for a in arms],
        **settings,
    }
    try:
        return ExperimentPlan.model_validate(data)
    except ValidationError as exc:
        raise ValueError(f"cannot make a plan from the events: {_fields(exc)}") from None


def write_jsonl(path: Path, items: Sequence[Any]) -> None:
    """Write pydantic models as JSON lines (folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        for item in items:
            fh.write(item.model_dump_json().encode("utf-8") + b"\n")


def dumps(data: Any) -> str:
    """Indented JSON text."""
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
