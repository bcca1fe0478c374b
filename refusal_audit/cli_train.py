"""``refusal-audit train``: rebuild the shipped models from the shared data (and verdicts)."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import typer

from refusal_audit.circumvention_check import CIRCUMVENTION_STEM
from refusal_audit.cli_common import console, fail_usage, settings
from refusal_audit.prefilter_model import CATEGORY_STEM, SHIPPED_STEM
from refusal_audit.training.circumvention import DEV_PATH as CIRCUMVENTION_DEV

DEFAULT_SHARED_DATA = Path("../shared/data")
MODELS = ("all", "prefilter", "category", "circumvention", "cascade")
NO_CIRCUMVENTION_VERDICTS = (
    "reviewer verdicts (`review labels`) are refusal events: they carry no clarification "
    "question sets, so the circumvention model is trained on its corpus only"
)


def train(
    shared_data: Path = typer.Option(
        DEFAULT_SHARED_DATA, "--shared-data", help="Folder of the labelled sets (README inside)."
    ),
    model: str = typer.Option(
        "all",
        "--model",
        help="Which model to build: all, prefilter, category or circumvention (the "
        "clarification circumvention check, from --circumvention-dev; needs no shared data); "
        "or cascade (the refusal cascade's encoder head: needs the fetched int8 MiniLM "
        "encoder and a few minutes; not part of all).",
    ),
    output_dir: Path | None = typer.Option(
        None,
        "--output-dir",
        "-o",
        help="Folder for refusal_prefilter.*, category_model.* and circumvention_check.* "
        "(.npz, .json, model card .md); default: <data_dir>/models. Maintainers rebuild the "
        "shipped models with -o refusal_audit/models.",
    ),
    circumvention_dev: Path = typer.Option(
        CIRCUMVENTION_DEV,
        "--circumvention-dev",
        help="Labelled question sets the circumvention model is trained and "
        "cross-validated on (datasets/circumvention format). Never the held-out file.",
    ),
    with_verdicts: Path | None = typer.Option(
        None,
        "--with-verdicts",
        help="Also train the category model on the reviewers' verdicts: a file written by "
        "`refusal-audit review labels --out FILE`. It changes neither the pre-filter nor the "
        "circumvention model: those verdicts are refusal events and carry no clarification "
        "question sets (the clarification review's verdicts are not exported yet).",
    ),
    verdict_weight: float = typer.Option(
        2.0, "--verdict-weight", min=0.0, help="Weight of one verdict row (shared data: 1)."
    ),
    folds: bool = typer.Option(
        True, "--folds/--no-folds", help="Run the held-out validation for the model cards."
    ),
    every: int = typer.Option(
        1, "--every", min=1, help="Train on every n-th row of each source (quick builds)."
    ),
    built_on: str | None = typer.Option(
        None, "--date", help="Date written on the model cards (YYYY-MM-DD; default today)."
    ),
) -> None:
    """Train the refusal pre-filter, the local engine's category model and the clarification
    circumvention model deterministically and write each artifact with its model card.
    Reviewer verdicts (--with-verdicts) join the category model's training data, weighted and
    reported separately on its card; they carry nothing for the circumvention model."""
    from refusal_audit.training.labels import load_verdict_labels

    if model not in MODELS:
        raise fail_usage(f"--model must be one of {', '.join(MODELS)}, not {model!r}")
    if model != "circumvention" and not (shared_data / "xstest").is_dir():
        raise fail_usage(f"shared data not found at {shared_data} (expected xstest/ inside)")
    if model in ("all", "circumvention"):
        _check_circumvention_dev(circumvention_dev)
    if with_verdicts is not None and not with_verdicts.is_file():
        raise fail_usage(f"--with-verdicts: no such file {with_verdicts}")
    if with_verdicts is not None and model in ("prefilter", "circumvention"):
        raise fail_usage(
            "--with-verdicts trains the category model only (for the circumvention model: "
            f"{NO_CIRCUMVENTION_VERDICTS}): use --model category or all"
        )
    try:
        day = date.fromisoformat(built_on) if built_on else None
    except ValueError as exc:
        raise fail_usage(f"--date: {exc}") from exc
    if with_verdicts is not None:  # before any model is built (--model all)
        try:
            if not load_verdict_labels(with_verdicts):
                raise fail_usage(f"no verdicts in {with_verdicts}")
        except (ValueError, OSError) as exc:
            raise fail_usage(f"--with-verdicts: {exc}") from exc
    if output_dir is None:
        output_dir = settings().data_dir / "models"
    _writable(output_dir)
    try:
        if model == "cascade":
            _build_cascade(shared_data, output_dir, every)
        elif model != "circumvention":
            _build(
                model, shared_data, output_dir, folds, every, day, with_verdicts, verdict_weight
            )  # fmt: skip
        if model in ("all", "circumvention"):
            _build_circumvention(circumvention_dev, output_dir, day, with_verdicts is not None)
    except OSError as exc:  # the folder went away or filled up while writing
        raise fail_usage(f"cannot write the model to {output_dir}: {_reason(exc)}") from exc


def _reason(exc: OSError) -> str:
    """An ``OSError`` in one line (its text and the file it names)."""
    name = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{name}"


def _writable(output_dir: Path) -> None:
    """Create ``output_dir`` (and its parents) and check it takes files. Raises the usage
    ``typer.Exit`` with a one-line message otherwise."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise fail_usage(f"-o: cannot create the folder {output_dir}: {_reason(exc)}") from exc
    if not os.access(output_dir, os.W_OK | os.X_OK):
        raise fail_usage(f"-o: cannot write to the folder {output_dir}: permission denied")


