"""Machines on a real network for multi-node tests (#35): network namespaces on a bridge.

`network(n)` makes a bridge on the host with the address `host` and n namespaces, each with
one veth interface `eth0` on the bridge and its own address on a private /24 of 10.231.0.0/16;
the host (an orchestrator listening on it) and every other namespace are reachable from each.
Traffic between namespaces crosses the bridge, not loopback. Everything is removed on the way
out, failure or not. It needs root and iproute2 (`skip_reason()` says when they are missing).

Names and subnets are chosen under a file lock from those no other process on the machine is
using (xdist workers, other checkouts), and a namespace's leftovers from a killed run under
the same name are removed first. Inside a namespace the host name resolves to the namespace's
address (gloo binds to it) and DNS fails at once (the host's resolver is not reachable: name
look-ups would wait out its timeouts).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SUBNET = "10.231"  # 10.231.X.0/24, X chosen per network
INTERFACE = "eth0"  # each namespace's interface on the bridge
LOCK = Path("/tmp/gpufleet-netns.lock")
ETC = Path("/etc/netns")  # `ip netns exec NAME` mounts /etc/netns/NAME/FILE over /etc/FILE


def skip_reason() -> str | None:
    """Why `network()` cannot run here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "network namespaces need iproute2's `ip`"
    return None


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


@dataclass
class Namespace:
    """One machine: a network namespace with its own address on the bridge."""

    name: str
    address: str
    interface: str = INTERFACE
    processes: list[subprocess.Popen[Any]] = field(default_factory=list)

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this namespace (the host's file system, users and environment)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        return subprocess.run(self.command(argv), **kwargs)

    def start(self, argv: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """A long-running process in this namespace, in its own process group: the group is
        killed when the network goes (a worker's jobs, torchrun's ranks with it)."""
        process = subprocess.Popen(self.command(argv), start_new_session=True, **kwargs)
        self.processes.append(process)
        return process

    def stop(self) -> None:
        """Kills what `start` started, with its process groups; the machine stays usable."""
        for process in self.processes:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
        self.processes.clear()  # a reaped group's id may be another's by the next stop


@dataclass
class Network:
    bridge: str
    host: str  # the host's address on the bridge: what the namespaces reach it by
    namespaces: list[Namespace]


def free_subnet() -> int:
    """The X of a 10.231.X.0/24 that no interface of the host has an address in."""
    used = {int(m) for m in re.findall(rf"inet {SUBNET}\.(\d+)\.", ip("-o", "-4", "addr").stdout)}
    for x in range(1, 255):
        if x not in used:
            return x
    raise RuntimeError(f"every {SUBNET}.X.0/24 is in use")


@contextmanager
def network(count: int) -> Iterator[Network]:
    """A bridge and `count` namespaces on it, removed on the way out."""
    made: list[tuple[str, ...]] = []  # the `ip` commands that remove what was made, in order
    namespaces: list[Namespace] = []
    try:
        with LOCK.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # two set-ups never take one subnet
            x = free_subnet()
            bridge, host = f"gfbr{x}", f"{SUBNET}.{x}.1"
            ip("link", "del", bridge, check=False)  # a killed run's leftovers
            ip("link", "add", bridge, "type", "bridge")
            made.append(("link", "del", bridge))
            ip("addr", "add", f"{host}/24", "dev", bridge)
            ip("link", "set", bridge, "up")
            for i in range(count):
                name, veth = f"gpufleet-{x}-{i}", f"gfv{x}n{i}"
                ip("netns", "del", name, check=False)
                ip("link", "del", veth, check=False)
                ip("netns", "add", name)
                made.append(("netns", "del", name))
                address = f"{SUBNET}.{x}.{10 + i}"
                namespaces.append(Namespace(name, address))
                write_etc(name, address)
                ip("link", "add", veth, "type", "veth", "peer", "name", INTERFACE, "netns", name)
                made.append(("link", "del", veth))
                ip("link", "set", veth, "master", bridge, "up")
                inside = ("netns", "exec", name, "ip")
                ip(*inside, "addr", "add", f"{address}/24", "dev", INTERFACE)
                ip(*inside, "link", "set", INTERFACE, "up")
                ip(*inside, "link", "set", "lo", "up")
                ip(*inside, "route", "add", "default", "via", host)
        yield Network(bridge, host, namespaces)
    finally:
        for namespace in namespaces:
            namespace.stop()
        for command in reversed(made):
            ip(*command, check=False)
        for namespace in namespaces:
            shutil.rmtree(ETC / namespace.name, ignore_errors=True)


def write_etc(name: str, address: str) -> None:
    folder = ETC / name
    folder.mkdir(parents=True, exist_ok=True)
    hosts = f"127.0.0.1 localhost\n{address} {socket.gethostname()}\n"
    (folder / "hosts").write_text(hosts)
    (folder / "resolv.conf").write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
