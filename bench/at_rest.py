"""The server's CPU at rest with its workers' streams open and nothing else (#39 goal 3): what
the streams' keep-alive pings and the periodic loops cost, without scenario 3's heartbeats.

    .venv/bin/python -m bench.at_rest --workers 3000 --window 60

Registers that many workers, opens each one's event stream (one aiohttp session), waits 20 s,
then reads the server's CPU over the window and counts the pings the streams received. The
server runs with `--heartbeat-timeout 3600`, so no worker is lost for its silence.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

from bench.server import running_server
from bench.simworker import Cred
from bench.workers import create_workers

SETTLE_S = 20.0
REGISTER = {"gpu_count": 1, "gpu_name": "Bench GPU", "gpu_vram_gb": 24, "features": ["attempts"]}


class Streams:
    """The open streams and what they received."""

    def __init__(self) -> None:
        self.connected = 0
        self.pings = 0

    async def follow(
        self, session: aiohttp.ClientSession, cred: Cred, gate: asyncio.Semaphore
    ) -> None:
        headers = {"X-Worker-Token": cred.token}
        async with gate:
            answer = await session.post(
                "/api/workers/register", json={"name": cred.id, **REGISTER}, headers=headers
            )
            if answer.status != 200:
                raise RuntimeError(f"register: {answer.status} {await answer.text()}")
            stream = await session.get(
                "/api/workers/stream", params={"worker_id": cred.id}, headers=headers
            )
        async for line in stream.content:
            if line.startswith(b"data: "):
                if b'"ping"' in line:
                    self.pings += 1
                elif b'"connected"' in line:
                    self.connected += 1


async def measure(workers: int, window: float) -> dict[str, float]:
    data_dir = Path(tempfile.mkdtemp(prefix="gf-at-rest-"))
    flags: dict[str, Any] = {"heartbeat-timeout": 3600}  # no worker is lost for its silence
    with running_server(data_dir, **flags) as server:
        creds = await create_workers(server.url, server.admin_headers(), workers)
        streams, gate = Streams(), asyncio.Semaphore(16)
        connector = aiohttp.TCPConnector(limit=0)
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(server.url, connector=connector, timeout=timeout) as s:
            tasks = [asyncio.create_task(streams.follow(s, c, gate)) for c in creds]
            try:
                while streams.connected < workers:
                    done = [t for t in tasks if t.done()]
                    if done:
                        raise RuntimeError(f"a stream ended: {done[0].exception()!r}")
                    await asyncio.sleep(1)
                await asyncio.sleep(SETTLE_S)
                server.mark()
                before = streams.pings
                await asyncio.sleep(window)
                usage = server.usage()
                pings = streams.pings - before
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "workers": workers,
        "cpu_of_one_core": round(usage.cpu_seconds / usage.wall_seconds, 4),
        "pings_per_s": round(pings / window, 1),
        "cpu_ms_per_ping": round(usage.cpu_seconds * 1000 / max(1, pings), 4),
        "rss_mib": round(usage.rss_bytes / 2**20, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=3000)
    parser.add_argument("--window", type=float, default=60.0, help="seconds measured")
    args = parser.parse_args()
    print(asyncio.run(measure(args.workers, args.window)))


if __name__ == "__main__":
    main()