def _build(
    model: str,
    shared_data: Path,
    output_dir: Path,
    folds: bool,
    every: int,
    day: date | None,
    with_verdicts: Path | None,
    verdict_weight: float,
) -> None:
    """Build the chosen models into ``output_dir`` and report each file written. Raises the
    usage ``typer.Exit`` for data that cannot train a model, ``OSError`` for a failed write."""
    from refusal_audit.training.build import build_artifact
    from refusal_audit.training.build_category import build_category_artifact

    if model in ("all", "prefilter"):
        try:
            result = build_artifact(
                shared_data, output_dir / SHIPPED_STEM.name, with_folds=folds, every=every,
                built_on=day,
            )  # fmt: skip
        except ValueError as exc:
            raise fail_usage(str(exc)) from exc
        console.print(f"refusal pre-filter: content hash {result.content_hash}")
        console.print(f"threshold {result.threshold:.2f}")
        for path in (result.npz, result.metadata, result.card):
            console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")
        _use(output_dir, SHIPPED_STEM, "PREFILTER_MODEL")
    if model in ("all", "category"):
        try:
            built = build_category_artifact(
                shared_data,
                output_dir / CATEGORY_STEM.name,
                with_folds=folds,
                every=every,
                built_on=day,
                verdicts=with_verdicts,
                verdict_weight=verdict_weight,
            )
        except ValueError as exc:
            raise fail_usage(str(exc)) from exc
        console.print(f"category model: content hash {built.content_hash}")
        for path in (built.npz, built.metadata, built.card):
            console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")
        _use(output_dir, CATEGORY_STEM, "LOCAL_CATEGORY_MODEL")


def _check_circumvention_dev(path: Path) -> None:
    """Refuse a missing dev file or the frozen held-out file (usage ``typer.Exit``)."""
    if not path.is_file():
        raise fail_usage(f"--circumvention-dev: no such file {path}")
    if path.name == "heldout.jsonl":
        raise fail_usage(
            "--circumvention-dev: the held-out file is never trained on "
            "(datasets/circumvention/README.md); use dev.jsonl"
        )


def _build_circumvention(dev: Path, output_dir: Path, day: date | None, verdicts: bool) -> None:
    """Build the circumvention model from ``dev`` into ``output_dir`` (the packaged build:
    ``refusal_audit.training.circumvention.build``) and report the files. Raises the usage
    ``typer.Exit`` for a corpus that cannot train it, ``OSError`` for a failed write."""
    from refusal_audit.training.circumvention import build

    try:
        built = build(stem=output_dir / CIRCUMVENTION_STEM.name, dev=dev, built_on=day)
    except (ValueError, KeyError, TypeError) as exc:
        raise fail_usage(f"--circumvention-dev {dev}: cannot train on it: {exc!r}") from exc
    overall = built.cv["overall"]
    console.print(f"circumvention model: content hash {built.model.content_hash}")
    console.print(
        f"leave-one-domain-out on {dev.name}: precision {overall['precision']['rate']:.3f}, "
        f"recall {overall['recall']['rate']:.3f} at threshold {built.model.threshold:.3f}"
    )
    if verdicts:
        console.print(f"circumvention model: {NO_CIRCUMVENTION_VERDICTS}")
    for path in (built.npz, built.metadata, built.card):
        console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    stem = output_dir / CIRCUMVENTION_STEM.name
    if stem.resolve() != CIRCUMVENTION_STEM.resolve():
        console.print(
            "use it with REFUSAL_AUDIT_CLARIFY_CIRCUMVENTION_CHECK=trained "
            f"REFUSAL_AUDIT_CLARIFY_CIRCUMVENTION_MODEL_PATH={stem}"
        )


def _build_cascade(shared_data: Path, output_dir: Path, every: int) -> None:
    """Build the refusal cascade's encoder head into ``output_dir`` and report the files.
    Raises the usage ``typer.Exit`` when the encoder is not installed or the data cannot
    train it, ``OSError`` for a failed write."""
    from refusal_audit.encoders.catalog import EncoderError
    from refusal_audit.encoders.runtime import OnnxEncoder
    from refusal_audit.prefilter_cascade import HEAD_STEM
    from refusal_audit.training.refusal_cascade import ENCODER, build_head

    try:
        encoder = OnnxEncoder.load(ENCODER, settings())
    except EncoderError as exc:
        raise fail_usage(f"the cascade head needs its encoder: {exc}") from exc
    stem = output_dir / HEAD_STEM.name
    try:
        built = build_head(shared_data, stem, encoder, every=every)
    except (ValueError, KeyError, FileNotFoundError) as exc:
        raise fail_usage(f"cannot train the cascade head on {shared_data}: {exc}") from exc
    console.print(f"cascade head: content hash {built.content_hash} ({built.rows} rows)")
    for suffix in (".npz", ".json", ".md"):
        path = stem.with_suffix(suffix)
        console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    if stem.resolve() != HEAD_STEM.resolve():
        console.print(
            "use it with REFUSAL_AUDIT_PREFILTER_CASCADE_BAND='[0.4, 0.6]' "
            f"REFUSAL_AUDIT_PREFILTER_CASCADE_HEAD_PATH={stem}"
        )


def _use(output_dir: Path, shipped: Path, setting: str) -> None:
    """Tell how to run with the model just written (unless it replaced the shipped one)."""
    stem = output_dir / shipped.name
    if stem.resolve() == shipped.resolve():
        console.print(
            "rebuilt the shipped model: refresh the generated tables with "
            "`python -m refusal_audit.training.tables`"
        )
        return
    console.print(
        f"use it with REFUSAL_AUDIT_{setting}=trained REFUSAL_AUDIT_{setting}_PATH={stem}"
    )
