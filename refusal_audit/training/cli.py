"""``refusal-audit train``: rebuild the shipped models from the shared data (and verdicts)."""

from __future__ import annotations

import os
from datetime import date
from pathlib import Path

import typer

from refusal_audit.audit.prefilter_model import CATEGORY_STEM, SHIPPED_STEM
from refusal_audit.clarification.circumvention_check import CIRCUMVENTION_STEM
from refusal_audit.cli_common import console, fail_usage, settings
from refusal_audit.training.circumvention_corpus import DEV_PATH as CIRCUMVENTION_DEV
from refusal_audit.training.verdict_files import check_verdict_weight, heldout_sets_in

DEFAULT_SHARED_DATA = Path("../shared/data")
MODELS = ("all", "prefilter", "category", "circumvention", "cascade")
NO_CASCADE_VERDICTS = (
    "the refusal cascade head cannot learn from review verdicts: they judge the category and "
    "over-refusal of events that are refusals, and no verdict says an event was not a refusal"
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
        "encoder and a few minutes; not part of all; reviewer verdicts cannot feed it).",
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
        "cross-validated on (datasets/circumvention format). Never the held-out file: a file "
        "holding any held-out set (by id, or the same request with its questions in any "
        "order, case, spacing or edge punctuation, or a subset of them) is refused.",
    ),
    with_verdicts: list[Path] | None = typer.Option(
        None,
        "--with-verdicts",
        help="Also train on the reviewers' verdicts (repeatable, one file of each kind; the "
        "kind is read from the lines): a `refusal-audit review labels --out FILE` file "
        "(reviewed refusal events) trains the category model; a `refusal-audit review "
        "clarification-labels --out FILE` file (reviewed question sets, `reject` when at "
        "least half of the reviewers held the questions not neutral) trains the "
        "circumvention model. Neither feeds the pre-filter or the cascade head.",
    ),
    verdict_weight: float = typer.Option(
        2.0,
        "--verdict-weight",
        help="Weight of one verdict, a finite number from 0 to 1000: a category-model row (a "
        "shared-data row: 1) or a circumvention question set (a dev set: 1; the classes stay "
        "balanced; the verdict sets join only the final refit, never the cross-validation, "
        "the choice of C and threshold, or the standardisation; weight 0 gives the model "
        "without verdicts).",
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
    Reviewer verdicts (--with-verdicts) join the category model's training data (`review
    labels`) or the circumvention model's (`review clarification-labels`), weighted and
    reported separately on its card; the cross-validated figures stay the dev corpus's."""
    verdict_weight = _check_inputs(model, verdict_weight, shared_data, circumvention_dev)
    review_file, sets_file = _verdict_files(with_verdicts or [], model, circumvention_dev)
    day = _card_date(built_on)
    if output_dir is None:
        output_dir = settings().data_dir / "models"
    _writable(output_dir)
    try:
        if model == "cascade":
            _build_cascade(shared_data, output_dir, every)
        elif model != "circumvention":
            _build(
                model, shared_data, output_dir, folds, every, day, review_file, verdict_weight
            )  # fmt: skip
        if model in ("all", "circumvention"):
            _build_circumvention(circumvention_dev, output_dir, day, sets_file, verdict_weight)
    except OSError as exc:  # the folder went away or filled up while writing
        raise fail_usage(f"cannot write the model to {output_dir}: {_reason(exc)}") from exc


def _check_inputs(
    model: str, verdict_weight: float, shared_data: Path, circumvention_dev: Path
) -> float:
    """Check ``train``'s model name, verdict weight (returned, checked) and the data the
    model needs; raises ``typer.Exit`` (usage, 2) for the first that is wrong."""
    if model not in MODELS:
        raise fail_usage(f"--model must be one of {', '.join(MODELS)}, not {model!r}")
    try:
        verdict_weight = check_verdict_weight(verdict_weight)
    except ValueError as exc:
        raise fail_usage(f"--verdict-weight: {exc}") from exc
    if model != "circumvention" and not (shared_data / "xstest").is_dir():
        raise fail_usage(f"shared data not found at {shared_data} (expected xstest/ inside)")
    if model in ("all", "circumvention"):
        _check_circumvention_dev(circumvention_dev)
    return verdict_weight


def _card_date(built_on: str | None) -> date | None:
    """The ``--date`` for the model cards (None: today); raises ``typer.Exit`` (usage, 2)."""
    try:
        return date.fromisoformat(built_on) if built_on else None
    except ValueError as exc:
        raise fail_usage(f"--date: {exc}") from exc


def _verdict_files(paths: list[Path], model: str, dev: Path) -> tuple[Path | None, Path | None]:
    """The ``review labels`` file and the ``review clarification-labels`` file among
    ``paths``, each read through (a bad line is refused before any model is built). Raises
    the usage ``typer.Exit`` for a missing, empty, mixed or malformed file, two files of one
    kind, a file for a model that ``model`` does not build, or question sets of the held-out
    file or of the ``dev`` corpus."""
    from refusal_audit.training.labels import load_verdict_labels
    from refusal_audit.training.verdict_files import (
        CLARIFICATION_LABELS,
        REVIEW_LABELS,
        load_verdict_sets,
        verdict_file_kind,
    )

    if paths and model == "cascade":
        raise fail_usage(f"--with-verdicts: {NO_CASCADE_VERDICTS}")
    if paths and model == "prefilter":
        raise fail_usage("--with-verdicts: the pre-filter does not learn from review verdicts")
    found: dict[str, Path] = {}
    for path in paths:
        if not path.is_file():
            raise fail_usage(f"--with-verdicts: no such file {path}")
        try:
            kind = verdict_file_kind(path)
            if kind == REVIEW_LABELS:
                load_verdict_labels(path)
            else:
                load_verdict_sets(path, dev=dev)
        except (ValueError, OSError) as exc:
            raise fail_usage(f"--with-verdicts: {exc}") from exc
        if kind in found:
            raise fail_usage(
                f"--with-verdicts: {found[kind]} and {path} are both `{kind}` files: give one"
            )
        found[kind] = path
    wrong = {"category": CLARIFICATION_LABELS, "circumvention": REVIEW_LABELS}.get(model)
    if wrong in found:
        trains = "circumvention" if wrong == CLARIFICATION_LABELS else "category"
        raise fail_usage(
            f"--with-verdicts: {found[wrong]} is a `refusal-audit {wrong}` file: it trains the "
            f"{trains} model, not the {model} model (use --model {trains} or all)"
        )
    return found.get(REVIEW_LABELS), found.get(CLARIFICATION_LABELS)


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
    """Refuse a missing dev file, the frozen held-out file, or any file holding one of its
    sets (a copy, dev and held-out joined, a set reformatted: ``heldout_sets_in``), or a
    file that cannot be read (usage ``typer.Exit``)."""
    if not path.is_file():
        raise fail_usage(f"--circumvention-dev: no such file {path}")
    if path.name == "heldout.jsonl":
        raise fail_usage(
            "--circumvention-dev: the held-out file is never trained on "
            "(datasets/circumvention/README.md); use dev.jsonl"
        )
    try:
        heldout_sets_in(path)
    except (ValueError, OSError) as exc:
        raise fail_usage(f"--circumvention-dev: {exc}") from exc


def _build_circumvention(
    dev: Path, output_dir: Path, day: date | None, verdicts: Path | None, weight: float
) -> None:
    """Build the circumvention model from ``dev`` (and the reviewers' sets of ``verdicts``,
    weighted ``weight``) into ``output_dir`` (the packaged build:
    ``refusal_audit.training.circumvention.build``) and report the files. Raises the usage
    ``typer.Exit`` for a corpus that cannot train it, ``OSError`` for a failed write."""
    from refusal_audit.training.circumvention import build

    try:
        built = build(stem=output_dir / CIRCUMVENTION_STEM.name, dev=dev, built_on=day,
                      verdicts=verdicts, verdict_weight=weight)  # fmt: skip
    except (ValueError, KeyError, TypeError) as exc:
        raise fail_usage(f"--circumvention-dev {dev}: cannot train on it: {exc!r}") from exc
    overall = built.cv["overall"]
    console.print(f"circumvention model: content hash {built.model.content_hash}")
    console.print(
        f"leave-one-domain-out on {dev.name}: precision {overall['precision']['rate']:.3f}, "
        f"recall {overall['recall']['rate']:.3f} at threshold {built.model.threshold:.3f}"
    )
    _report_verdict_sets(built.metadata)
    for path in (built.npz, built.metadata, built.card):
        console.print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    stem = output_dir / CIRCUMVENTION_STEM.name
    if stem.resolve() != CIRCUMVENTION_STEM.resolve():
        console.print(
            "use it with REFUSAL_AUDIT_CLARIFY_CIRCUMVENTION_CHECK=trained "
            f"REFUSAL_AUDIT_CLARIFY_CIRCUMVENTION_MODEL_PATH={stem}"
        )


def _report_verdict_sets(metadata: Path) -> None:
    """Print what the reviewers' sets in the metadata at ``metadata`` were (or that there
    were none)."""
    import json

    v = json.loads(metadata.read_text(encoding="utf-8")).get("verdicts")
    if not v:
        console.print(
            "circumvention model: no reviewer verdicts (`refusal-audit review "
            "clarification-labels --out FILE`, then --with-verdicts FILE)"
        )
        return
    fold = v["own_fold"]
    rate = {k: "n/a" if fold[k]["rate"] is None else f"{fold[k]['rate']:.3f}"
            for k in ("precision", "recall")}  # fmt: skip
    console.print(
        f"circumvention model: {v['sets']} reviewer verdict sets from {v['file']} "
        f"({v['labels']['acceptable']} acceptable, {v['labels']['reject']} reject), weight "
        f"{v['weight']:g}; in the final refit only (the figures, C, threshold and "
        "standardisation above are dev's); the dev-only model "
        f"on them: precision {rate['precision']}, recall {rate['recall']}"
    )


def _build_cascade(shared_data: Path, output_dir: Path, every: int) -> None:
    """Build the refusal cascade's encoder head into ``output_dir`` and report the files.
    Raises the usage ``typer.Exit`` when the encoder is not installed or the data cannot
    train it, ``OSError`` for a failed write."""
    from refusal_audit.audit.prefilter_cascade import HEAD_STEM
    from refusal_audit.encoders.catalog import EncoderError
    from refusal_audit.encoders.runtime import OnnxEncoder
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
            "use it with REFUSAL_AUDIT_PREFILTER_CASCADE_BAND='[0.3, 0.7]' "
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
