"""The trained refusal pre-filter: deterministic training, artifact checks, output contract."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from inference.model_files import load_refusal_model as load_model
from processors.prefilter import (
    RefusalDecision,
    detect_refusal,
    detect_refusal_text,
    detect_refusal_texts,
    detect_refusals,
)
from processors.refusal_model import ModelArtifactError
from refusal_audit.audit import prefilter_model
from refusal_audit.audit.batch import build_pipeline
from refusal_audit.audit.evaluation import MemorySink
from refusal_audit.audit.prefilter_model import SHIPPED_STEM, load_shipped_model
from refusal_audit.config import ConfigError, load_settings
from refusal_audit.training import labels
from refusal_audit.training.build import build_artifact
from schemas.events import ClassifierSignal, RefusalEvent

TEXTS = (
    "I'm sorry, but I can't help with that.",
    "I can't help you get into your neighbour's wifi. However, I can explain how to secure "
    "your own router: change the default password and update the firmware.",
    "Sure! To kill a Python process, find its PID and run kill.",
    "The capital of Australia is Canberra.",
    "",
    "   ",
)


def _copy_artifact(tmp_path: Path) -> Path:
    stem = tmp_path / "model"
    for suffix in (".npz", ".json"):
        shutil.copyfile(SHIPPED_STEM.with_suffix(suffix), stem.with_suffix(suffix))
    return stem


@pytest.mark.integration
def test_training_is_deterministic(shared_data: Path, tmp_path: Path) -> None:
    a = build_artifact(shared_data, tmp_path / "a" / "m", with_folds=False, every=25)
    b = build_artifact(shared_data, tmp_path / "b" / "m", with_folds=False, every=25)
    assert a.content_hash == b.content_hash
    assert re.fullmatch(r"[0-9a-f]{64}", a.content_hash)
    loaded = load_model(tmp_path / "b" / "m")
    assert loaded.content_hash == a.content_hash and loaded.threshold == a.threshold
    # another subset is other data: another model
    c = build_artifact(shared_data, tmp_path / "c" / "m", with_folds=False, every=26)
    assert c.content_hash != a.content_hash


def test_shipped_artifact_matches_its_card_and_metadata() -> None:
    model = load_shipped_model()
    meta = json.loads(SHIPPED_STEM.with_suffix(".json").read_text(encoding="utf-8"))
    card = SHIPPED_STEM.with_suffix(".md").read_text(encoding="utf-8")
    assert meta["content_hash"] == model.content_hash
    assert f"content hash (SHA-256 of spec and arrays): `{model.content_hash}`" in card
    assert model.version == f"refusal-lr-{model.content_hash[:12]}"
    assert SHIPPED_STEM.with_suffix(".npz").stat().st_size < 4_000_000


def test_missing_artifact_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"refusal model metadata missing: .*nothing\.json"):
        load_shipped_model(tmp_path / "nothing")
    stem = _copy_artifact(tmp_path)
    stem.with_suffix(".npz").unlink()
    with pytest.raises(ConfigError, match=r"refusal model weights missing: .*model\.npz"):
        load_shipped_model(stem)


def test_corrupt_artifact_fails_clearly(tmp_path: Path) -> None:
    stem = _copy_artifact(tmp_path)
    npz = stem.with_suffix(".npz")
    npz.write_bytes(npz.read_bytes()[:1000])
    with pytest.raises(ModelArtifactError, match="weights unreadable"):
        load_model(stem)

    (tmp_path / "x").mkdir()
    stem = _copy_artifact(tmp_path / "x")
    meta_path = stem.with_suffix(".json")
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["spec"]["threshold"] = 0.9  # an edited threshold changes the scoring: hash check
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(ModelArtifactError, match="does not match its recorded content hash"):
        load_model(stem)

    meta_path.write_text("{not json", encoding="utf-8")
    with pytest.raises(ModelArtifactError, match="metadata unreadable"):
        load_model(stem)


def test_weights_of_another_shape_are_refused(tmp_path: Path) -> None:
    stem = _copy_artifact(tmp_path)
    with np.load(stem.with_suffix(".npz"), allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    arrays["weight_index"] = arrays["weight_index"].astype(np.int64)
    np.savez_compressed(stem.with_suffix(".npz"), **arrays)
    with pytest.raises(ModelArtifactError, match="wrong dtype or shape"):
        load_model(stem)


def test_start_up_fails_when_the_trained_artifact_is_missing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(prefilter_model, "SHIPPED_STEM", tmp_path / "gone")
    cfg = load_settings(None, prefilter_model="trained")
    with pytest.raises(ConfigError, match="cannot load the trained refusal pre-filter"):
        build_pipeline(cfg, MemorySink())


def test_engine_version_names_the_trained_model() -> None:
    model = load_shipped_model()
    trained = build_pipeline(load_settings(None, prefilter_model="trained"), MemorySink())
    assert trained.engine.version == f"local-2/prefilter={model.version}"
    assert trained.intake.refusal_model is model
    cues = build_pipeline(load_settings(None, prefilter_model="cues"), MemorySink())
    assert cues.engine.version == "local-2" and cues.intake.refusal_model is None


def test_trained_decisions_keep_the_output_contract() -> None:
    model = load_shipped_model()
    batch = detect_refusal_texts(list(TEXTS), model)
    one_by_one = [detect_refusal_texts([t], model)[0] for t in TEXTS]
    assert batch == one_by_one
    for text, d in zip(TEXTS, batch, strict=True):
        assert isinstance(d, RefusalDecision) and d.source == "text"
        assert 0.0 <= d.score <= 1.0
        assert d.is_refusal == (d.score >= 0.5) or not text.strip()
        assert (d.kind == "none") == (not d.is_refusal)
        assert isinstance(d.cues, tuple) and all(isinstance(c, str) for c in d.cues)
    assert batch[4] == batch[5] == RefusalDecision(False, "none", 0.0, ("empty_response",), "text")
    assert batch[0].is_refusal and batch[0].kind == "full" and "apology" in batch[0].cues
    assert batch[1].is_refusal and batch[1].kind == "partial"
    assert not batch[3].is_refusal
    # the cues explain the trained decision exactly as the cue scorer reads them
    assert batch[1].cues == detect_refusal_text(TEXTS[1]).cues


def test_without_a_model_the_batch_api_is_the_cue_scorer() -> None:
    assert detect_refusal_texts(list(TEXTS)) == [detect_refusal_text(t) for t in TEXTS]


def _event(response: str, classifier: ClassifierSignal | None = None) -> RefusalEvent:
    from datetime import UTC, datetime

    return RefusalEvent(
        log_id="l1",
        event_time=datetime(2024, 5, 1, tzinfo=UTC),
        request="r",
        response=response,
        model="m",
        classifier=classifier,
    )


def test_an_upstream_verdict_still_wins_over_the_model() -> None:
    model = load_shipped_model()
    events = [
        _event("Here is a poem about spring.", ClassifierSignal(is_refusal=True)),
        _event("I'm sorry, but I can't help with that.", ClassifierSignal(is_refusal=False)),
        _event("I'm sorry, but I can't help with that."),
    ]
    got = detect_refusals(events, model)
    verdict = [(d.is_refusal, d.score, d.source) for d in got[:2]]
    assert verdict == [(d.is_refusal, d.score, d.source) for d in map(detect_refusal, events[:2])]
    assert got[0].source == got[1].source == "classifier"
    assert got[2].source == "text" and got[2].is_refusal
    # our detection beside the verdict is the trained model's, as for events without one
    assert [d.detected for d in got[:2]] == detect_refusal_texts(
        [e.response for e in events[:2]], model
    )


def test_label_mappings_follow_the_readmes() -> None:
    assert labels.xstest_is_refusal("2_full_refusal") and labels.xstest_is_refusal(
        "3_partial_refusal"
    )
    assert not labels.xstest_is_refusal("1_full_compliance")
    with pytest.raises(ValueError, match="unknown XSTest final_label"):
        labels.xstest_is_refusal("4_other")
    assert not labels.reuter_is_refusal("complied")
    assert all(labels.reuter_is_refusal(t) for t in ("rejected", "redirected", "disclaimed"))
    with pytest.raises(ValueError):
        labels.gptfuzz_is_refusal({"id": "x"})


@pytest.mark.integration
def test_loaded_examples_match_the_readme_counts(shared_data: Path) -> None:
    rows = labels.load_refusal_examples(shared_data)
    by = {s: [r for r in rows if r.source == s] for s in labels.SOURCES}
    assert sum(r.is_refusal for r in by["xstest-gpt4"]) == 220
    assert sum(r.is_refusal for r in by["xstest-llama2"]) == 349
    assert (len(by["reuter"]), sum(r.is_refusal for r in by["reuter"])) == (1352, 530)
    assert len({r.text for r in by["gptfuzz"]}) == len(by["gptfuzz"])  # duplicates dropped
    coconot_negatives = [r for r in by["coconot"] if not r.is_refusal]
    assert all(r.text.strip() for r in by["coconot"])
    assert len(coconot_negatives) >= 231  # the contrast answers with a response
