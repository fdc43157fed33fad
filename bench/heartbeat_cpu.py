"""The server's CPU a heartbeat, in process (#39 goal 3): the app's own path, no HTTP client.

    .venv/bin/python -m bench.heartbeat_cpu --workers 2000 --rounds 5 [--profile out.prof]

Starts the app (lifespan, middlewares, SQLite in a temporary folder) with its loops stopped,
creates and registers that many workers, then sends each one's idle heartbeat (the body the
simulated and real agents send) as a raw ASGI call, round after round, flushing the kept
heartbeats once a round as the `heartbeats` loop does. Prints the CPU (`time.process_time`)
a heartbeat, the flush's share included, and apart the first round's (each worker's first
heartbeat after registering). With `--code DIR` it runs that checkout's app
instead (a subprocess with its `src` first on the path): compare two in the same minute.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

REGISTER = {"gpu_count": 1, "gpu_name": "Bench GPU", "gpu_vram_gb": 24, "features": ["attempts"]}


async def call(app: Any, path: str, body: bytes, headers: list[tuple[bytes, bytes]]) -> int:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), *headers],
        "client": ("127.0.0.1", 40000),
        "server": ("test", 80),
        "state": {},
    }
    sent = False
    status = 0

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    await app(scope, receive, send)
    return status


async def measure(workers: int, rounds: int, profile: Path | None) -> dict[str, float]:
    import httpx
    from asgi_lifespan import LifespanManager

    from gpufleet import protocol
    from gpufleet.server.app import create_app
    from gpufleet.server.services import agents
    from gpufleet.server.settings import ServerSettings

    async def quiet(_ctx: Any, supervisor: Any) -> None:
        await supervisor.close()

    data = Path(tempfile.mkdtemp(prefix="gf-hb-cpu-"))
    settings = ServerSettings(data_dir=data, heartbeat_timeout=3600, print_admin_key=False)
    app = create_app(settings, on_start=quiet)
    async with LifespanManager(app, startup_timeout=60):
        ctx = app.state.ctx
        key = (data / "admin.token").read_text().strip()
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://test",
            headers={"Authorization": f"Bearer {key}"},
        ) as admin:
            creds = []
            for i in range(workers):
                answer = await admin.post(
                    "/api/admin/workers", json={"name": f"hb-{i:05d}", "worker_type": "persistent"}
                )
                creds.append((answer.json()["worker_id"], answer.json()["token"]))
            for worker_id, token in creds:
                body = orjson.dumps({"name": worker_id, **REGISTER})
                hdrs = [(b"x-worker-token", token.encode())]
                assert await call(app, protocol.WORKER_API + "/register", body, hdrs) == 200
        beats = [
            (
                orjson.dumps(protocol.heartbeat(worker_id, None, None)),
                [(b"x-worker-token", token.encode())],
            )
            for worker_id, token in creds
        ]
        await agents.flush_heartbeats(ctx)
        path = protocol.HEARTBEAT
        # The first round after registering, as a fleet's first minute (and scenario 3's slow
        # window) sees it: the server's loops' pass over what registering evicted included.
        began = time.process_time()
        refresh = getattr(ctx.store, "refresh_workers", None)
        if refresh is not None:
            await refresh()
        for body, hdrs in beats:
            assert await call(app, path, body, hdrs) == 200
        await agents.flush_heartbeats(ctx)
        first = time.process_time() - began
        profiler = cProfile.Profile() if profile else None
        if profiler:
            profiler.enable()
        began = time.process_time()
        for _ in range(rounds):
            for body, hdrs in beats:
                await call(app, path, body, hdrs)
            await agents.flush_heartbeats(ctx)
        spent = time.process_time() - began
        if profiler and profile:
            profiler.disable()
            profiler.dump_stats(str(profile))
    n = workers * rounds
    return {
        "heartbeats": n,
        "cpu_s": round(spent, 3),
        "ms_a_heartbeat": round(spent / n * 1e3, 4),
        "ms_a_first_heartbeat": round(first / workers * 1e3, 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.heartbeat_cpu", description=__doc__)
    parser.add_argument("--workers", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profile", type=Path, default=None, help="cProfile stats file")
    parser.add_argument("--code", type=Path, default=None, help="another checkout's app")
    args = parser.parse_args()
    if args.code is not None:
        env = {**os.environ, "PYTHONPATH": f"{args.code / 'src'}:{Path.cwd()}"}
        argv = ["--workers", str(args.workers), "--rounds", str(args.rounds)]
        if args.profile:
            argv += ["--profile", str(args.profile)]
        cmd = [sys.executable, "-m", "bench.heartbeat_cpu", *argv]
        raise SystemExit(subprocess.call(cmd, env=env))
    print(json.dumps(asyncio.run(measure(args.workers, args.rounds, args.profile))))


if __name__ == "__main__":
    main()
