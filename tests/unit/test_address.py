"""The orchestrator's addresses: the default `--public-url`, and the one the CLI calls."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from gpufleet import address
from gpufleet.errors import ConfigurationError


def test_a_server_on_every_interface_is_pasted_with_a_non_loopback_address() -> None:
    found = address.first_non_loopback_address()
    if found is None:
        pytest.skip("this machine has no non-loopback IPv4 address")

    url = address.default_public_url("0.0.0.0", 18250, tls=False)

    assert url == f"http://{found}:18250"
    assert not ipaddress.ip_address(found).is_loopback


def test_a_server_on_loopback_only_is_pasted_with_loopback() -> None:
    assert address.default_public_url("127.0.0.1", 8001, tls=False) == "http://127.0.0.1:8001"
    assert address.default_public_url("localhost", 8001, tls=True) == "https://127.0.0.1:8001"


def test_a_server_on_one_address_is_pasted_with_that_address() -> None:
    assert address.default_public_url("10.1.2.3", 8001, tls=True) == "https://10.1.2.3:8001"
    assert address.default_public_url("fd00::5", 8001, tls=False) == "http://[fd00::5]:8001"


def test_the_cli_on_the_machine_calls_loopback_for_a_wildcard_host() -> None:
    assert address.local_url("0.0.0.0", 18250, tls=False) == "http://127.0.0.1:18250"
    assert address.local_url("10.1.2.3", 18250, tls=True) == "https://10.1.2.3:18250"


@pytest.mark.parametrize("bad", ["gpu-head:8001", "ftp://gpu-head", "http://", "http://h/?a=1"])
def test_a_public_url_must_be_an_http_url_with_a_host(bad: str) -> None:
    with pytest.raises(ConfigurationError, match="--public-url"):
        address.check_public_url(bad)


def test_a_public_url_loses_its_trailing_slash() -> None:
    assert address.check_public_url(" https://head.example/ ") == "https://head.example"


def test_the_address_file_round_trips_and_a_broken_one_is_ignored(tmp_path: Path) -> None:
    written = address.Address(url="http://127.0.0.1:18250", public_url="http://10.0.0.5:18250")

    address.write(tmp_path, written)
    read = address.read(tmp_path)
    (tmp_path / address.ADDRESS_FILE).write_text("{not json")

    assert read == written
    assert address.read(tmp_path) is None
    assert address.read(tmp_path / "missing") is None
