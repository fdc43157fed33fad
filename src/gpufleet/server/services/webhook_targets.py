"""Resolving a webhook's host and checking it against domain/webhook_targets.py: when an
admin adds or changes a webhook, and again before each send (a name may resolve elsewhere
by then: DNS rebinding), when the send is pinned to the address that was checked."""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

from gpufleet.domain.webhook_targets import (
    AllowList,
    IPAddress,
    check_addresses,
    literal_address,
)

RESOLVE_TIMEOUT_S = 5.0


class Unresolved(Exception):
    """The host has no address now (a send fails and is retried; a new webhook may still be
    added: its name may exist by the time an event happens)."""


async def resolve(host: str, port: int) -> list[IPAddress]:
    found = literal_address(host)
    if found is not None:
        return [found]
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(RESOLVE_TIMEOUT_S):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, ValueError, TimeoutError) as exc:  # UnicodeError: a label too long
        raise Unresolved(f"{host} could not be resolved ({exc})") from exc
    addresses: list[IPAddress] = []
    for *_, sockaddr in infos:
        address = literal_address(str(sockaddr[0]).split("%")[0])  # an IPv6 scope dropped
        if address is not None and address not in addresses:
            addresses.append(address)
    if not addresses:
        raise Unresolved(f"{host} has no address")
    return addresses


def host_and_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    default = 443 if parts.scheme.lower() == "https" else 80
    return parts.hostname or "", parts.port or default


async def check_url(url: str, allow: AllowList) -> None:
    """Refuse (errors.InvalidInput) a URL whose host is or resolves to an internal address the
    allow-list does not name; a name that does not resolve now is let through."""
    host, port = host_and_port(url)
    if allow.allows_host(host):
        return
    try:
        addresses = await resolve(host, port)
    except Unresolved:
        return  # checked again at every send
    check_addresses(host, addresses, allow)


async def address_to_send_to(url: str, allow: AllowList) -> IPAddress | None:
    """The checked address a send connects to; None: the allow-list names the host, which is
    then resolved as the connection is made. Raises Unresolved or InvalidInput."""
    host, port = host_and_port(url)
    if allow.allows_host(host):
        return None
    addresses = await resolve(host, port)
    check_addresses(host, addresses, allow)
    return addresses[0]
