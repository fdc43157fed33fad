"""Where the orchestrator is and which key to use: the CLI's rules, for `Client()` too.

Each comes from what the caller gave, else the environment variable of the CLI's flag
(`GPUFLEET_URL`, `GPUFLEET_API_KEY`, `GPUFLEET_DATA_DIR`, `GPUFLEET_CA_CERT`,
`GPUFLEET_SSL_NO_VERIFY`), else what the orchestrator left in its data folder: the address in
`server.json`, the admin key in `admin.token` (the session of `gpufleet login` first).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpufleet import address
from gpufleet.client import signins
from gpufleet.client.http import DEFAULT_DATA_DIR, DEFAULT_URL
from gpufleet.errors import ConfigurationError
from gpufleet.settings.worker import WORKER

# The CLI's connection flags read GPUFLEET_<var> (cli/api.py declares them with these).
URL_VAR, API_KEY_VAR, DATA_DIR_VAR = "URL", "API_KEY", "DATA_DIR"
_CA_CERT = WORKER.named("ca_cert")
_SSL_NO_VERIFY = WORKER.named("ssl_no_verify")
_TRUE = {"1", "true", "t", "yes", "y", "on"}  # as click reads a flag's variable


@dataclass(frozen=True, slots=True)
class Connection:
    url: str
    api_key: str
    data_dir: Path
    verify: ssl.SSLContext | bool


def connection(
    url: str | None = None,
    api_key: str | None = None,
    *,
    data_dir: Path | str | None = None,
    ca_cert: Path | str | None = None,
    ssl_no_verify: bool | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Connection:
    """The orchestrator and key, as the CLI finds them (the module's docstring)."""

    def variable(var: str) -> str | None:
        return environ.get(f"GPUFLEET_{var}") or None

    def first(names: list[str]) -> str | None:
        return next((environ[n] for n in names if environ.get(n)), None)

    folder = Path(data_dir or variable(DATA_DIR_VAR) or DEFAULT_DATA_DIR)
    if ssl_no_verify is None:
        ssl_no_verify = (first(_SSL_NO_VERIFY.env_vars) or "").strip().lower() in _TRUE
    cert = ca_cert or first(_CA_CERT.env_vars)
    verify = verify_option(Path(cert) if cert else None, ssl_no_verify)
    target = resolve_url(url or variable(URL_VAR), folder)
    key = resolve_key(api_key or variable(API_KEY_VAR), folder, target, verify)
    return Connection(target, key, folder, verify)


def resolve_url(url: str | None, data_dir: Path) -> str:
    """The URL given, else the one the orchestrator left in its data folder (#15.11), else
    the default port on this machine."""
    if url and url.strip():
        return url
    left = address.read(data_dir)
    return left.url if left else DEFAULT_URL


def resolve_key(
    api_key: str | None,
    data_dir: Path,
    url: str | None = None,
    verify: ssl.SSLContext | bool = True,
) -> str:
    """The key given, else the session of `gpufleet login` for `url` (refreshed if it
    expired), else the admin key the orchestrator left in its data folder."""
    if api_key and api_key.strip():
        return api_key.strip()
    if url is not None and (token := signins.token_for(url, verify)):
        return token
    path = data_dir / "admin.token"
    try:
        key = path.read_text().strip()
    except OSError:
        key = ""
    if not key:
        raise ConfigurationError(
            f"no API key: run `gpufleet login`, or pass --api-key or set GPUFLEET_API_KEY (no "
            f"admin key at {path}; point --data-dir / GPUFLEET_DATA_DIR at the orchestrator's "
            "data folder)"
        )
    return key


def verify_option(ca_cert: Path | None, ssl_no_verify: bool) -> ssl.SSLContext | bool:
    """How to check the orchestrator's certificate, as --ca-cert and --ssl-no-verify say."""
    if ssl_no_verify:
        return False
    return ssl.create_default_context(cafile=str(ca_cert)) if ca_cert is not None else True
