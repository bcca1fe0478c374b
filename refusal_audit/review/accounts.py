"""Review app accounts: argon2id password hashes, lookups, login throttling (issue 10).

Passwords are hashed with argon2-cffi's ``PasswordHasher`` (argon2id, RFC 9106's
low-memory profile: t=3, m=64 MiB, p=4), salted per hash. Login attempts are limited per
client address (``limits``' moving-window limiter) and, with growing delays, per account
name and address together (``LoginThrottle``; in memory, so per server process).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from limits import RateLimitItemPerMinute
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from schemas.review import ReviewerAccount, Role
from warehouse.review import reviewer_accounts, save_reviewer
from warehouse.store import Warehouse

# NIST SP 800-63B 3.1.1.2: at least 8 characters, at most 64 need be accepted
MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024
_hasher = PasswordHasher()
# verified against when the account does not exist, so a wrong name costs as much as a
# wrong password (no account enumeration through timing)
_DUMMY_HASH = _hasher.hash("not a real password, only for timing")


def hash_password(password: str) -> str:
    """An argon2id PHC string for ``password``. Raises ``ValueError`` for a password shorter
    than ``MIN_PASSWORD_LENGTH`` or longer than ``MAX_PASSWORD_LENGTH`` characters."""
    if len(password) < MIN_PASSWORD_LENGTH:
        raise ValueError(f"a password needs at least {MIN_PASSWORD_LENGTH} characters")
    if len(password) > MAX_PASSWORD_LENGTH:
        raise ValueError(f"a password may have at most {MAX_PASSWORD_LENGTH} characters")
    return _hasher.hash(password)


def add_reviewer(
    store: Warehouse,
    name: str,
    role: Role,
    password: str | None,
    now: datetime | None = None,
) -> ReviewerAccount:
    """Create or update the account ``name`` with ``role`` and ``password`` (None: an account
    that logs in only through the trusted proxy header). Raises ``ValueError`` for a bad
    name or password, ``WarehouseError`` when it cannot be stored."""
    account = ReviewerAccount(
        name=name,
        role=role,
        password_hash=hash_password(password) if password is not None else "",
        active=True,
        updated_at=now or datetime.now(UTC),
    )
    save_reviewer(store, account)
    return account


def deactivate_reviewer(store: Warehouse, name: str, now: datetime | None = None) -> bool:
    """Disable ``name`` (their sessions end at their next request). False when there is no
    such account. Raises ``WarehouseError``."""
    account = reviewer_accounts(store).get(name)
    if account is None:
        return False
    save_reviewer(
        store,
        account.model_copy(update={"active": False, "updated_at": now or datetime.now(UTC)}),
    )
    return True


def fingerprint(account: ReviewerAccount) -> str:
    """A digest of what a login rests on (hash, role, active, the account version): a
    session stores it, and a password, role or status change, or a logout (a new version),
    ends the sessions made before."""
    text = f"{account.password_hash}|{account.role}|{account.active}|{account.updated_at}"
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class AccountBook:
    """The accounts as the review server sees them: read from the warehouse and kept
    ``ttl`` seconds, so a change made with the CLI takes effect within ``ttl``.

    ``clock`` is monotonic seconds. Methods raise ``WarehouseError`` when a refresh fails.
    """

    def __init__(
        self, store: Warehouse, ttl: float = 10.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.clock = clock
        self._lock = threading.Lock()
        self._accounts: dict[str, ReviewerAccount] = {}
        self._read_at = float("-inf")

    def _fresh(self) -> dict[str, ReviewerAccount]:
        with self._lock:
            if self.clock() - self._read_at >= self.ttl:
                self._accounts = reviewer_accounts(self.store)
                self._read_at = self.clock()
            return self._accounts

    def refresh(self) -> None:
        """Read the accounts again at the next lookup."""
        with self._lock:
            self._read_at = float("-inf")

    def get(self, name: str) -> ReviewerAccount | None:
        """The active account ``name``, or None."""
        account = self._fresh().get(name)
        return account if account is not None and account.active else None

    def end_sessions(self, name: str) -> None:
        """Store a new version of ``name``'s account, which ends all its sessions (logout
        everywhere). Raises ``WarehouseError``."""
        account = self._fresh().get(name)
        if account is not None:
            save_reviewer(self.store, account.model_copy(update={"updated_at": datetime.now(UTC)}))
            self.refresh()

    def names(self) -> list[str]:
        """Names of the active accounts."""
        return sorted(n for n, a in self._fresh().items() if a.active)

    def authenticate(self, name: str, password: str) -> ReviewerAccount | None:
        """The active account when ``password`` is right, else None (same cost either way).
        A hash made with older parameters is replaced by a new one on success."""
        account = self.get(name)
        stored = account.password_hash if account is not None and account.password_hash else None
        try:
            _hasher.verify(stored or _DUMMY_HASH, password[:MAX_PASSWORD_LENGTH])
        except (VerificationError, InvalidHashError):
            return None
        if account is None or stored is None:
            return None
        if _hasher.check_needs_rehash(stored):
            account = account.model_copy(
                update={
                    "password_hash": _hasher.hash(password),
                    "updated_at": datetime.now(UTC),
                }
            )
            save_reviewer(self.store, account)
            self.refresh()
        return account


class LoginThrottle:
    """Login limits that a third party cannot turn against an account's owner.

    Per client address: at most ``4 * per_minute`` attempts (right or wrong) in any moving
    minute (``limits``' moving window). Per account name *and* address together: after
    ``per_minute`` wrong passwords in a row, each further attempt from that address for that
    name waits a delay that doubles with every further failure: 60 s, 120 s, ... up to
    ``MAX_DELAY_SECONDS`` (growing delays, NIST SP 800-63B 5.2.2); a right password resets
    the count. A failure streak at one address never delays the same name from another
    address, so wrong guesses cannot lock the owner out. In memory, so per server process;
    ``clock`` is monotonic seconds.
    """

    #: the longest wait one (name, address) pair is given, in seconds
    MAX_DELAY_SECONDS = 3600.0
    #: pairs remembered at most (older streaks are forgotten first)
    MAX_PAIRS = 100_000
    #: a streak without a failure for this long is forgotten, in seconds
    FORGET_AFTER_SECONDS = 86400.0

    def __init__(self, per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self.clock = clock
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._per_client = RateLimitItemPerMinute(4 * per_minute)
        self._lock = threading.Lock()
        # (name, client) -> (wrong passwords in a row, monotonic time of the last one)
        self._failures: dict[tuple[str, str], tuple[int, float]] = {}

    def _delay(self, failures: int) -> float:
        if failures < self.per_minute:
            return 0.0
        return min(60.0 * 2.0 ** (failures - self.per_minute), self.MAX_DELAY_SECONDS)

    def _streak(self, key: tuple[str, str]) -> tuple[int, float]:
        failures, last = self._failures.get(key, (0, 0.0))
        if failures and self.clock() - last > self.FORGET_AFTER_SECONDS:
            return 0, 0.0
        return failures, last

    def attempt(self, name: str, client: str) -> float | None:
        """Count an attempt of ``client`` at ``name``; None when allowed, else the seconds
        until one is allowed."""
        with self._lock:
            failures, last = self._streak((name.lower(), client))
        wait = last + self._delay(failures) - self.clock()
        if failures >= self.per_minute and wait > 0:
            return max(1.0, wait)
        if not self._limiter.hit(self._per_client, "client", client):
            stats = self._limiter.get_window_stats(self._per_client, "client", client)
            return max(1.0, stats.reset_time - time.time())
        return None

    def failed(self, name: str, client: str) -> None:
        """Record a wrong password (or unknown name) of ``client`` at ``name``."""
        key = (name.lower(), client)
        with self._lock:
            if key not in self._failures and len(self._failures) >= self.MAX_PAIRS:
                oldest = min(self._failures, key=lambda k: self._failures[k][1])
                del self._failures[oldest]
            failures = self._streak(key)[0]
            self._failures[key] = (failures + 1, self.clock())

    def succeeded(self, name: str, client: str) -> None:
        """A right password: the streak of ``client`` at ``name`` starts again."""
        with self._lock:
            self._failures.pop((name.lower(), client), None)
