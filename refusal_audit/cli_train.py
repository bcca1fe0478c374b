"""``refusal-audit train``: rebuild the refusal pre-filter model from the shared data."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import typer

from refusal_audit.cli_common import console, fail_usage
from refusal_audit.prefilter_model import SHIPPED_STEM

DEFAULT_SHARED_DATA = Path("../shared/data")


def train(
    shared_data: Path = typer.Option(
        DEFAULT_SHARED_DATA, "--shared-data", help="Folder of the labelled sets (README inside)."
    ),
    output: Path = typer.Option(
        SHIPPED_STEM,
        "--output",
        "-o",
        help="Artifact stem: writes <stem>.npz, <stem>.json and the model card <stem>.md "
        "(default: the artifact shipped in the package).",
    ),
    folds: bool = typer.Option(
        True, "--folds/--no-folds", help="Run the leave-one-source-out folds for the card."
    ),
    every: int = typer.Option(
        1, "--every", min=1, help="Train on every n-th row of each source (quick builds)."
    ),
    built_on: str | None = typer.Option(
        None, "--date", help="Date written on the model card (YYYY-MM-DD; default today)."
    ),
) -> None:
    """Train the refusal pre-filter deterministically and write the artifact and model card."""
    from refusal_audit.training.build import build_artifact

    if not (shared_data / "xstest").is_dir():
        raise fail_usage(f"shared data not found at {shared_data} (expected xstest/ inside)")
    try:
        day = date.fromisoformat(built_on) if built_on else None
    except ValueError as exc:
        raise fail_usage(f"--date: {exc}") from exc
    output = output.with_suffix("") if output.suffix in {".npz", ".json", ".md"} else output
    result = build_artifact(shared_data, output, with_folds=folds, every=every, built_on=day)
    console.print(f"content hash {result.content_hash}")
    console.print(f"threshold {result.threshold:.2f}")
    for path in (result.npz, result.metadata, result.card):
        console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")
