"""An upload over a real socket: the body goes as a Content-Length stream (what an object
store's presigned PUT takes), read from disk a chunk at a time, never whole in memory."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import tracemalloc
from pathlib import Path

from gpufleet.worker.backoff import Backoff
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.settings import AgentSettings
from gpufleet.worker.uploads import BandwidthLimiter, Uploader

SIZE = 48 * 1024 * 1024


class Receiver:
    """A minimal HTTP/1.1 server: the announce answer, then a PUT hashed as it arrives."""

    def __init__(self) -> None:
        self.put_headers: dict[str, str] = {}
        self.paths: list[str] = []
        self.closed = asyncio.Event()
        self.put_sha = ""
        self.put_size = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            request_line, *lines = head.decode().split("\r\n")
            method, path, _ = request_line.split(" ")
            self.paths.append(f"{method} {path}")
            headers = {k.lower(): v.strip() for k, v in (x.split(":", 1) for x in lines if x)}
            length = int(headers.get("content-length", "0"))
            sha, left = hashlib.sha256(), length
            while left:
                chunk = await reader.read(min(left, 1 << 20))
                sha.update(chunk)
                left -= len(chunk)
            if method == "POST":
                answer = {
                    "upload_id": "u_1",
                    "method": "PUT",
                    "url": "/put/u_1",
                    "headers": {},
                    "via": "orchestrator",
                }
                status = "200 OK"
            else:
                self.put_headers, self.put_sha, self.put_size = headers, sha.hexdigest(), length
                answer, status = {"id": "r_1"}, "201 Created"
            body = json.dumps(answer).encode()
            writer.write(
                f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        writer.close()
        await writer.wait_closed()
        self.closed.set()


async def test_a_large_file_streams_over_a_socket_with_its_length_in_bounded_memory(
    tmp_path: Path,
) -> None:
    data_file = tmp_path / "output" / "big.bin"
    data_file.parent.mkdir()
    with data_file.open("wb") as out:
        for _ in range(SIZE // (1 << 20)):
            out.write(os.urandom(1 << 20))
    expected = hashlib.sha256(data_file.read_bytes()).hexdigest()

    receiver = Receiver()
    server = await asyncio.start_server(receiver.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    settings = AgentSettings(orchestrator_url=f"http://127.0.0.1:{port}", worker_token="wt_test")
    client = OrchestratorClient(settings)
    uploader = Uploader(
        "j_1", "a_1", tmp_path, client, BandwidthLimiter(0), lambda: Backoff(0.01, 0.1)
    )
    tracemalloc.start()
    try:
        stored = await uploader.upload("output/big.bin")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        await client.aclose()
        await asyncio.wait_for(receiver.closed.wait(), 5)  # the connection ends, both sides
        server.close()
        await server.wait_closed()

    assert stored is not None and stored.sha256 == expected
    assert receiver.paths == ["POST /api/workers/job/j_1/upload", "PUT /put/u_1"]
    assert receiver.put_sha == expected and receiver.put_size == SIZE
    assert receiver.put_headers["content-length"] == str(SIZE)
    assert "transfer-encoding" not in receiver.put_headers
    assert receiver.put_headers["x-worker-token"] == "wt_test"  # a path on the orchestrator
    assert peak < 8 * 1024 * 1024, f"the upload held {peak} bytes at once"
