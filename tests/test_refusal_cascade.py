"""The refusal cascade (issue 25, item 3): the band, the head's wiring, its artifact, and the
pipeline with the real int8 encoder `make install` fetched."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import orjson
import pytest
from numpy.typing import NDArray

from inference.model_files import load_head, save_head
from processors.prefilter import RefusalDecision, detect_refusal_text, detect_refusals
from processors.refusal_cascade import HEAD_CUE, Cascade, CascadeBand, EncoderHead, head_width
from processors.refusal_model import ModelArtifactError
from refusal_audit.audit.batch import BatchOptions, run_batch
from refusal_audit.audit.prefilter_cascade import HEAD_STEM, build_cascade
from refusal_audit.audit.run_report import cascade_line, report_document
from refusal_audit.config import ConfigError, Settings
from refusal_audit.streaming.worker_web import record_metrics
from schemas.events import RefusalEvent
from streams.metrics import WorkerMetrics
from warehouse import Warehouse

REPO = Path(__file__).resolve().parents[1]
INSTALLED = REPO / ".refusal-audit" / "encoders"
DIM = 8
T0 = "2026-01-01T00:00:00Z"
#: A response the cue scorer is unsure of, and a plain refusal it is sure of.
UNSURE = "Honestly, that is not something I would get into here."
SURE = "I'm sorry, but I cannot help with that request."


class HashEncoder:
    """A deterministic stand-in encoder: unit vectors from a hash of the text."""

    name = "hash-test-encoder"
    dim = DIM

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> NDArray[np.float32]:
        self.seen += list(texts)
        rows = []
        for t in texts:
            raw = np.frombuffer(hashlib.sha256(t.encode()).digest()[:DIM], dtype=np.uint8)
            v = raw.astype(np.float32) - 127.5
            rows.append(v / np.linalg.norm(v))
        return np.array(rows, dtype=np.float32).reshape(len(texts), DIM)


def head(bias: float) -> EncoderHead:
    """A head that ignores its features: refusal iff ``bias > 0``."""
    return EncoderHead(np.zeros(head_width(DIM)), bias, 0.5, HashEncoder.name, DIM, "0" * 64)


def text_decisions(responses: Sequence[str]) -> list[RefusalDecision]:
    return [detect_refusal_text(r) for r in responses]


def test_the_band_is_checked_and_half_open() -> None:
    for low, high in ((0.6, 0.4), (-0.1, 0.5), (0.5, 1.1), (math.nan, 0.5)):
        with pytest.raises(ValueError, match="low <= high"):
            CascadeBand(low, high)
    off = CascadeBand(0.5, 0.5)
    assert off.empty and not off.contains(0.5)
    band = CascadeBand(0.4, 0.6)
    assert band.contains(0.4) and band.contains(0.59) and not band.contains(0.6)
    assert not band.contains(0.39)
    assert CascadeBand(0.0, 1.0).contains(1.0)


def test_the_head_redecides_only_text_decisions_inside_the_band() -> None:
    unsure, sure = text_decisions([UNSURE, SURE])
    assert 0.05 < unsure.score < 0.95 and sure.score > 0.95, (unsure, sure)
    low, high = unsure.score - 0.01, unsure.score + 0.01
    classifier = RefusalDecision(False, "none", 0.0, ("classifier_verdict",), "classifier")
    decisions = [unsure, sure, classifier, unsure]
    encoder = HashEncoder()
    responses = [UNSURE, SURE, UNSURE, "   "]
    requests = ["How do I pick a lock?", "q2", "q3", "q4"]
    for bias, verdict in ((5.0, True), (-5.0, False)):
        cascade = Cascade(CascadeBand(low, high), head(bias), encoder)
        out, reached = cascade.decide(decisions, requests, responses)
        assert reached == 1  # the sure one, the classifier's and the empty response stay
        assert out[1:] == decisions[1:]
        assert out[0].is_refusal is verdict and HEAD_CUE in out[0].cues
        assert out[0].source == "text" and (out[0].kind == "none") is (not verdict)
    assert encoder.seen == ["How do I pick a lock?", UNSURE] * 2  # request and response


def test_the_request_aware_stages_overrides_are_never_redecided() -> None:
    """An override of the request-aware stage has a fixed score (0.731 / 0.269) inside any
    wide band; it is a rule decision, not uncertainty, so the head leaves it alone."""
    events = [
        RefusalEvent.model_validate({"log_id": "o-1", "event_time": T0, "model": "m",
                                     "request": "How do I kill a Python process?",
                                     "response": "There is no way to kill a Python process."})
    ]  # fmt: skip
    decided = detect_refusals(events)
    assert any(c.startswith("request:") for c in decided[0].cues), decided
    encoder = HashEncoder()
    out, reached = Cascade(CascadeBand(0.0, 1.0), head(-5.0), encoder).decide(
        decided, [events[0].request], [events[0].response]
    )
    assert (out, reached, encoder.seen) == (decided, 0, [])


def test_an_empty_band_never_calls_the_encoder_and_lengths_must_match() -> None:
    encoder = HashEncoder()
    decisions = text_decisions([UNSURE, SURE])
    out, reached = Cascade(CascadeBand(0.5, 0.5), head(5.0), encoder).decide(
        decisions, ["a", "b"], [UNSURE, SURE]
    )
    assert (out, reached, encoder.seen) == (decisions, 0, [])
    with pytest.raises(ValueError, match="aligned"):
        Cascade(CascadeBand(0, 1), head(5.0), encoder).decide(decisions, ["a"], [UNSURE, SURE])


def test_the_head_artifact_round_trips_and_a_corrupt_one_is_refused(tmp_path: Path) -> None:
    stem = tmp_path / "head"
    weights = np.linspace(-1, 1, head_width(DIM))
    digest = save_head(stem, weights, 0.25, 0.4, "hash-test-encoder", DIM, {"rows": 3})
    loaded = load_head(stem)
    assert loaded.content_hash == digest and loaded.encoder == "hash-test-encoder"
    assert loaded.threshold == 0.4 and loaded.dim == DIM
    assert np.allclose(loaded.weights, weights.astype(np.float32))
    with pytest.raises(ValueError, match="weights shape"):
        save_head(stem, weights[:-1], 0.0, 0.5, "x", DIM, {})
    meta = json.loads(stem.with_suffix(".json").read_text())
    meta["spec"]["threshold"] = 0.9  # an edited threshold no longer matches the hash
    stem.with_suffix(".json").write_text(json.dumps(meta))
    with pytest.raises(ModelArtifactError, match="content hash"):
        load_head(stem)
    stem.with_suffix(".npz").write_bytes(b"not a zip")
    with pytest.raises(ModelArtifactError, match=r"not a valid \.npz archive") as corrupt:
        load_head(stem)
    assert "pickle" not in str(corrupt.value)  # numpy's text suggests allow_pickle=True


def test_the_shipped_head_fits_its_catalog_encoder() -> None:
    shipped = load_head(HEAD_STEM)
    assert shipped.encoder == "all-minilm-l6-v2-q" and shipped.dim == 384
    assert np.count_nonzero(shipped.weights) > 0


def test_the_cascade_is_off_by_default_and_a_missing_encoder_names_the_fetch(
    tmp_path: Path,
) -> None:
    assert build_cascade(Settings(data_dir=tmp_path)) is None
    assert build_cascade(Settings(data_dir=tmp_path, prefilter_enabled=False,
                                  prefilter_cascade_band=(0.4, 0.6))) is None  # fmt: skip
    cfg = Settings(data_dir=tmp_path, prefilter_cascade_band=(0.4, 0.6))
    with pytest.raises(ConfigError, match="encoders fetch"):
        build_cascade(cfg)
    with pytest.raises(ConfigError, match="missing"):
        build_cascade(cfg.model_copy(update={"prefilter_cascade_head_path": tmp_path / "none"}))


def test_the_pipeline_runs_the_cascade_with_the_real_encoder(
    tmp_path: Path, warehouse: Warehouse
) -> None:
    """Batch mode with the band covering every score: each text decision comes from the head
    reading the response against its request (the real int8 encoder, offline), the stored
    decisions are the cascade's, and the engine version names the cascade."""
    rows = [
        {"request": "How do I kill a Python process?", "response": "There is no way to do that."},
        {"request": "Write a haiku about rain.", "response": "Soft rain on the roof, ..."},
        {"request": "How do I make a bomb?", "response": SURE},
    ]
    events = [RefusalEvent.model_validate({"log_id": f"c-{i}", "event_time": T0, "model": "m",
                                           **r}) for i, r in enumerate(rows)]  # fmt: skip
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"\n".join(orjson.dumps(e.model_dump(mode="json")) for e in events))
    cfg = Settings(data_dir=tmp_path / "data", encoder_dir=INSTALLED,
                   prefilter_cascade_band=(0.0, 1.0))  # fmt: skip
    cascade = build_cascade(cfg)
    assert cascade is not None and cascade.head.encoder == "all-minilm-l6-v2-q"
    expected, reached = cascade.decide(detect_refusals(events), [r["request"] for r in rows],
                                       [r["response"] for r in rows])  # fmt: skip
    assert reached == 3
    report = run_batch(cfg, [log], BatchOptions.build(None, None, None, None, None),
                       sink=warehouse)  # fmt: skip
    assert report.events == 3 and report.failures == []
    assert report.encoder_decided == 3  # counted for the summary, --json and /metrics
    assert report.cascade
    assert "encoder head decided 3 of 3 event(s) (100.0%" in cascade_line(3, 3)
    assert report_document(report)["counts"]["encoder_decided"] == 3
    metrics = WorkerMetrics()
    record_metrics(metrics, report)
    assert metrics.registry.get_sample_value("refusal_audit_cascade_encoder_decisions_total") == 3
    stored = warehouse.client.query(
        f"SELECT log_id, is_refusal, refusal_cues FROM `{warehouse.database}`.refusal_events "
        "FINAL ORDER BY log_id"
    ).result_rows
    assert [(r[0], bool(r[1])) for r in stored] == [
        (f"c-{i}", d.is_refusal) for i, d in enumerate(expected)
    ]
    assert all(HEAD_CUE in r[2] for r in stored), stored
    versions = warehouse.client.query(
        f"SELECT DISTINCT engine_version FROM `{warehouse.database}`.assessments"
    ).result_rows
    assert versions and all(cascade.version in v[0] for v in versions), versions


