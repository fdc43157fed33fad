"""The test machines of tests/netns.py: their own addresses, the host reachable from each,
and nothing left behind, even when the test fails."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Callable

import pytest

from tests.netns import ETC, Network, network

CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), 10)"


def test_each_machine_has_its_own_address_and_reaches_the_host(
    machines: Callable[[int], Network],
) -> None:
    net = machines(2)
    assert len({machine.address for machine in net.namespaces}) == 2
    with socket.create_server((net.host, 0)) as server:
        port = str(server.getsockname()[1])
        for machine in net.namespaces:
            shown = machine.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True)
            assert f"{machine.interface}    inet {machine.address}/24" in shown.stdout
            machine.run([sys.executable, "-c", CONNECT, net.host, port], check=True, timeout=30)
            peer = server.accept()[0]
            assert peer.getpeername()[0] == machine.address  # not the host's own address
            peer.close()


def test_the_network_is_removed_when_the_test_fails(machines: Callable[[int], Network]) -> None:
    machines(0)  # skips where namespaces cannot be made
    with pytest.raises(RuntimeError, match="a failing test"), network(1) as net:
        machine = net.namespaces[0]
        sleeper = machine.start(["sleep", "600"])
        raise RuntimeError("a failing test")
    assert sleeper.returncode is not None
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert machine.name not in listed
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"{net.bridge}:" not in links
    assert not (ETC / machine.name).exists()
