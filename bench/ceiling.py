"""The floor under scenario 2: how many requests a second an endpoint that does nothing serves
on this machine, through the server stack gpufleet runs on (uvicorn with uvloop and
httptools, Starlette, FastAPI, a pydantic body, a header dependency) and the harness's httpx
client, on the same box.

A job's lifecycle is four requests (submit, then acknowledged, running and completed), so a
quarter of this rate is what scenario 2 could reach with no database and no logic at all:

    .venv/bin/python -m bench.ceiling            # 20 s, 4 client processes x 32 in flight

It measures twice: with httpx, the harness's client (which, on a 2-core box, runs out of CPU
before the server does), then with a bare HTTP/1.1 client (a prepared request on keep-alive
connections), to find the server stack's own limit.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import subprocess
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection

import httpx
import psutil  # type: ignore[import-untyped]

from bench.server import free_port, quiet_collector

APP = """
from fastapi import Depends, FastAPI, Header, HTTPException
from pydantic import BaseModel

app = FastAPI()


class StatusIn(BaseModel):
    status: str
    attempt_id: str | None = None
    error: str | None = None


async def token(x_worker_token: str | None = Header(None)) -> str:
    if not x_worker_token:
        raise HTTPException(401, "no token")
    return x_worker_token


@app.post("/api/workers/job/{job_id}/status")
async def status(job_id: str, body: StatusIn, who: str = Depends(token)) -> dict:
    return {"ok": True, "job_id": job_id, "status": body.status}
"""


@dataclass
class Ceiling:
    requests: int
    seconds: float
    server_cpu_share: float

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0


_BODY = b'{"status": "running", "attempt_id": "a_0123456789ab"}'
_REQUEST = (
    b"POST /api/workers/job/j_0123456789ab/status HTTP/1.1\r\n"
    b"Host: 127.0.0.1\r\nX-Worker-Token: " + b"t" * 43 + b"\r\n"
    b"Content-Type: application/json\r\nContent-Length: " + str(len(_BODY)).encode() + b"\r\n"
    b"\r\n" + _BODY
)


async def _raw_loop(port: int, stop_at: float) -> int:
    """One keep-alive connection, one request at a time, parsed no further than needed."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    try:
        while time.monotonic() < stop_at:
            writer.write(_REQUEST)
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(head[:100].decode(errors="replace"))
            length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            done += 1
    finally:
        writer.close()
    return done


def _client(url: str, seconds: float, in_flight: int, raw: bool, conn: Connection) -> None:
    quiet_collector()

    async def run() -> int:
        if raw:
            port = int(url.rsplit(":", 1)[1])
            stop = time.monotonic() + seconds
            return sum(await asyncio.gather(*(_raw_loop(port, stop) for _ in range(in_flight))))
        done = 0
        stop_at = time.monotonic() + seconds
        limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
        async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30) as client:

            async def loop() -> None:
                nonlocal done
                body = {"status": "running", "attempt_id": "a_0123456789ab"}
                while time.monotonic() < stop_at:
                    resp = await client.post(
                        "/api/workers/job/j_0123456789ab/status",
                        json=body,
                        headers={"X-Worker-Token": "t" * 43},
                    )
                    resp.raise_for_status()
                    done += 1

            await asyncio.gather(*(loop() for _ in range(in_flight)))
        return done

    try:
        import uvloop

        conn.send(uvloop.run(run()))
    finally:
        conn.close()


def measure(
    seconds: float = 20.0, processes: int = 4, in_flight: int = 32, raw: bool = False
) -> Ceiling:
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import uvicorn, types\n"
            "m = types.ModuleType('ceiling_app')\n"
            f"exec({APP!r}, m.__dict__)\n"
            f"uvicorn.run(m.app, host='127.0.0.1', port={port}, log_level='warning')",
        ]
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(url + "/docs", timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the reference server did not start") from None
                time.sleep(0.1)
        ps = psutil.Process(server.pid)
        ctx = multiprocessing.get_context("spawn")
        pipes, procs = [], []
        cpu0, t0 = sum(ps.cpu_times()[:2]), time.monotonic()
        for _ in range(processes):
            parent, child = ctx.Pipe(duplex=False)
            proc = ctx.Process(target=_client, args=(url, seconds, in_flight, raw, child))
            proc.start()
            pipes.append(parent)
            procs.append(proc)
        total = sum(int(p.recv()) for p in pipes)
        wall = time.monotonic() - t0
        cpu = sum(ps.cpu_times()[:2]) - cpu0
        for proc in procs:
            proc.join()
        cores = psutil.cpu_count() or 1
        return Ceiling(total, wall, cpu / wall / cores)
    finally:
        server.terminate()
        server.wait(10)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ceiling", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--in-flight", type=int, default=32, help="requests each keeps open")
    args = parser.parse_args(argv)
    for raw, client in ((False, "httpx, as the harness"), (True, "a bare HTTP/1.1 client")):
        result = measure(args.seconds, args.processes, args.in_flight, raw)
        print(
            f"{client}: {result.per_second:,.0f} requests/s to an empty endpoint "
            f"({result.requests:,} in {result.seconds:.1f} s; server CPU "
            f"{result.server_cpu_share:.0%} of the machine): at four requests a job, at most "
            f"{result.per_second / 4:,.0f} jobs/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
