"""Tiny real HTTP servers that receive webhooks: `Receiver` records each request and answers
the status codes it was told to, in order (then 200); `Trickler` answers one byte at a time."""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.waiting import wait_until


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class Receiver:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.answers: list[int] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                with receiver._lock:
                    receiver.received.append(
                        Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                    )
                    status = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: object) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # the default 5 drops a batch's connections (1 s retries)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def wait_for(self, count: int, within: float = 10.0) -> list[Received]:
        def arrived() -> list[Received]:
            with self._lock:
                return list(self.received) if len(self.received) >= count else []

        return wait_until(
            arrived, timeout=within, message=f"{count} webhook requests", interval=0.05
        )


@contextmanager
def receiving() -> Iterator[Receiver]:
    receiver = Receiver()
    # `shutdown` waits for the loop to look again: every 0.5 s by default, 0.05 here.
    thread = threading.Thread(target=receiver.server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.server.shutdown()
        receiver.server.server_close()
        thread.join(timeout=5)


class Trickler:
    """A receiver that never finishes its answer: it reads the request, then sends one byte
    of a status line every `every` seconds (each read of the client succeeds, so only an
    overall deadline ends the send), for at most `longest` seconds. It records when each
    connection came and when the client hung up."""

    def __init__(self, every: float = 2.0, longest: float = 60.0) -> None:
        self.every = every
        self.longest = longest
        self.accepted: list[float] = []  # time.monotonic() of each connection
        self.hung_up: list[float] = []  # when the client closed each one
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/slow"
        self._threads: list[threading.Thread] = []

    def serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted.append(time.monotonic())
            thread = threading.Thread(target=self._trickle, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _trickle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                conn.recv(65536)  # the request (small: one read is enough here)
            except OSError:
                return
            ends = time.monotonic() + self.longest
            answer = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"." * 10_000
            for byte in answer:
                if self._stop.is_set() or time.monotonic() > ends:
                    return
                try:
                    conn.sendall(bytes([byte]))
                    # a closed peer shows as a readable socket with nothing to read
                    readable, _, _ = select.select([conn], [], [], self.every)
                    if readable and not conn.recv(65536):  # (or the rest of the request)
                        raise ConnectionResetError
                except OSError:
                    with self._lock:
                        self.hung_up.append(time.monotonic())
                    return

    def wait_connected(self, count: int = 1, within: float = 10.0) -> float:
        def connected() -> float | None:
            with self._lock:
                return self.accepted[count - 1] if len(self.accepted) >= count else None

        return wait_until(
            connected,
            timeout=within,
            message=f"{count} connections to the trickling receiver",
            interval=0.02,
        )

    def wait_hung_up(self, within: float) -> float:
        def hung_up() -> float | None:
            with self._lock:
                return self.hung_up[0] if self.hung_up else None

        return wait_until(hung_up, timeout=within, message="the client to hang up", interval=0.02)

    def close(self) -> None:
        self._stop.set()
        self._listener.close()
        for thread in self._threads:
            thread.join(timeout=5)


@contextmanager
def trickling(every: float = 2.0, longest: float = 60.0) -> Iterator[Trickler]:
    trickler = Trickler(every, longest)
    thread = threading.Thread(target=trickler.serve, daemon=True)
    thread.start()
    try:
        yield trickler
    finally:
        trickler.close()
        thread.join(timeout=5)
