"""Running the review app: settings to ``ReviewService`` + ``create_app``, served by uvicorn.

``build_app`` is what ``refusal-audit review serve`` runs (and what tests serve); the session
key comes from ``review_session_secret`` or, when unset, a random key kept in
``<data_dir>/review-session.key`` (mode 0600), so logins survive a restart. On an embedded
store the review server is either the store's owner (it then serves the owner channel too,
``refusal_audit.streaming.owner.owner_routes``) or reaches the owner, e.g. a running worker,
like every other command.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from starlette.routing import Route
from starlette.types import ASGIApp

from refusal_audit.bundles import load_bundles
from refusal_audit.config import ConfigError, Settings
from refusal_audit.review.accounts import AccountBook
from refusal_audit.review.service import ReviewService
from refusal_audit.review.web.app import create_app
from refusal_audit.review.web.context import WebOptions
from refusal_audit.secret_files import random_secret_file
from warehouse.store import Warehouse


def session_secret(cfg: Settings) -> str:
    """The configured session key, else the one in ``<data_dir>/review-session.key`` (made
    on first use, mode 0600). Raises ``ConfigError`` when the key file cannot be read or
    written."""
    if cfg.review_session_secret is not None:
        return cfg.review_session_secret.get_secret_value()
    return random_secret_file(Path(cfg.data_dir) / "review-session.key", "review session key")


def web_options(cfg: Settings) -> WebOptions:
    """``WebOptions`` from the review_* settings. Raises ``ConfigError`` (also for a proxy
    user header without a trusted proxy: it would never be believed)."""
    if cfg.review_proxy_user_header and not cfg.review_trusted_proxies:
        raise ConfigError(
            "review_proxy_user_header is set but review_trusted_proxies is empty: name the "
            "authenticating proxy's address (e.g. 127.0.0.1) in review_trusted_proxies"
        )
    return WebOptions(
        secret=session_secret(cfg),
        session_max_age=cfg.review_session_max_age_seconds,
        cookie_secure=cfg.review_cookie_secure,
        login_attempts_per_minute=cfg.review_login_attempts_per_minute,
        proxy_user_header=cfg.review_proxy_user_header,
        trusted_proxies=tuple(cfg.review_trusted_proxies),
    )


@dataclass(frozen=True)
class ReviewApp:
    """The ASGI ``app`` and the objects behind it (for the worker and for tests)."""

    app: ASGIApp
    service: ReviewService
    accounts: AccountBook


def build_app(
    cfg: Settings,
    store: Warehouse,
    extra_routes: list[Route] | None = None,
    clock: Callable[[], float] | None = None,
) -> ReviewApp:
    """The review app over ``store`` with the configured bundles and review settings.
    Raises ``ConfigError`` (bundles, key file)."""
    bundles = load_bundles(cfg.policy_bundles, cfg.data_dir)
    service = ReviewService(
        store,
        bundles,
        reviews_per_item=cfg.review_reviews_per_item,
        lease_seconds=cfg.review_lease_seconds,
        clock=clock or time.monotonic,
    )
    accounts = AccountBook(store)
    app = create_app(service, accounts, web_options(cfg), extra_routes)
    return ReviewApp(app, service, accounts)
