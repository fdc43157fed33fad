"""A TCP relay between workers and the orchestrator that a test can cut or partition.

Workers are pointed at the relay (`--orchestrator-url http://127.0.0.1:<relay port>`), so the
test decides what the network does:

- `cut()`: every open connection is reset at once, mid-stream (SSE streams, heartbeats and
  reports in flight); new connections go through as before.
- `partition(blackhole=False)`: existing connections are reset and new ones are accepted and
  reset straight away: the orchestrator is unreachable, and says so fast.
- `partition(blackhole=True)`: bytes vanish both ways and new connections hang: requests time
  out rather than fail. `heal()` resets what the partition held, as a router that lost its
  state would.

The relay runs its own event loop on a daemon thread; the methods are called from the test's
thread and return once the relay has acted.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from tests.e2e.conftest import free_port

_CHUNK = 64 * 1024


class _Link:
    """One client connection and, when open, its connection to the orchestrator."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.frozen = False  # bytes are dropped (a black-holed partition)
        self.dead = asyncio.Event()

    def reset(self) -> None:
        """Close both sides with a TCP reset, as a broken network path would."""
        self.dead.set()
        for writer in (self.client, self.upstream):
            if writer is None or writer.transport.is_closing():
                continue
            sock = writer.get_extra_info("socket")
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


class Proxy:
    def __init__(self, upstream_port: int) -> None:
        self.port = free_port()
        self.upstream_port = upstream_port
        self.url = f"http://127.0.0.1:{self.port}"
        self.mode = "open"  # "open" | "refuse" | "blackhole"
        self.connections = 0
        self.resets = 0  # connections the test broke
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="chaos-proxy", daemon=True)

    # -- test side ---------------------------------------------------------------------

    def start(self) -> Proxy:
        self._thread.start()
        if not self._ready.wait(10):
            raise AssertionError(f"the relay did not start listening on port {self.port}")
        return self

    def cut(self) -> int:
        """Reset every open connection; the number reset."""
        return int(self._call(self._reset_all))

    def partition(self, *, blackhole: bool = False) -> int:
        def act() -> int:
            if blackhole:
                self.mode = "blackhole"
                for link in self._links:
                    link.frozen = True
                return 0
            self.mode = "refuse"
            return self._reset_all()

        return int(self._call(act))

    def heal(self) -> int:
        def act() -> int:
            self.mode = "open"
            return self._reset_all(only_frozen=True)

        return int(self._call(act))

    def stop(self) -> None:
        if self._stopped is not None and self._thread.is_alive():
            self._call(self._stopped.set)
            self._thread.join(10)

    # -- relay side --------------------------------------------------------------------

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=10)

    def _reset_all(self, *, only_frozen: bool = False) -> int:
        doomed = [link for link in self._links if link.frozen or not only_frozen]
        for link in doomed:
            link.reset()
        self.resets += len(doomed)
        return len(doomed)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopped = asyncio.Event()
        server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self._ready.set()
        try:
            await self._stopped.wait()
        finally:
            server.close()
            for link in list(self._links):
                link.reset()
            await server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        self._links.add(link)
        self.connections += 1
        try:
            if self.mode == "refuse":
                return
            if self.mode == "blackhole":
                link.frozen = True
                await link.dead.wait()
                return
            try:
                up_reader, link.upstream = await asyncio.open_connection(
                    "127.0.0.1", self.upstream_port
                )
            except OSError:
                return  # the orchestrator is down: the client sees a reset, as it would
            await asyncio.gather(
                self._pump(reader, link.upstream, link), self._pump(up_reader, writer, link)
            )
        finally:
            link.reset()
            self._links.discard(link)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: _Link
    ) -> None:
        try:
            while not link.dead.is_set():
                data = await src.read(_CHUNK)
                if not data:
                    if link.frozen:  # even a goodbye is lost in a black hole
                        await link.dead.wait()
                    elif dst.can_write_eof() and not dst.transport.is_closing():
                        dst.write_eof()
                    return
                if link.frozen:
                    continue
                dst.write(data)
                await dst.drain()
        except (OSError, RuntimeError):
            link.reset()
