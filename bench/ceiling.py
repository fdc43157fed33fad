"""The floor under scenario 2: how many requests a second an endpoint that does nothing serves
on this machine, through the server stack gpufleet runs on (uvicorn with uvloop and
httptools, Starlette, FastAPI, a pydantic body, a header dependency) and the harness's
clients, on the same box.

A job's lifecycle is four requests (submit, then acknowledged, running and completed), so a
quarter of this rate is what scenario 2 could reach with no database and no logic at all:

    .venv/bin/python -m bench.ceiling            # 20 s, 4 client processes x 32 in flight

It measures with each client in turn (`--clients`): httpx, the submitter's and admin calls'
client (which, on a 2-core box, runs out of CPU before the server does); aiohttp, the
simulated workers' client, set up as they set it up; then a bare HTTP/1.1 client (a prepared
request on keep-alive connections), to find the server stack's own limit. Beside the rate,
the client processes' CPU per request, what the harness takes from the servers it measures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import httpx
import orjson
import psutil  # type: ignore[import-untyped]

from bench.server import free_port, quiet_collector
from bench.workers import worker_session
from gpufleet.client_tls import verify_for

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


CLIENTS = ("httpx", "aiohttp", "bare")


@dataclass
class Ceiling:
    requests: int
    seconds: float
    server_cpu_share: float
    client_cpu_seconds: float
    server_cpu_seconds: float = 0.0

    @property
    def server_cpu_per_request_ms(self) -> float:
        """The server's CPU an empty request costs: the unit of #19's per-job goal."""
        return 1000 * self.server_cpu_seconds / self.requests if self.requests else 0.0

    @property
    def per_second(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def client_cpu_per_request_ms(self) -> float:
        return 1000 * self.client_cpu_seconds / self.requests if self.requests else 0.0


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


async def _httpx_loops(url: str, stop_at: float, in_flight: int) -> int:
    done = 0
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


async def _aiohttp_loops(url: str, stop_at: float, in_flight: int) -> int:
    """As `bench.workers` posts: its session, an orjson body, the answer read."""
    done = 0
    async with worker_session(url) as session:

        async def loop() -> None:
            nonlocal done
            body = {"status": "running", "attempt_id": "a_0123456789ab"}
            while time.monotonic() < stop_at:
                async with session.post(
                    "/api/workers/job/j_0123456789ab/status",
                    data=orjson.dumps(body),
                    headers={"X-Worker-Token": "t" * 43, "Content-Type": "application/json"},
                ) as resp:
                    await resp.read()
                    if resp.status != 200:
                        raise RuntimeError(f"answered {resp.status}")
                done += 1

        await asyncio.gather(*(loop() for _ in range(in_flight)))
    return done


def _client(url: str, seconds: float, in_flight: int, client: str, conn: Connection) -> None:
    quiet_collector()

    async def run() -> tuple[int, float]:
        cpu0 = time.process_time()
        stop_at = time.monotonic() + seconds
        if client == "bare":
            port = int(url.rsplit(":", 1)[1])
            loops = (_raw_loop(port, stop_at) for _ in range(in_flight))
            done = sum(await asyncio.gather(*loops))
        elif client == "aiohttp":
            done = await _aiohttp_loops(url, stop_at, in_flight)
        else:
            done = await _httpx_loops(url, stop_at, in_flight)
        return done, time.process_time() - cpu0

    try:
        import uvloop

        conn.send(uvloop.run(run()))
    finally:
        conn.close()


def _cpu_seconds(ps: psutil.Process) -> float:
    """A process's CPU time: to the nanosecond from its threads' schedstat where Linux has it
    (a short smoke run on a loaded machine can spend less than psutil's 10 ms tick), else
    psutil's user + system."""
    try:
        total = 0
        for task in Path(f"/proc/{ps.pid}/task").iterdir():
            total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return float(sum(ps.cpu_times()[:2]))


def measure(
    seconds: float = 20.0, processes: int = 4, in_flight: int = 32, client: str = "httpx"
) -> Ceiling:
    return measure_each((client,), seconds, processes, in_flight)[client]


def measure_each(
    clients: Sequence[str], seconds: float = 20.0, processes: int = 4, in_flight: int = 32
) -> dict[str, Ceiling]:
    """Each client in turn against one start of the empty endpoint's server."""
    with _reference_server() as (url, ps):
        return {c: _measure_on(url, ps, seconds, processes, in_flight, c) for c in clients}


@contextlib.contextmanager
def _reference_server() -> Iterator[tuple[str, psutil.Process]]:
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
        # One client for every poll, loading no CA bundle (BenchServer.start says why).
        with httpx.Client(timeout=1, verify=verify_for([url], True)) as probe:
            while True:
                try:
                    probe.get(url + "/docs")
                    break
                except httpx.TransportError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise RuntimeError("the reference server did not start") from None
                    time.sleep(0.1)
        yield url, psutil.Process(server.pid)
    finally:
        server.terminate()
        server.wait(10)


def _measure_on(
    url: str, ps: psutil.Process, seconds: float, processes: int, in_flight: int, client: str
) -> Ceiling:
    ctx = multiprocessing.get_context("spawn")
    pipes, procs = [], []
    cpu0, t0 = _cpu_seconds(ps), time.monotonic()
    for _ in range(processes):
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_client, args=(url, seconds, in_flight, client, child))
        proc.start()
        pipes.append(parent)
        procs.append(proc)
    answers = [p.recv() for p in pipes]
    wall = time.monotonic() - t0
    cpu = _cpu_seconds(ps) - cpu0
    for proc in procs:
        proc.join()
    cores = psutil.cpu_count() or 1
    total = sum(int(done) for done, _ in answers)
    client_cpu = sum(float(c) for _, c in answers)
    return Ceiling(total, wall, cpu / wall / cores, client_cpu, cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ceiling", description=__doc__)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--processes", type=int, default=4, help="client processes")
    parser.add_argument("--in-flight", type=int, default=32, help="requests each keeps open")
    parser.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help="which clients to measure, in turn, comma-separated (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    if unknown := sorted(set(clients) - set(CLIENTS)):
        parser.error(f"unknown client {', '.join(unknown)}: choose from {', '.join(CLIENTS)}")
    names = {
        "httpx": "httpx (submitter, admin calls)",
        "aiohttp": "aiohttp (simulated workers)",
        "bare": "a bare HTTP/1.1 client",
    }
    measured = measure_each(clients, args.seconds, args.processes, args.in_flight)
    for client, result in measured.items():
        print(
            f"{names[client]}: {result.per_second:,.0f} requests/s to an empty endpoint "
            f"({result.requests:,} in {result.seconds:.1f} s; server CPU "
            f"{result.server_cpu_share:.0%} of the machine, "
            f"{result.server_cpu_per_request_ms:.3f} ms a request; client CPU "
            f"{result.client_cpu_seconds / result.seconds:.2f} cores, "
            f"{result.client_cpu_per_request_ms:.2f} ms a request): at four requests a job, "
            f"at most {result.per_second / 4:,.0f} jobs/s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
