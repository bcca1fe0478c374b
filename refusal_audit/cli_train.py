"""``refusal-audit train``: rebuild the shipped models from the shared data (and verdicts)."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import typer

from refusal_audit.cli_common import console, fail_usage, settings
from refusal_audit.prefilter_model import CATEGORY_STEM, SHIPPED_STEM

DEFAULT_SHARED_DATA = Path("../shared/data")
MODELS = ("all", "prefilter", "category")


def train(
    shared_data: Path = typer.Option(
        DEFAULT_SHARED_DATA, "--shared-data", help="Folder of the labelled sets (README inside)."
    ),
    model: str = typer.Option(
        "all", "--model", help="Which model to build: all, prefilter or category."
    ),
    output_dir: Path | None = typer.Option(
        None,
        "--output-dir",
        "-o",
        help="Folder for refusal_prefilter.* and category_model.* (.npz, .json, model card "
        ".md); default: <data_dir>/models. Maintainers rebuild the shipped models with "
        "-o refusal_audit/models.",
    ),
    with_verdicts: Path | None = typer.Option(
        None,
        "--with-verdicts",
        help="Also train the category model on the reviewers' verdicts: a file written by "
        "`refusal-audit review labels --out FILE`.",
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
    """Train the refusal pre-filter and the local engine's category model deterministically
    and write each artifact with its model card. Reviewer verdicts (--with-verdicts) join the
    category model's training data, weighted and reported separately on its card."""
    from refusal_audit.training.build import build_artifact
    from refusal_audit.training.build_category import build_category_artifact

    if model not in MODELS:
        raise fail_usage(f"--model must be one of {', '.join(MODELS)}, not {model!r}")
    if not (shared_data / "xstest").is_dir():
        raise fail_usage(f"shared data not found at {shared_data} (expected xstest/ inside)")
    if with_verdicts is not None and not with_verdicts.is_file():
        raise fail_usage(f"--with-verdicts: no such file {with_verdicts}")
    if with_verdicts is not None and model == "prefilter":
        raise fail_usage("--with-verdicts trains the category model: use --model category or all")
    try:
        day = date.fromisoformat(built_on) if built_on else None
    except ValueError as exc:
        raise fail_usage(f"--date: {exc}") from exc
    if output_dir is None:
        output_dir = settings().data_dir / "models"
    if model in ("all", "prefilter"):
        result = build_artifact(
            shared_data, output_dir / SHIPPED_STEM.name, with_folds=folds, every=every, built_on=day
        )
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
