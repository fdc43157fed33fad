"""Simulated workers spread over processes, steered from the parent: each process runs many
(`bench/simworker.py`) and tells the parent what they saw and which jobs they completed.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from multiprocessing.connection import Connection
from typing import Any

import httpx

from bench.simworker import COMPLETE, HOLD, Cred, Seen, run_process, worker_session
from gpufleet.client_tls import verify_for

# The scenarios' words for the fleet (its modes, what a worker saw) come from here too.
__all__ = [
    "COMPLETE",
    "HOLD",
    "Completions",
    "Cred",
    "Fleet",
    "Seen",
    "create_workers",
    "worker_session",
]


class Completions:
    """Jobs the fleet completed, as its processes tell them; wait for one by id."""

    def __init__(self) -> None:
        self.done: set[str] = set()
        self._waiting: dict[str, asyncio.Future[None]] = {}

    def drain(self, heard: Connection) -> None:
        while heard.poll():
            job_id = heard.recv()
            self.done.add(job_id)
            waiter = self._waiting.pop(job_id, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    async def wait(self, job_id: str, within: float) -> bool:
        """Whether the job completed within `within` seconds."""
        if job_id in self.done:
            return True
        waiter = self._waiting.setdefault(job_id, asyncio.get_running_loop().create_future())
        try:
            async with asyncio.timeout(within):
                await waiter
        except TimeoutError:
            self._waiting.pop(job_id, None)
            return False
        return True


class Fleet:
    """Simulated workers spread over processes, steered from the parent."""

    def __init__(
        self,
        url: str,
        creds: Sequence[Cred],
        *,
        mode: str = COMPLETE,
        heartbeat_interval: float = 30.0,
        per_process: int = 2500,
    ) -> None:
        self.creds = list(creds)
        nprocs = max(1, -(-len(self.creds) // per_process))
        ctx = multiprocessing.get_context("spawn")
        self._conns: list[Connection] = []
        self._completions: list[Connection] = []
        self._procs: list[Any] = []
        self._owner: dict[str, int] = {}
        for i in range(nprocs):
            part = self.creds[i::nprocs]
            for c in part:
                self._owner[c.id] = i
            parent, child = ctx.Pipe()
            heard, told = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=run_process,
                args=(child, url, part, mode, heartbeat_interval, told),
                daemon=True,
            )
            proc.start()
            self._conns.append(parent)
            self._completions.append(heard)
            self._procs.append(proc)

    def _ask(self, i: int, cmd: str, arg: Any = None) -> Any:
        self._conns[i].send((cmd, arg))
        status, value = self._conns[i].recv()
        if status != "ok":
            raise RuntimeError(f"worker process {i}: {cmd} failed: {value}")
        return value

    async def ask_all(self, cmd: str, arg: Any = None) -> list[Any]:
        def one(i: int) -> Any:
            return self._ask(i, cmd, arg)

        return list(
            await asyncio.gather(*(asyncio.to_thread(one, i) for i in range(len(self._conns))))
        )

    async def start(
        self,
        within: float,
        concurrency: int = 64,
        progress: Callable[[str], None] | None = None,
        partial: bool = False,
    ) -> float:
        """Register every worker and open its stream; seconds it took.

        Past `within` seconds: an error, or with `partial`, go on with those connected.
        """
        began = last_note = time.monotonic()
        per = max(1, concurrency // len(self._conns))
        await self.ask_all("start", per)
        pause = 0.02  # growing to 0.25 s: a small fleet streams within the first pauses
        while True:
            status = await self.status()
            if status["connected"] >= len(self.creds):
                return time.monotonic() - began
            if progress is not None and time.monotonic() - last_note > 10:
                last_note = time.monotonic()
                progress(
                    f"{status['connected']}/{len(self.creds)} workers streaming, "
                    f"{status['reconnects']} reconnects, {len(status['errors'])} errors"
                )
            if time.monotonic() - began > within:
                if partial:
                    return time.monotonic() - began
                raise RuntimeError(
                    f"only {status['connected']} of {len(self.creds)} workers connected in "
                    f"{within:g} s; errors: {status['errors'][:5]}"
                )
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, 0.25)

    async def status(self) -> dict[str, Any]:
        parts = await self.ask_all("status")
        counts: dict[str, int] = {}
        for p in parts:
            for k, v in p["counts"].items():
                counts[k] = counts.get(k, 0) + v
        return {
            "registered": sum(p["registered"] for p in parts),
            "connected": sum(p["connected"] for p in parts),
            "reconnects": sum(p["reconnects"] for p in parts),
            "errors": [e for p in parts for e in p["errors"]],
            "counts": counts,
        }

    @contextlib.asynccontextmanager
    async def following(self) -> AsyncIterator[Completions]:
        """Hear each job's completion as its worker's report is answered (a pipe a process,
        read on the event loop), until the block ends."""
        done = Completions()
        loop = asyncio.get_running_loop()
        for heard in self._completions:
            loop.add_reader(heard.fileno(), done.drain, heard)
        await self.ask_all("follow", True)
        try:
            yield done
        finally:
            await self.ask_all("follow", False)
            for heard in self._completions:
                loop.remove_reader(heard.fileno())
                done.drain(heard)  # what came before the workers stopped telling

    async def set_heartbeat(self, phase: str, interval: float) -> None:
        await self.ask_all("heartbeat", (phase, interval))

    async def busy(self) -> list[tuple[str, str, str]]:
        return [b for part in await self.ask_all("busy") for b in part]

    async def kill(self, worker_ids: Iterable[str]) -> list[str]:
        by_proc: dict[int, list[str]] = {}
        for w in worker_ids:
            by_proc.setdefault(self._owner[w], []).append(w)

        def one(i: int, ids: list[str]) -> list[str]:
            return list(self._ask(i, "kill", ids))

        asks = (asyncio.to_thread(one, i, ids) for i, ids in by_proc.items())
        parts = await asyncio.gather(*asks)
        return [w for p in parts for w in p]

    async def finish(self) -> int:
        return sum(await self.ask_all("finish"))

    async def collect(self) -> tuple[list[Seen], list[tuple[str, float, int]]]:
        seen: list[Seen] = []
        beats: list[tuple[str, float, int]] = []
        for part in await self.ask_all("collect"):
            seen += part["seen"]
            beats += part["beats"]
        return seen, beats

    async def wait_for(self, kind: str, count: int, within: float) -> int:
        """Wait until the workers together saw `count` events of `kind`; how many they saw."""
        deadline = time.monotonic() + within
        while True:
            seen = (await self.status())["counts"].get(kind, 0)
            if seen >= count or time.monotonic() > deadline:
                return int(seen)
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        def one(i: int) -> None:
            with contextlib.suppress(EOFError, OSError, BrokenPipeError):
                self._conns[i].send(("stop", None))
                self._conns[i].recv()

        await asyncio.gather(*(asyncio.to_thread(one, i) for i in range(len(self._conns))))
        for proc in self._procs:
            proc.join(timeout=15)
            if proc.is_alive():
                proc.kill()


async def create_workers(
    url: str,
    admin_headers: dict[str, str],
    count: int,
    *,
    prefix: str = "bench",
    labels: dict[str, str] | None = None,
    concurrency: int = 16,
) -> list[Cred]:
    """Worker records and tokens through the admin API, `concurrency` requests at a time."""
    gate = asyncio.Semaphore(concurrency)
    limits = httpx.Limits(max_connections=concurrency + 4)
    verify = verify_for([url], True)  # no CA bundle loaded for plain http
    async with httpx.AsyncClient(
        base_url=url, headers=admin_headers, timeout=60, limits=limits, verify=verify
    ) as client:

        async def one(i: int) -> Cred:
            async with gate:
                resp = await client.post(
                    "/api/admin/workers",
                    json={
                        "name": f"{prefix}-{i:05d}",
                        "worker_type": "persistent",
                        "labels": labels or {},
                    },
                )
            if resp.status_code != 201:
                raise RuntimeError(f"creating worker {i}: {resp.status_code} {resp.text[:200]}")
            body = resp.json()
            return Cred(body["worker_id"], body["token"])

        return list(await asyncio.gather(*(one(i) for i in range(count))))
