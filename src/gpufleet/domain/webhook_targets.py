"""Where a webhook may send, and how its URL is shown: pure rules (the resolving is done by
server/services/webhook_targets.py, at create, update and send time).

A webhook is sent from the orchestrator, so its URL could reach what only the orchestrator
reaches: the cloud's metadata service, a database on the private network, the orchestrator
itself. Such addresses are refused unless the operator allowed them with
`--webhook-allow-hosts` (hosts and networks, comma-separated)."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from gpufleet.errors import InvalidInput

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
ALLOW_FLAG = "--webhook-allow-hosts"
HIDDEN = "…"


def redact_url(url: str) -> str:
    """`scheme://host[:port]/…`: the URL without its userinfo, path, query and fragment,
    which may hold credentials (a Slack-style URL is a secret in itself)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return HIDDEN
    host = parts.hostname or ""
    if not parts.scheme or not host:
        return HIDDEN
    shown = f"[{host}]" if ":" in host else host
    netloc = f"{shown}:{port}" if port is not None else shown
    return f"{parts.scheme.lower()}://{netloc}/{HIDDEN}"


def redact_text(text: str, url: str) -> str:
    """`text` (an error) with the URL, its userinfo, path and query replaced by `…`."""
    text = text.replace(url, redact_url(url))
    try:
        parts = urlsplit(url)
    except ValueError:
        return text
    userinfo = parts.netloc.rpartition("@")[0]
    for secret in (userinfo, parts.query, parts.path if len(parts.path) > 1 else ""):
        if secret:
            text = text.replace(secret, HIDDEN)
    return text


def why_internal(address: IPAddress) -> str | None:
    """What kind of internal address this is, or None for a public one."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return why_internal(address.ipv4_mapped)
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_loopback:
        return "a loopback address (this machine)"
    if address.is_link_local:
        return "a link-local address (such as the cloud metadata service 169.254.169.254)"
    if address.is_multicast:
        return "a multicast address"
    if isinstance(address, ipaddress.IPv6Address) and address in _UNIQUE_LOCAL:
        return "a unique-local IPv6 address (a private network)"
    if address.is_private:
        return "a private network address"
    if not address.is_global:
        return "an address that is not public"
    return None


_UNIQUE_LOCAL = ipaddress.IPv6Network("fc00::/7")


@dataclass(frozen=True, slots=True)
class AllowList:
    """The hosts and networks a webhook may reach although they are internal."""

    hosts: frozenset[str] = frozenset()  # names, lowercased: allowed whatever they resolve to
    networks: tuple[IPNetwork, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> AllowList:
        """From `--webhook-allow-hosts` entries (a host name, an address, or a network in
        CIDR form); ValueError names an entry that is neither."""
        hosts: set[str] = set()
        networks: list[IPNetwork] = []
        for raw in entries:
            entry = raw.strip().strip("[]").lower()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            except ValueError:
                pass
            if "/" in entry or any(c.isspace() or c in ":@?#" for c in entry):
                raise ValueError(
                    f"{raw.strip()!r} is neither a host name, an address nor a network "
                    "(such as 10.0.0.0/8)"
                )
            hosts.add(entry.rstrip("."))
        return cls(frozenset(hosts), tuple(networks))

    def allows_host(self, host: str) -> bool:
        return host.lower().rstrip(".") in self.hosts

    def allows_address(self, address: IPAddress) -> bool:
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        return any(address in n or (mapped is not None and mapped in n) for n in self.networks)


def split_entries(text: str) -> tuple[str, ...]:
    return tuple(e.strip() for e in text.split(",") if e.strip())


def literal_address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def check_addresses(host: str, addresses: Iterable[IPAddress], allow: AllowList) -> None:
    """Refuse (InvalidInput) a host that is, or resolves to, an internal address the allow-list
    does not name; a host the list names is allowed whatever it resolves to."""
    if allow.allows_host(host):
        return
    for address in addresses:
        why = why_internal(address)
        if why is None or allow.allows_address(address):
            continue
        named = "" if literal_address(host) == address else f" (it resolves to {address})"
        raise InvalidInput(
            f"the URL's host {host}{named} is {why}, which webhooks may not reach; use a "
            f"public address, or start the server with {ALLOW_FLAG} {address} (or the host "
            "name, or its network) to allow it"
        )
