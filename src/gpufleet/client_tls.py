"""What a client of the orchestrator gives httpx as `verify=`, by the URLs it calls."""

from __future__ import annotations

import ssl
from collections.abc import Iterable


def verify_for(urls: Iterable[str], verify: ssl.SSLContext | bool) -> ssl.SSLContext | bool:
    """`verify` for a client that calls an https URL among `urls`; for one that calls only
    plain http ones, a TLS context that trusts no certificate at all.

    httpx makes a client's TLS context when the client is made, and its default one loads
    certifi's CA bundle: 80 ms of CPU, a quarter of an operator command's, which plain HTTP
    never uses. The context given instead still checks certificates and host names, against
    no CA: were it ever used, it could vouch for no server (#32)."""
    if any(url.strip().lower().startswith("https:") for url in urls):
        return verify
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
