"""Cost of the sentence encoders on this machine (docs/encoders.md, "Cost").

For every catalogue encoder that is fetched (``refusal-audit encoders list``), in a fresh
process each (so the RSS a model adds is its own), with ``encoder_threads = 1``:

- load time (read + verify sha256 + onnxruntime session) and the RSS it adds (psutil);
- ms per text of ``OnnxEncoder.encode`` at batch sizes 1, 8 and 32, mean over the same
  real texts (prompts and responses of ../shared/data/reuter/reuter_hand_labeled.jsonl, read
  by path, nothing copied; after one warm-up call), and the minimum cosine between a text's
  vector at batch size 32 and at 1 (1.000000: the batch size does not change vectors);
- for the int8 models, which ``encode`` runs one text per call, what padded batches would
  cost (``one_text_per_run=False``) and how far they move a text's vector: the minimum
  cosine between a text's vector in a padded batch of 32 and alone;
- when an int8 model and its fp32 sibling are both fetched: the mean (and minimum) cosine
  between their vectors of the same texts.

Run: ``.venv/bin/python benchmarks/encoder_cost.py [--shared-data DIR] [--texts N]``;
fetch the fp32 models first with ``refusal-audit encoders fetch --all``. Timings are the
machine's of the moment: say what else ran beside it when you quote them.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

from refusal_audit.config import Settings, load_settings
from refusal_audit.encoders import CATALOG, installed_state

BATCH_SIZES = (1, 8, 32)
REPO = Path(__file__).resolve().parents[1]


def read_texts(shared_data: Path, count: int) -> list[str]:
    """``count`` texts: alternately the prompt and the response of the Reuter records, in
    file order. Raises ``SystemExit`` when the file is missing or too short."""
    path = shared_data / "reuter" / "reuter_hand_labeled.jsonl"
    if not path.is_file():
        raise SystemExit(f"{path} not found (give --shared-data)")
    texts: list[str] = []
    with path.open("rb") as lines:
        for line in lines:
            record = orjson.loads(line)
            texts += [record["prompt"], record["response"]]
            if len(texts) >= count:
                return texts[:count]
    raise SystemExit(f"{path}: fewer than {count} texts")


def rss_bytes() -> int:
    """This process's resident set size in bytes."""
    import psutil  # type: ignore[import-untyped]  # no stubs in the dev extras

    return int(psutil.Process().memory_info().rss)


def measure_one(name: str, texts: list[str], vectors_out: Path) -> dict[str, object]:
    """Everything measured for encoder ``name`` in this process (see the module doc);
    its vectors of ``texts`` (batch size 32) are saved to ``vectors_out`` (.npy)."""
    from refusal_audit.encoders.runtime import OnnxEncoder

    cfg = load_settings(None, encoder_threads=1)
    before = rss_bytes()
    start = time.perf_counter()
    encoder = OnnxEncoder.load(name, cfg)
    load_seconds = time.perf_counter() - start
    rss_added = rss_bytes() - before
    encoder.encode(texts[:8])  # warm-up
    row: dict[str, object] = {
        "name": name,
        "load_s": load_seconds,
        "rss_mb": rss_added / 1e6,
        "one_text_per_run": encoder.one_text_per_run,
    }
    by_size = {}
    for size in BATCH_SIZES:
        start = time.perf_counter()
        by_size[size] = encoder.encode(texts, batch_size=size)
        row[f"ms_b{size}"] = 1000 * (time.perf_counter() - start) / len(texts)
    vectors = by_size[32]
    row["min_cos_b32_vs_b1"] = float(np.min(np.einsum("ij,ij->i", vectors, by_size[1])))
    np.save(vectors_out, vectors)
    if encoder.one_text_per_run:
        padded = OnnxEncoder.load(name, cfg, one_text_per_run=False)
        for size in BATCH_SIZES[1:]:
            start = time.perf_counter()
            batched = padded.encode(texts, batch_size=size)
            row[f"padded_ms_b{size}"] = 1000 * (time.perf_counter() - start) / len(texts)
        row["padded_min_cos_b32"] = float(np.min(np.einsum("ij,ij->i", batched, vectors)))
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared-data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--texts", type=int, default=300, help="texts to embed (>= 200)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # child process: one model
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    texts = read_texts(args.shared_data, args.texts)
    if args.one:
        row = measure_one(args.one, texts, args.out.with_suffix(".npy"))
        args.out.write_bytes(orjson.dumps(row))
        return

    cfg: Settings = load_settings(None)
    fetched = [
        name
        for name, spec in CATALOG.items()
        if installed_state(cfg.resolved_encoder_dir, spec) == "fetched"
    ]
    if not fetched:
        raise SystemExit("no encoder fetched: run `refusal-audit encoders fetch`")
    rows: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in fetched:
            out = Path(tmp) / f"{name}.json"
            child = [sys.executable, __file__, "--one", name, "--out", str(out)]
            data = ["--shared-data", str(args.shared_data), "--texts", str(args.texts)]
            subprocess.run([*child, *data], check=True)
            rows[name] = orjson.loads(out.read_bytes())
        vectors = {name: np.load(Path(tmp) / f"{name}.npy") for name in fetched}

    tokens = _mean_tokens(fetched[0], texts, cfg)
    print(
        f"{len(texts)} texts (Reuter prompts and responses), mean {tokens:.0f} tokens "
        f"({fetched[0]}'s tokenizer, truncated); 1 intra-op thread"
    )
    print()
    print(
        "| model | load s | RSS added MB | ms/text b=1 | b=8 | b=32 | min cos b=32 vs b=1 "
        "| int8 padded b=8 | padded b=32 | min cos padded b=32 vs alone |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in fetched:
        r = rows[name]
        padded = (
            f"{r['padded_ms_b8']:.1f} | {r['padded_ms_b32']:.1f} | {r['padded_min_cos_b32']:.4f}"
            if r["one_text_per_run"]
            else "- | - | -"
        )
        print(
            f"| {name} | {r['load_s']:.2f} | {r['rss_mb']:.0f} | {r['ms_b1']:.1f} | "
            f"{r['ms_b8']:.1f} | {r['ms_b32']:.1f} | {r['min_cos_b32_vs_b1']:.6f} | {padded} |"
        )
    print()
    for name in fetched:
        sibling = name.removesuffix("-q")
        if name.endswith("-q") and sibling in vectors:
            cos = np.einsum("ij,ij->i", vectors[name], vectors[sibling])
            print(
                f"int8 {name} vs fp32 {sibling}: mean cosine {cos.mean():.4f}, "
                f"min {cos.min():.4f} over {len(texts)} texts"
            )


def _mean_tokens(name: str, texts: list[str], cfg: Settings) -> float:
    """Mean token count of ``texts`` (truncated to the model's max) under ``name``."""
    from refusal_audit.encoders.runtime import OnnxEncoder

    encoder = OnnxEncoder.load(name, cfg)
    return float(np.mean([encoder.token_count(text) for text in texts]))


if __name__ == "__main__":
    main()
