"""Idempotent submit (docs/jobs.md): what a submit's `idempotency_key` may hold, and how long
it names the job its first submit made (SimpleTuner's 24 hours). A key is its user's own:
another user's same key names another job."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpufleet.errors import InvalidInput

KEY_MAX = 256  # characters, as SimpleTuner's
KEY_TTL = timedelta(hours=24)


def check_key(key: str) -> str:
    """The key as given, refused when it is empty, longer than `KEY_MAX` or holds a character
    that is not printable (a control character such as NUL, a lone surrogate, a line break)."""
    if not key:
        raise InvalidInput("idempotency_key is empty: leave it out, or send 1 to 256 characters")
    if len(key) > KEY_MAX:
        raise InvalidInput(
            f"idempotency_key is {len(key)} characters long; send at most {KEY_MAX} (a build "
            "id, a commit sha, a UUID)"
        )
    if not key.isprintable():
        bad = next(c for c in key if not c.isprintable())
        raise InvalidInput(
            f"idempotency_key holds the unprintable character U+{ord(bad):04X}; send printable "
            "characters only (letters, digits, - _ . : / and the like)"
        )
    return key


def live_since(now: datetime) -> datetime:
    """Keys made at or after this still name their job; an older one makes a new job."""
    return now - KEY_TTL
