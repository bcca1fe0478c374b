"""The settings of refusal-style calibration: its engine, token and the team's safety suite: one
group of :class:`refusal_audit.config.Settings`, which composes every group (the field names are
the config keys; the environment variables are ``REFUSAL_AUDIT_`` plus the name in capitals;
docs/configuration.md lists them all).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator


class CalibrationSettings(BaseModel):
    """Refusal-style calibration: its engine, token and the team's safety suite: fields only
    (validated and read through :class:`refusal_audit.config.Settings`)."""

    # refusal-style calibration (refusal-audit calibrate, docs/calibration.md)
    calibration_token: SecretStr | None = Field(
        default=None,
        description="API token of a review-app account (`review token create`) with which "
        "`calibrate run` verifies its starter without a password (CI, scripts); unset: "
        "`--token-file`, else the account's password.",
    )
    calibrate_engine: Literal["local", "openai"] | None = Field(
        default=None,
        description="Engine that writes refusal variants; unset: as `engine`.",
    )
    calibrate_model: str | None = Field(
        default=None, description="Model of an openai variant engine; unset: `openai_model`."
    )
    calibrate_suite_command: list[str] | None = Field(
        default=None,
        description="A team's own regression suite: a command (argv list, no shell) that reads "
        'one variant as JSON on stdin and prints its verdict, `{"verdict": "pass"}` or '
        '`{"verdict": "fail", "reasons": [...]}`; '
        "unset: none.",
    )
    calibrate_suite_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="Time a suite command gets per variant; a timeout fails the variant.",
    )
    calibrate_suite_url: str | None = Field(
        default=None,
        pattern=r"^https?://\S+$",
        description="A team's own regression suite as an HTTP endpoint: each variant is POSTed "
        "as the same JSON a suite command reads and the answer is the same verdict JSON; "
        "unset: none. Not together with `calibrate_suite_command`.",
    )
    calibrate_suite_token: SecretStr | None = Field(
        default=None,
        description="Bearer token sent to `calibrate_suite_url` (Authorization header).",
    )

    @model_validator(mode="after")
    def _one_suite(self) -> CalibrationSettings:
        if self.calibrate_suite_command and self.calibrate_suite_url:
            raise ValueError("set calibrate_suite_command or calibrate_suite_url, not both")
        return self
