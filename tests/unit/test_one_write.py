"""The server's connections write an answer's head and body in one system call
(server/serving.py `OneWrite`), and nothing else changes: order, closing, large bodies."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from gpufleet.server.serving import OneWrite


class Transport:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str) -> Any:
        return ("127.0.0.1", 8000) if name == "sockname" else None


def one_write(transport: Transport) -> OneWrite:
    return OneWrite(cast(asyncio.Transport, transport), asyncio.get_running_loop())


async def test_a_head_and_a_body_written_in_one_turn_leave_in_one_write() -> None:
    transport = Transport()
    conn = one_write(transport)

    conn.write(b"HTTP/1.1 200 OK\r\n\r\n")
    conn.write(b'{"ok":true}')
    assert transport.writes == []
    await asyncio.sleep(0)

    assert transport.writes == [b'HTTP/1.1 200 OK\r\n\r\n{"ok":true}']


async def test_closing_writes_what_waits_first() -> None:
    transport = Transport()
    conn = one_write(transport)
    conn.write(b"head")
    conn.write(b"body")

    conn.close()

    assert transport.writes == [b"headbody"] and transport.closed
    await asyncio.sleep(0)
    assert transport.writes == [b"headbody"]


async def test_a_large_write_leaves_at_once_after_what_waited() -> None:
    """A file's chunk is not held: the transport's flow control sees it as it did."""
    transport = Transport()
    conn = one_write(transport)
    chunk = b"x" * (64 * 1024)

    conn.write(b"head")
    conn.write(chunk)

    assert transport.writes == [b"head" + chunk]


async def test_the_rest_is_the_transports() -> None:
    conn = one_write(Transport())

    assert conn.get_extra_info("sockname") == ("127.0.0.1", 8000)
    assert not conn.is_closing()


async def test_a_large_write_with_nothing_waiting_is_passed_on_as_it_is() -> None:
    transport = Transport()
    chunk = b"x" * (4 * 1024 * 1024)

    one_write(transport).write(chunk)

    assert len(transport.writes) == 1 and transport.writes[0] is chunk
