"""Where a webhook may send and how its URL is shown (domain/webhook_targets.py)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.webhook_targets import (
    AllowList,
    check_addresses,
    redact_text,
    redact_url,
    split_entries,
    why_internal,
)
from gpufleet.errors import InvalidInput


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/XXXX", "https://hooks.slack.com/…"),
        ("http://user:pass@127.0.0.1:8080/hook?token=abc", "http://127.0.0.1:8080/…"),
        ("HTTPS://Hooks.Example.com", "https://hooks.example.com/…"),
        ("http://[::1]:9/x#frag", "http://[::1]:9/…"),
        ("http://host:99999/", "…"),
        ("not a url", "…"),
    ],
)
def test_a_url_is_shown_as_scheme_host_and_port_only(url: str, shown: str) -> None:
    assert redact_url(url) == shown


@given(
    user=st.text("abcxyz019", min_size=3, max_size=8),
    path=st.text("abcxyz019/-", min_size=3, max_size=20),
    query=st.text("abcxyz019=&", min_size=3, max_size=20),
)
def test_no_userinfo_path_or_query_survives_redaction(user: str, path: str, query: str) -> None:
    url = f"https://{user}:pw{user}@hooks.example.com/P{path}?Q{query}"
    shown = redact_url(url)
    assert shown == "https://hooks.example.com/…"
    text = redact_text(f"ConnectError: {url} failed, path /P{path}", url)
    for secret in (f"pw{user}", f"P{path}", f"Q{query}"):
        assert secret not in text


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.0.1", "private"),
        ("fd00::1", "unique-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("100.64.0.1", "not public"),
    ],
)
def test_internal_addresses_are_named_for_what_they_are(address: str, kind: str) -> None:
    why = why_internal(ipaddress.ip_address(address))
    assert why is not None and kind in why


@pytest.mark.parametrize("address", ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111"])
def test_public_addresses_are_not_internal(address: str) -> None:
    assert why_internal(ipaddress.ip_address(address)) is None


def test_the_allow_list_takes_hosts_addresses_and_networks() -> None:
    allow = AllowList.parse(split_entries(" hooks.internal , 10.0.0.0/8,127.0.0.1,[::1],"))
    assert allow.hosts == {"hooks.internal"}
    assert allow.allows_host("HOOKS.internal.") and not allow.allows_host("other.internal")
    for allowed in ("10.9.8.7", "127.0.0.1", "::1", "::ffff:10.0.0.1"):
        assert allow.allows_address(ipaddress.ip_address(allowed))
    assert not allow.allows_address(ipaddress.ip_address("127.0.0.2"))
    for bad in ("10.0.0.0/33", "user@host", "a b", "http://x/"):
        with pytest.raises(ValueError, match="neither"):
            AllowList.parse([bad])


def test_a_host_is_refused_if_any_of_its_addresses_is_internal_and_not_allowed() -> None:
    public, loopback = ipaddress.ip_address("8.8.8.8"), ipaddress.ip_address("127.0.0.1")
    check_addresses("hooks.example.com", [public], AllowList())
    with pytest.raises(InvalidInput, match=r"resolves to 127\.0\.0\.1.*--webhook-allow-hosts"):
        check_addresses("rebound.example.com", [public, loopback], AllowList())
    check_addresses("rebound.example.com", [public, loopback], AllowList.parse(["127.0.0.1"]))
    check_addresses("rebound.example.com", [loopback], AllowList.parse(["rebound.example.com"]))
