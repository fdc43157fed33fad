"""uvicorn's server, which tells the app when shutdown starts, so that its streams end then.

uvicorn stops accepting connections, waits for the open ones to finish (at most
`timeout_graceful_shutdown`), cancels what is left, and only then runs the lifespan's
shutdown. An event stream never finishes by itself: each one open held shutdown for the
whole grace period, then was cancelled mid-call, an ERROR and a traceback in the log.

And its HTTP protocol, whose small writes in one turn of the event loop leave together
(`OneWrite`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# Writes this small wait for the end of the loop's turn; a larger one (a file's chunk) leaves
# at once, with what waited before it, so the transport's flow control sees it as before.
_SMALL = 64 * 1024


class Server(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        on_shutdown: Callable[[], None],
        on_listening: Callable[[int], None] | None = None,
    ) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown
        self._on_listening = on_listening

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started and self._on_listening is not None:  # told the port it really got
            bound = [s.getsockname()[1] for srv in self.servers for s in srv.sockets or ()]
            self._on_listening(int(bound[0]) if bound else self.config.port)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_shutdown()  # before uvicorn waits for the connections the streams hold
        await super().shutdown(sockets)


class OneWrite:
    """A connection's transport whose small writes in one turn of the event loop leave in one
    system call. uvicorn writes an answer's head, then its body, each at once: two `send`s a
    heartbeat, the socket writes a quarter of the server's CPU at rest (#39 goal 3)."""

    __slots__ = ("_loop", "_parts", "_size", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._parts: list[bytes] = []
        self._size = 0

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._size + len(data) > _SMALL:
            if not self._parts:
                self._transport.write(data)
                return
            self._parts.append(bytes(data))
            self.flush()
            return
        if not self._parts:
            self._loop.call_soon(self.flush)
        self._parts.append(bytes(data))
        self._size += len(data)

    def flush(self) -> None:
        parts, self._parts, self._size = self._parts, [], 0
        if parts and not self._transport.is_closing():
            self._transport.write(parts[0] if len(parts) == 1 else b"".join(parts))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._parts, self._size = [], 0
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:  # the rest is the transport's own
        return getattr(self._transport, name)


class Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through `OneWrite`."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(OneWrite(transport, self.loop))  # type: ignore[arg-type]
