"""The trained models' files: reading and writing their ``.npz``/``.json`` artifacts.

Moved out of ``processors/`` and the application (issue 26): the models themselves (features,
arrays, scoring, the content hash and the checks of what was read) stay pure in
``processors.refusal_model``, ``processors.category_model``, ``processors.refusal_cascade``
and ``processors.clarification.circumvention_model``; this module opens the files.

Every artifact is ``<stem>.npz`` (arrays only, read with ``allow_pickle=False``) and
``<stem>.json`` (spec, content hash, training summary); the model card ``<stem>.md`` is
written by the training commands (``refusal_audit.training``). A load verifies the content
hash and raises ``processors.refusal_model.ModelArtifactError`` naming the file and the
fault (the circumvention model: see :func:`load_circumvention_model`).

- :func:`read_artifact` / :func:`write_artifact`: the two files of any artifact;
- :func:`load_refusal_model` / :func:`save_refusal_model`: the refusal pre-filter;
- :func:`load_category_model` / :func:`save_category_model`: the local engine's category model;
- :func:`load_head` / :func:`save_head`: the refusal cascade's encoder head;
- :func:`load_circumvention_model` / :func:`write_circumvention_model`: the trained
  circumvention check.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from processors import category_model, refusal_model
from processors.category_model import CategoryModel, Head
from processors.clarification.circumvention_model import CircumventionModel
from processors.clarification.circumvention_model import (
    model_from_arrays as circumvention_from_arrays,
)
from processors.refusal_cascade import HEAD_FORMAT_VERSION, EncoderHead, head_spec, head_width
from processors.refusal_model import (
    FloatArray,
    ModelArtifactError,
    RefusalModel,
    artifact_paths,
    check_hash,
    content_hash,
)

_HEAD = "refusal cascade head"


def read_artifact(stem: Path, what: str) -> tuple[dict[str, Any], dict[str, np.ndarray[Any, Any]]]:
    """The metadata (a JSON object with a ``spec`` object) and the arrays of the artifact
    ``stem``.json / ``stem``.npz, read without pickle. ``what`` names the model in errors.

    Raises :class:`ModelArtifactError` (with the path and what is wrong) when a file is
    missing or unreadable or the metadata is not the expected JSON.
    """
    npz_path, json_path = artifact_paths(stem)
    try:
        meta = json.loads(json_path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ModelArtifactError(f"{what} metadata missing: {json_path}") from exc
    except (OSError, ValueError) as exc:
        raise ModelArtifactError(f"{what} metadata unreadable: {json_path}: {exc}") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("spec"), dict):
        raise ModelArtifactError(f"{what} metadata has no spec: {json_path}")
    try:
        with np.load(npz_path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except FileNotFoundError as exc:
        raise ModelArtifactError(f"{what} weights missing: {npz_path}") from exc
    except Exception as exc:  # zipfile.BadZipFile, ValueError, OSError, EOFError, ...
        # numpy's own text for a corrupt file can suggest allow_pickle=True: never echo it
        raise ModelArtifactError(
            f"{what} weights unreadable: {npz_path}: not a valid .npz archive of arrays "
            f"({type(exc).__name__}); rebuild or reinstall it"
        ) from exc
    return meta, arrays


def write_artifact(
    stem: Path,
    spec: dict[str, Any],
    arrays: dict[str, np.ndarray[Any, Any]],
    extra: dict[str, Any],
) -> str:
    """Write ``stem``.npz (compressed ``arrays``) and ``stem``.json (hash, ``spec`` and
    ``extra``, which does not enter the hash); return the content hash."""
    digest = content_hash(spec, arrays)
    npz_path, json_path = artifact_paths(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    with npz_path.open("wb") as fh:
        np.savez_compressed(fh, allow_pickle=False, **arrays)
    meta = {"content_hash": digest, "spec": spec, **extra}
    json_path.write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return digest


def load_refusal_model(stem: Path) -> RefusalModel:
    """Load and verify the artifact ``stem``.npz / ``stem``.json (no pickle).

    Raises :class:`ModelArtifactError` (with the path and what is wrong) when a file is
    missing or unreadable, the metadata is not the expected JSON, the arrays do not fit the
    spec, or the recomputed content hash differs from the one recorded (a corrupt or edited
    artifact).
    """
    meta, arrays = read_artifact(stem, "refusal model")
    model = refusal_model.model_from_arrays(meta["spec"], arrays)
    check_hash(stem, "refusal model", meta.get("content_hash"), model.content_hash)
    return model


def save_refusal_model(
    stem: Path,
    weights: FloatArray,
    bias: float,
    threshold: float,
    families: Sequence[str],
    extra: dict[str, Any],
) -> str:
    """Write the artifact ``stem``.npz (compressed) and ``stem``.json; return the content hash.

    ``extra`` is stored in the metadata beside the spec (training summary); it does not enter
    the hash. ``weights`` must have the width of ``families`` (``ValueError`` otherwise).
    """
    spec = refusal_model.build_spec(families, threshold)
    if weights.shape != (sum(spec["widths"].values()),):
        raise ValueError(f"weights shape {weights.shape} does not fit families {families}")
    return write_artifact(stem, spec, refusal_model.model_arrays(weights, bias), extra)


def load_category_model(stem: Path) -> CategoryModel:
    """Load and verify ``stem``.npz / ``stem``.json (no pickle). Raises
    :class:`ModelArtifactError` naming the file when it is missing, unreadable, does not fit
    the spec, or its recomputed content hash differs from the recorded one."""
    meta, arrays = read_artifact(stem, "category model")
    model = category_model.model_from_arrays(meta["spec"], arrays)
    check_hash(stem, "category model", meta.get("content_hash"), model.content_hash)
    return model


def save_category_model(stem: Path, head: Head, extra: dict[str, Any]) -> str:
    """Write ``stem``.npz (compressed) and ``stem``.json; return the content hash. ``extra``
    (training summary, folds) is stored beside the spec and does not enter the hash."""
    return write_artifact(
        stem, category_model.build_spec(head.families), category_model.model_arrays(head), extra
    )


def save_head(
    stem: Path,
    weights: np.ndarray[Any, Any],
    bias: float,
    threshold: float,
    encoder: str,
    dim: int,
    extra: dict[str, Any],
) -> str:
    """Write the head artifact ``stem``.npz / ``stem``.json; return its content hash.

    Raises ``ValueError`` when ``weights`` is not of shape ``(head_width(dim),)``.
    """
    spec = head_spec(threshold, encoder, dim)
    if weights.shape != (spec["width"],):
        raise ValueError(f"weights shape {weights.shape}, the head needs ({spec['width']},)")
    arrays: dict[str, np.ndarray[Any, Any]] = {
        "weights": weights.astype(np.float32),
        "bias": np.array([bias], dtype=np.float64),
    }
    return write_artifact(stem, spec, arrays, extra)


def load_head(stem: Path) -> EncoderHead:
    """Load and verify the head ``stem``. Raises ``ModelArtifactError`` naming the file and
    the fault (missing, unreadable, a spec this code does not read, wrong shapes, content
    hash mismatch)."""
    meta, arrays = read_artifact(stem, _HEAD)
    spec = meta["spec"]
    if spec.get("format_version") != HEAD_FORMAT_VERSION:
        found = spec.get("format_version")
        raise ModelArtifactError(f"{_HEAD} format {found!r}, this code reads {HEAD_FORMAT_VERSION}")
    try:
        dim = int(spec["dim"])
        threshold = float(spec["threshold"])
        encoder = str(spec["encoder"])
        weights = np.asarray(arrays["weights"])
        bias = np.asarray(arrays["bias"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelArtifactError(f"{_HEAD} {stem}: incomplete spec or arrays: {exc}") from exc
    if spec != head_spec(threshold, encoder, dim) or not 0.0 < threshold < 1.0:
        raise ModelArtifactError(f"{_HEAD} {stem}: spec {spec} does not fit this code")
    if weights.dtype != np.float32 or weights.shape != (head_width(dim),) or bias.shape != (1,):
        raise ModelArtifactError(f"{_HEAD} {stem}: arrays of the wrong dtype or shape")
    digest = content_hash(spec, {"weights": weights, "bias": bias})
    check_hash(stem, _HEAD, meta.get("content_hash"), digest)
    return EncoderHead(weights.astype(np.float64), float(bias[0]), threshold, encoder, dim, digest)


def load_circumvention_model(stem: Path) -> CircumventionModel:
    """Read and verify the circumvention model ``stem``.json / ``stem``.npz (no pickle;
    ``stem`` without suffix): ``processors.clarification.circumvention_model.model_from_arrays``
    checks the features, the content hash and the weights' signs.

    Raises ``OSError`` (a missing or unreadable file), ``ValueError`` (bad JSON, a bad
    artifact: ``CircumventionArtifactError``), ``KeyError``, ``TypeError``, ``EOFError`` or
    ``zipfile.BadZipFile`` (a corrupt archive); the application names the file and the fix.
    """
    meta = json.loads(stem.with_suffix(".json").read_text(encoding="utf-8"))
    with np.load(stem.with_suffix(".npz"), allow_pickle=False) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return circumvention_from_arrays(meta, arrays)


def write_circumvention_model(
    stem: Path, meta: dict[str, Any], arrays: dict[str, np.ndarray[Any, Any]]
) -> tuple[Path, Path]:
    """Write the circumvention model ``stem``.npz (``arrays``, uncompressed) and
    ``stem``.json (``meta``, indented); return the two paths. Raises ``OSError`` for a
    failed write."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = stem.with_suffix(".npz"), stem.with_suffix(".json")
    np.savez(paths[0], **arrays)  # type: ignore[arg-type]
    paths[1].write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return paths
