"""The settings of human review: sampling, the review web app, sessions and logins: one group of
:class:`refusal_audit.config.Settings`, which composes every group (the field names are the
config keys; the environment variables are ``REFUSAL_AUDIT_`` plus the name in capitals;
docs/configuration.md lists them all).
"""

from __future__ import annotations

from pydantic import BaseModel, Field, SecretStr


class ReviewSettings(BaseModel):
    """Human review: sampling, the review web app, sessions and logins: fields only (validated and
    read through :class:`refusal_audit.config.Settings`)."""

    # human review sampling
    review_sample_rate: float = Field(
        default=0.2,
        ge=0.0,
        le=1.0,
        description="Share of unflagged assessments sampled for review.",
    )
    review_uncertainty_band: float = Field(
        default=0.0,
        ge=0.0,
        le=0.5,
        description="Also send to review (reason `uncertainty`) the unflagged assessments the "
        "random sample did not draw whose engine over-refusal score lies within this distance "
        "of the engine's threshold; 0 is off. Never part of the random sample that estimates "
        "the verified false-positive rate (see docs/review.md).",
    )
    review_seed: int = Field(default=0, description="Seed of the review sampling.")
    review_reviews_per_item: int = Field(
        default=1, ge=1, le=10, description="Reviewers' verdicts each review item needs."
    )
    # the review web app (refusal-audit review serve)
    review_web_host: str = Field(
        default="127.0.0.1",
        description="Bind address of the review web app (loopback unless you put it behind "
        "a TLS-terminating proxy).",
    )
    review_web_port: int = Field(
        default=8090, ge=0, le=65535, description="Port of the review web app."
    )
    review_lease_seconds: int = Field(
        default=300,
        ge=30,
        le=86400,
        description="How long a reviewer holds a claimed item before it returns to the queue.",
    )
    review_session_secret: SecretStr | None = Field(
        default=None,
        description="Key signing the review app's session cookie and CSRF tokens; unset: a random "
        "key kept in <data_dir>/review-session.key (mode 0600).",
    )
    review_session_max_age_seconds: int = Field(
        default=12 * 3600, ge=300, le=30 * 86400, description="Lifetime of a review login."
    )
    review_cookie_secure: bool = Field(
        default=False,
        description="Mark the review app's cookies Secure (set it when served over HTTPS).",
    )
    review_login_attempts_per_minute: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="Wrong passwords in a row allowed per account name and client address "
        "together before each further attempt from that address waits 60 s, doubling per "
        "further failure (at most 1 h); four times this many attempts per client address in "
        "a moving minute. More are refused with 429.",
    )
    review_proxy_user_header: str | None = Field(
        default=None,
        description="Header naming the reviewer, set by an authenticating reverse proxy "
        "(e.g. X-Forwarded-User); trusted only from review_trusted_proxies. Unset: log in "
        "with a password.",
    )
    review_trusted_proxies: list[str] = Field(
        default_factory=list,
        description="Addresses of the reverse proxies whose forwarding headers are believed: "
        "X-Forwarded-For (the client address for the login limit), X-Forwarded-Host (the "
        "origin check) and review_proxy_user_header. Empty (default): none, the connection's "
        "peer is the client.",
    )