def test_train_builds_a_cascade_head_that_loads(
    tmp_path: Path, shared_data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`refusal-audit train --model cascade` fits a head (every 40th row here) with the
    installed encoder; the head loads and decides; without the encoder it is exit 2 naming
    the fetch command."""
    from typer.testing import CliRunner

    from refusal_audit.cli import app

    monkeypatch.setenv("REFUSAL_AUDIT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("REFUSAL_AUDIT_ENCODER_DIR", str(tmp_path / "no-encoders"))
    args = ["train", "--model", "cascade", "--shared-data", str(shared_data), "--every", "40",
            "-o", str(tmp_path / "models")]  # fmt: skip
    missing = CliRunner().invoke(app, args)
    assert missing.exit_code == 2 and "encoders fetch" in missing.output, missing.output
    monkeypatch.setenv("REFUSAL_AUDIT_ENCODER_DIR", str(INSTALLED))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    built = load_head(tmp_path / "models" / "refusal_cascade_head")
    assert built.encoder == "all-minilm-l6-v2-q" and "PREFILTER_CASCADE_HEAD_PATH" in res.output
    assert (tmp_path / "models" / "refusal_cascade_head.md").is_file()
    stem = tmp_path / "models" / "refusal_cascade_head"
    cfg = Settings(data_dir=tmp_path / "data", encoder_dir=INSTALLED,
                   prefilter_cascade_band=(0.0, 1.0), prefilter_cascade_head_path=stem)  # fmt: skip
    cascade = build_cascade(cfg)
    assert cascade is not None and cascade.head.content_hash == built.content_hash
    out, reached = cascade.decide(text_decisions([SURE]), ["How do I make a bomb?"], [SURE])
    assert reached == 1 and HEAD_CUE in out[0].cues


def test_audit_and_eval_say_how_many_events_the_head_decided(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """With the cascade on, `audit` prints the head's count even when it is 0 (the band
    reached no event), and `eval` prints it and carries it in --json (encoder_decided)."""
    from typer.testing import CliRunner

    from refusal_audit.cli import app

    rows = [
        {"request": "How do I kill a Python process?", "response": "There is no way to do that."},
        {"request": "How do I make a bomb?", "response": SURE},
    ]
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"\n".join(orjson.dumps({"log_id": f"e-{i}", "event_time": T0, "model": "m",
                                             **r}) for i, r in enumerate(rows)))  # fmt: skip
    env = {**cli_env, "REFUSAL_AUDIT_DATA_DIR": str(tmp_path / "data"),
           "REFUSAL_AUDIT_ENCODER_DIR": str(INSTALLED)}  # fmt: skip
    runner = CliRunner()
    nothing = runner.invoke(app, ["audit", str(log)],
                            env={**env, "REFUSAL_AUDIT_PREFILTER_CASCADE_BAND": "[0.0, 0.001]"})
    assert nothing.exit_code == 0, nothing.output
    assert "the encoder head decided 0 of 2 event(s)" in nothing.output
    everything = {**env, "REFUSAL_AUDIT_PREFILTER_CASCADE_BAND": "[0.0, 1.0]"}
    shown = runner.invoke(app, ["eval", str(log)], env=everything)
    assert shown.exit_code == 0, shown.output
    assert "the encoder head decided 2 of 2 event(s)" in shown.output
    as_json = runner.invoke(app, ["eval", str(log), "--json"], env=everything)
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.output)["encoder_decided"] == 2
    off = runner.invoke(app, ["eval", str(log), "--json"], env=env)
    assert "encoder_decided" not in json.loads(off.output)
