"""uvicorn's server, which tells the app when shutdown starts, so that its streams end then.

uvicorn stops accepting connections, waits for the open ones to finish (at most
`timeout_graceful_shutdown`), cancels what is left, and only then runs the lifespan's
shutdown. An event stream never finishes by itself: each one open held shutdown for the
whole grace period, then was cancelled mid-call, an ERROR and a traceback in the log.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import uvicorn


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
