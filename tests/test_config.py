"""Settings: defaults, TOML file, environment precedence, secrets, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from refusal_audit.config import ConfigError, load_settings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("REFUSAL_AUDIT_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


def test_defaults_are_embedded_and_local(tmp_path: Path) -> None:
    s = load_settings()
    assert s.resolved_warehouse_dsn == f"chdb://{tmp_path.resolve()}/.refusal-audit/chdb"
    assert s.engine is None and s.resolved_engine == "local"
    assert s.review_sample_rate == 0.2


def test_toml_then_env_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "ra.toml"
    cfg.write_text('batch_max_events = 7\nwarehouse_dsn = "http://ch:8123"\n', encoding="utf-8")
    assert load_settings(cfg).batch_max_events == 7
    assert load_settings(cfg).resolved_warehouse_dsn == "http://ch:8123"
    monkeypatch.setenv("REFUSAL_AUDIT_BATCH_MAX_EVENTS", "9")
    assert load_settings(cfg).batch_max_events == 9
    monkeypatch.setenv("REFUSAL_AUDIT_CONFIG", str(cfg))
    assert load_settings().resolved_warehouse_dsn == "http://ch:8123"


def test_default_config_file_in_cwd(tmp_path: Path) -> None:
    (tmp_path / "refusal-audit.toml").write_text("review_seed = 11\n", encoding="utf-8")
    assert load_settings().review_seed == 11


def test_secret_is_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REFUSAL_AUDIT_WAREHOUSE_PASSWORD", "s3cret-value")
    s = load_settings()
    assert "s3cret-value" not in repr(s)
    assert "s3cret-value" not in s.model_dump_json()
    assert s.warehouse_password is not None
    assert s.warehouse_password.get_secret_value() == "s3cret-value"


def test_settings_are_frozen() -> None:
    s = load_settings()
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises ValidationError on frozen
        s.batch_max_events = 3  # type: ignore[misc]


def test_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "missing.toml")
    monkeypatch.setenv("REFUSAL_AUDIT_REVIEW_SAMPLE_RATE", "2")
    with pytest.raises(ConfigError, match="review_sample_rate"):
        load_settings()
    monkeypatch.delenv("REFUSAL_AUDIT_REVIEW_SAMPLE_RATE")
    assert load_settings().review_uncertainty_band == 0.0  # off by default
    monkeypatch.setenv("REFUSAL_AUDIT_REVIEW_UNCERTAINTY_BAND", "0.6")
    with pytest.raises(ConfigError, match="review_uncertainty_band"):
        load_settings()
    monkeypatch.setenv("REFUSAL_AUDIT_REVIEW_UNCERTAINTY_BAND", "0.3")
    assert load_settings().review_uncertainty_band == 0.3
    monkeypatch.delenv("REFUSAL_AUDIT_REVIEW_UNCERTAINTY_BAND")
    bad = tmp_path / "bad.toml"
    bad.write_text("no_such_setting = 1\n", encoding="utf-8")
    with pytest.raises(ConfigError):
        load_settings(bad)


def test_a_bad_value_is_named_by_its_key_and_variable_with_the_form_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One line per bad setting: config key, environment variable, what is wrong, the value
    given and, for a list or map, an example of its JSON form; no pydantic links."""
    monkeypatch.setenv("REFUSAL_AUDIT_PREFILTER_CASCADE_BAND", "[0.3, 0.7)")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    text = str(caught.value)
    assert "prefilter_cascade_band (REFUSAL_AUDIT_PREFILTER_CASCADE_BAND) is not valid JSON" in text
    assert "given: '[0.3, 0.7)'" in text and "e.g. '[0.5, 0.5]'" in text
    monkeypatch.setenv("REFUSAL_AUDIT_PREFILTER_CASCADE_BAND", "[0.7, 0.3]")
    with pytest.raises(ConfigError) as caught:
        load_settings()
    text = str(caught.value)
    assert "must have 0 <= low <= high <= 1" in text and "given: [0.7, 0.3]" in text
    assert "errors.pydantic.dev" not in text and "\n" not in text


