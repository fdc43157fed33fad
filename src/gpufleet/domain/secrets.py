"""Tokens and keys: made with `secrets`, stored as SHA-256, compared in constant time."""

from __future__ import annotations

import hashlib
import hmac
import secrets

WORKER_TOKEN_PREFIX = "wt_"
API_KEY_PREFIX = "gfk_"


def new_worker_token() -> str:
    return WORKER_TOKEN_PREFIX + secrets.token_urlsafe(32)


def new_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def same_hash(stored_hash: str, presented: str) -> bool:
    return hmac.compare_digest(stored_hash, hash_secret(presented))


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(6)}"
