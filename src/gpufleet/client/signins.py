"""The CLI's single sign-on sessions (`gpufleet login`), kept between commands.

One JSON file, `signins.json`, in `$GPUFLEET_CONFIG_DIR`, else `$XDG_CONFIG_HOME/gpufleet`,
else `~/.config/gpufleet` (the folder 0700, the file 0600): for each orchestrator URL, the
short-lived session token the orchestrator gave, when it expires, and the provider's refresh
token. A command given no API key uses the token of its URL, trading the refresh token for a
new one at the orchestrator when it has expired (`POST /api/sso/refresh`).
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import orjson

from gpufleet.client_tls import verify_for

FILE = "signins.json"
EARLY = timedelta(seconds=60)  # refresh a token this long before it expires


def config_folder(environ: Mapping[str, str] = os.environ) -> Path:
    if mine := environ.get("GPUFLEET_CONFIG_DIR"):
        return Path(mine)
    if xdg := environ.get("XDG_CONFIG_HOME"):
        return Path(xdg) / "gpufleet"
    return Path.home() / ".config" / "gpufleet"


def _path() -> Path:
    return config_folder() / FILE


def _read() -> dict[str, Any]:
    try:
        found = orjson.loads(_path().read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}
    return found if isinstance(found, dict) else {}


def _write(all_of_them: dict[str, Any]) -> None:
    path = _path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fresh = path.with_suffix(".tmp")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(orjson.dumps(all_of_them, option=orjson.OPT_INDENT_2))
    os.chmod(fresh, 0o600)
    os.replace(fresh, path)


def _key(url: str) -> str:
    return url.strip().rstrip("/")


def save(url: str, answer: Mapping[str, Any]) -> None:
    """Keep the orchestrator's answer to a sign-in or a refresh."""
    kept = _read()
    kept[_key(url)] = {
        "token": answer["token"],
        "expires_at": answer["expires_at"],
        "refresh_token": answer.get("refresh_token"),
        "user": answer.get("user"),
    }
    _write(kept)


def forget(url: str) -> dict[str, Any] | None:
    """Drop the URL's session; what it was, if there was one."""
    kept = _read()
    gone = kept.pop(_key(url), None)
    if gone is not None:
        _write(kept)
    return gone if isinstance(gone, dict) else None


def token_for(url: str, verify: ssl.SSLContext | bool) -> str | None:
    """The URL's session token, refreshed if it expired; None without a (usable) one."""
    found = _read().get(_key(url))
    if not isinstance(found, dict) or not isinstance(found.get("token"), str):
        return None
    with contextlib.suppress(ValueError, TypeError):
        expires = datetime.fromisoformat(str(found["expires_at"]))
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=UTC)
        if datetime.now(UTC) + EARLY < expires:
            return str(found["token"])
    refresh = found.get("refresh_token")
    if not isinstance(refresh, str):
        return None
    try:
        answer = httpx.post(
            f"{_key(url)}/api/sso/refresh",
            data={"refresh_token": refresh},
            verify=verify_for([url], verify),
            timeout=30.0,
        )
    except httpx.HTTPError:
        return None
    if answer.status_code != 200:
        forget(url)  # refused: the person signs in again
        return None
    body = answer.json()
    save(url, body)
    return str(body["token"])