def test_policy_bundles_from_toml(tmp_path: Path) -> None:
    cfg = tmp_path / "ra.toml"
    cfg.write_text(
        '[policy_bundles.support]\nallowed_use = "p/a.md"\nproduct_safety = "p/b.md"\n'
        'taxonomy = "p/t.md"\n',
        encoding="utf-8",
    )
    bundles = load_settings(cfg).policy_bundles
    assert list(bundles) == ["support"]
    assert bundles["support"].taxonomy == Path("p/t.md")


def test_the_configuration_page_is_current() -> None:
    from refusal_audit.config import settings_reference

    page = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
    assert settings_reference() in page.read_text(encoding="utf-8"), (
        "regenerate the table in docs/configuration.md with `refusal-audit config reference`"
    )


def test_an_endpoint_or_key_selects_the_openai_engine(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert load_settings().openai_key() is None
    monkeypatch.setenv("REFUSAL_AUDIT_OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    assert load_settings().resolved_engine == "openai"
    monkeypatch.setenv("REFUSAL_AUDIT_ENGINE", "local")
    assert load_settings().resolved_engine == "local"
    key_file = tmp_path / "key"
    key_file.write_text("sk-from-file\n", encoding="utf-8")
    monkeypatch.setenv("REFUSAL_AUDIT_OPENAI_API_KEY_FILE", str(key_file))
    s = load_settings()
    assert s.openai_key() == "sk-from-file"
    assert "sk-from-file" not in s.model_dump_json()


def test_an_api_key_no_http_header_can_carry_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key pasted with an em dash used to crash start-up with a UnicodeEncodeError that
    gave the character and its position (a breaking review, 2026-12-05)."""
    from refusal_audit.config import ConfigError, Settings

    bad = "sk-abc\u2014defghijklmnop"
    with pytest.raises(ConfigError, match="openai_api_key has non-ASCII") as info:
        Settings(openai_api_key=bad).openai_key()
    assert "abc" not in str(info.value) and "\u2014" not in str(info.value)
    key_file = tmp_path / "key"
    key_file.write_text(bad + "\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="openai_api_key_file"):
        Settings(openai_api_key_file=key_file).openai_key()
    key_file.write_bytes(b"sk-abc\xe9def\n")
    with pytest.raises(ConfigError, match="not UTF-8") as info:
        Settings(openai_api_key_file=key_file).openai_key()
    assert "0xe9" not in str(info.value)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-two words-here")
    with pytest.raises(ConfigError, match=r"\$OPENAI_API_KEY"):
        Settings().openai_key()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fine-key-123")
    assert Settings().openai_key() == "sk-fine-key-123"


def test_each_groups_own_checks_still_run_in_the_composed_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cross-field checks written in a capability's settings group (alerts: a pinned
    baseline needs both ends, in order, with an offset; calibration: one safety suite) run
    when the composed Settings load, as they did in the flat class."""
    monkeypatch.setenv("REFUSAL_AUDIT_ALERTS_BASELINE_START", "2026-01-02T00:00:00Z")
    with pytest.raises(ConfigError, match="go together"):
        load_settings()
    monkeypatch.setenv("REFUSAL_AUDIT_ALERTS_BASELINE_END", "2026-01-01T00:00:00Z")
    with pytest.raises(ConfigError, match="must be after"):
        load_settings()
    monkeypatch.setenv("REFUSAL_AUDIT_ALERTS_BASELINE_END", "2026-01-03T00:00:00Z")
    assert load_settings().alerts_baseline_end is not None
    monkeypatch.setenv("REFUSAL_AUDIT_CALIBRATE_SUITE_COMMAND", '["suite", "--json"]')
    monkeypatch.setenv("REFUSAL_AUDIT_CALIBRATE_SUITE_URL", "https://suite.example/run")
    with pytest.raises(ConfigError, match="not both"):
        load_settings()
