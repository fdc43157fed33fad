"""Tokens and keys: made with `secrets`, stored as SHA-256, compared in constant time.

Secrets the server must use again (a webhook's signing secret) cannot be hashed: they are
sealed with AES-GCM under a key derived from the server's key material (the audit key,
which every replica shares), bound to the row they belong to."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Any

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

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


_SEALED_PREFIX = "v1:"


def _sealing_key(master: bytes, purpose: str) -> AESGCM:
    derived = HKDF(
        algorithm=hashes.SHA256(), length=32, salt=None, info=b"gpufleet " + purpose.encode()
    ).derive(master)
    return AESGCM(derived)


def seal_secret(master: bytes, purpose: str, owner: str, secret: str) -> str:
    """`secret` encrypted for storage, readable only with the same key, purpose and owner."""
    nonce = secrets.token_bytes(12)
    sealed = _sealing_key(master, purpose).encrypt(nonce, secret.encode(), owner.encode())
    return _SEALED_PREFIX + base64.b64encode(nonce + sealed).decode()


def open_secret(master: bytes, purpose: str, owner: str, stored: str) -> str | None:
    """The secret `seal_secret` sealed; None if the key material changed since."""
    if not stored.startswith(_SEALED_PREFIX):
        return None
    try:
        raw = base64.b64decode(stored[len(_SEALED_PREFIX) :])
        opened = _sealing_key(master, purpose).decrypt(raw[:12], raw[12:], owner.encode())
    except (InvalidTag, ValueError):
        return None
    return opened.decode()


# ---- per-attempt secrets, derived again whenever needed (nothing stored) ---------------------

UPLOAD_TOKEN_PREFIX = "ut_"


def _derived(master: bytes, purpose: str) -> bytes:
    return hmac.new(master, b"gpufleet " + purpose.encode(), hashlib.sha256).digest()


def upload_token(master: bytes, attempt_id: str) -> str:
    """The attempt's upload token (SimpleTuner's trainer uploads with it): the HMAC of the
    attempt id under a key derived from the server's, so every replica, and every resend of
    the offer, derives the same one, and no other attempt's token opens this attempt."""
    mac = hmac.new(_derived(master, "upload-token"), attempt_id.encode(), hashlib.sha256)
    return UPLOAD_TOKEN_PREFIX + base64.urlsafe_b64encode(mac.digest()).rstrip(b"=").decode()


def check_upload_token(master: bytes, attempt_id: str, presented: str) -> bool:
    """Whether `presented` is the attempt's upload token (compared in constant time)."""
    return hmac.compare_digest(upload_token(master, attempt_id).encode(), presented.encode())


def sign_ticket(master: bytes, purpose: str, payload: dict[str, Any]) -> str:
    """`payload` (JSON) and its HMAC, URL-safe: a stateless handle any replica can check."""
    body = base64.urlsafe_b64encode(orjson.dumps(payload)).rstrip(b"=")
    mac = hmac.new(_derived(master, purpose), body, hashlib.sha256).digest()
    return f"{body.decode()}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"


def open_ticket(master: bytes, purpose: str, ticket: str) -> dict[str, Any] | None:
    """The payload `sign_ticket` signed for `purpose`; None if it was altered or is not one."""
    body, dot, mac = ticket.partition(".")
    if not dot or not body or not mac or not ticket.isascii():
        return None
    expected = hmac.new(_derived(master, purpose), body.encode(), hashlib.sha256).digest()
    try:
        given = base64.urlsafe_b64decode(mac + "=" * (-len(mac) % 4))
        if not hmac.compare_digest(expected, given):
            return None
        payload = orjson.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    return payload if isinstance(payload, dict) else None
