"""Where an orchestrator is: the address workers elsewhere use (`--public-url`), and the one
it leaves in its data folder for the operator commands on its own machine.

`gpufleet server` writes `<data-dir>/server.json` once it listens (as it writes
`admin.token`); `gpufleet workers …` and the other operator commands read it when neither
`--url` nor `GPUFLEET_URL` is given, so `make up PORT=18250` needs no further setup.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gpufleet.errors import ConfigurationError

ADDRESS_FILE = "server.json"
_WILDCARDS = frozenset({"", "0.0.0.0", "::"})


@dataclass(frozen=True, slots=True)
class Address:
    url: str  # what a client on the orchestrator's machine calls
    public_url: str  # what workers elsewhere call, as the server was told or guessed


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url(scheme: str, host: str, port: int) -> str:
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{scheme}://{host}:{port}"


def first_non_loopback_address() -> str | None:
    """This machine's address on its default route (no packet is sent), else the first
    non-loopback address its hostname has, else None."""
    with contextlib.suppress(OSError):
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: routing only, nothing is sent
            found = str(probe.getsockname()[0])
        if not _is_loopback(found) and found not in _WILDCARDS:
            return found
    with contextlib.suppress(OSError):
        for *_, sockaddr in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            if not _is_loopback(str(sockaddr[0])):
                return str(sockaddr[0])
    return None


def local_url(host: str, port: int, tls: bool) -> str:
    """The URL a client on this machine reaches a server listening on `host` with."""
    scheme = "https" if tls else "http"
    if host in _WILDCARDS:
        host = "::1" if host == "::" and not socket.has_dualstack_ipv6() else "127.0.0.1"
    return _url(scheme, host, port)


def default_public_url(host: str, port: int, tls: bool) -> str:
    """The address given to `--host`; with a wildcard (0.0.0.0), this machine's first
    non-loopback address; a server that listens on loopback only is reached there only."""
    scheme = "https" if tls else "http"
    if host in _WILDCARDS:
        found = first_non_loopback_address()
        return _url(scheme, found, port) if found else local_url(host, port, tls)
    return _url(scheme, "127.0.0.1" if host == "localhost" else host, port)


def check_public_url(value: str) -> str:
    """An http(s) URL with a host, without its trailing slash; else a ConfigurationError
    that says what to write."""
    url = value.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query:
        raise ConfigurationError(
            f"--public-url {value!r} is not an http(s) URL workers can call; write e.g. "
            "http://gpu-head.example.com:8001"
        )
    return url


def write(data_dir: Path, address: Address) -> Path:
    """Leave the address in the data folder (replaced whole: a reader never sees half)."""
    path = data_dir / ADDRESS_FILE
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps({"url": address.url, "public_url": address.public_url}) + "\n")
    os.replace(partial, path)
    return path


def read(data_dir: Path) -> Address | None:
    """The address a server left in `data_dir`, or None (none there, or unreadable)."""
    try:
        body = json.loads((data_dir / ADDRESS_FILE).read_text())
        return Address(url=str(body["url"]), public_url=str(body.get("public_url") or body["url"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def own_executable() -> str:
    """This installation's `gpufleet` by absolute path: how to start a worker on this
    machine when `gpufleet` is not on PATH (a `make up` checkout keeps it in .venv/bin)."""
    started = Path(sys.argv[0])
    if started.name == "gpufleet" and started.is_file():
        return str(started.absolute())
    beside = Path(sys.executable).with_name("gpufleet")
    if beside.is_file():
        return str(beside)
    return "gpufleet"
