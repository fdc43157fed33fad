"""Simulated workers: many per process, spread over processes, speaking the worker protocol.

Each simulated worker registers, keeps its event stream (SSE) open, heartbeats, and answers
offers the way `gpufleet worker` does (acknowledged, running, then completed at once, or
held until told to finish). Every process runs one asyncio loop (uvloop) and one aiohttp
client session; the parent steers them through a pipe and collects what they saw, stamped with
the system-wide monotonic clock (comparable across processes) and the wall clock.

The workers speak aiohttp, not httpx (which the rest of the harness uses): the harness shares
the machine with the servers it measures, and httpx took a millisecond or more of CPU a
request here (`python -m bench.ceiling` compares the clients).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import httpx
import orjson

from bench.sse import Decoder

COMPLETE = "complete"  # acknowledge, run, complete at once
HOLD = "hold"  # acknowledge and run, then hold the job until told to finish
# As `httpx.Timeout(60.0)` was: 60 s to connect and between reads, none on a whole request,
# and none between reads on a stream (it is quiet between pings).
REQUEST_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=60.0, sock_read=60.0)
STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=60.0, sock_read=None)
# What a request can fail with short of an answer: aiohttp's own errors and its timeouts.
TRANSPORT_ERRORS = (aiohttp.ClientError, TimeoutError)


def worker_session(url: str) -> aiohttp.ClientSession:
    """The HTTP client of one process's simulated workers (call it inside the running loop).

    One session for the whole process. httpx had one client per 32 workers because httpcore
    scans its whole pool on every request; aiohttp's connector takes an idle connection off a
    per-host deque, so one pool costs no more with 2,500 streams in it, and the workers'
    requests share its idle keep-alive connections (fewer connects than a pool per group).
    No cap (limit=0): the open streams and their requests never wait for a connection. An
    idle connection is dropped after 4 s, before uvicorn's 5 s keep-alive closes it under a
    request (a POST is not retried). No cookie jar: the protocol has no cookies.
    """
    return aiohttp.ClientSession(
        base_url=url,
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=4.0),
        timeout=REQUEST_TIMEOUT,
        cookie_jar=aiohttp.DummyCookieJar(),
    )


@dataclass(frozen=True, slots=True)
class Cred:
    id: str
    token: str


@dataclass(frozen=True, slots=True)
class Seen:
    """Something a worker saw or did, with both clocks."""

    kind: str  # offer, resend, running, done, refused, cancel
    worker_id: str
    job_id: str
    attempt_id: str
    mono: float
    wall: float


@dataclass
class _Held:
    job_id: str
    attempt_id: str


@dataclass
class _Sim:
    cred: Cred
    held: _Held | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    seen_attempts: set[str] = field(default_factory=set)


class _Process:
    """The simulated workers of one process."""

    def __init__(
        self,
        url: str,
        creds: Sequence[Cred],
        mode: str,
        interval: float,
        completions: Connection | None = None,
    ) -> None:
        self.url = url
        self.mode = mode
        self.interval = interval
        self.phase = "start"
        self.changed = asyncio.Event()
        self.sims = {c.id: _Sim(c) for c in creds}
        self.seen: list[Seen] = []
        self.beats: list[tuple[str, float, int]] = []  # phase, latency s, status code
        self.registered: set[str] = set()
        self.streaming: set[str] = set()  # workers whose stream is open now
        self.reconnects = 0
        self.errors: list[str] = []
        self.http = worker_session(url)
        # Job ids of completed jobs go out here while the parent follows them ("follow").
        self.completions = completions
        self.following = False

    def note(self, kind: str, sim: _Sim, job_id: str, attempt_id: str) -> None:
        self.seen.append(Seen(kind, sim.cred.id, job_id, attempt_id, time.monotonic(), time.time()))

    def error(self, what: str) -> None:
        if len(self.errors) < 50:
            self.errors.append(what)

    async def post(self, sim: _Sim, path: str, body: dict[str, Any]) -> tuple[int, bytes]:
        """The answer's status code and body."""
        async with self.http.post(
            path,
            data=orjson.dumps(body),
            headers={"X-Worker-Token": sim.cred.token, "Content-Type": "application/json"},
        ) as resp:
            return resp.status, await resp.read()

    # ---- one worker ------------------------------------------------------------------------

    async def start_worker(self, sim: _Sim, gate: asyncio.Semaphore) -> None:
        """Register and open the stream (at most `gate` at a time), then heartbeat."""
        opened = asyncio.Event()
        async with gate:
            sim.tasks.append(asyncio.create_task(self.session(sim, opened)))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(300):
                    await opened.wait()
        sim.tasks.append(asyncio.create_task(self.heartbeats(sim)))

    async def session(self, sim: _Sim, opened: asyncio.Event) -> None:
        """Register, stream until the stream ends, and again, as `gpufleet worker` does."""
        while True:
            if await self.register(sim):
                await self.stream(sim, opened)
                self.reconnects += 1
            await asyncio.sleep(random.uniform(1.0, 3.0))  # backoff with jitter

    async def register(self, sim: _Sim) -> bool:
        body = {
            "name": sim.cred.id,
            "persistent": True,
            "gpu_count": 1,
            "gpu_name": "Bench GPU",
            "gpu_vram_gb": 24,
            "accelerator_type": "cuda",
            "agent": "gpufleet-bench",
            "features": ["command", "attempts"],  # speaks gpufleet's dialect
        }
        if sim.held is not None:
            body |= {"current_job_id": sim.held.job_id, "current_attempt_id": sim.held.attempt_id}
        try:
            status, answer = await self.post(sim, "/api/workers/register", body)
        except TRANSPORT_ERRORS as exc:
            self.error(f"register {sim.cred.id}: {exc!r}")
            return False
        if status != 200:
            self.error(f"register {sim.cred.id}: {status} {_text(answer)}")
            return False
        self.registered.add(sim.cred.id)
        if orjson.loads(answer).get("abandon_job") and sim.held is not None:
            sim.held = None
        return True

    async def stream(self, sim: _Sim, opened: asyncio.Event) -> None:
        try:
            async with self.http.get(
                "/api/workers/stream",
                params={"worker_id": sim.cred.id},
                headers={"X-Worker-Token": sim.cred.token},
                timeout=STREAM_TIMEOUT,
            ) as resp:
                if resp.status != 200:
                    self.error(f"stream {sim.cred.id}: {resp.status}")
                    return
                decoder = Decoder()
                # Whatever has arrived, not a line at a time: one wake-up per chunk, and no
                # cap on a line's length (readline() gives up past 128 KiB).
                async for chunk in resp.content.iter_any():
                    for sse in decoder.feed(chunk):
                        await self.on_event(sim, opened, orjson.loads(sse.data))
        except TRANSPORT_ERRORS as exc:
            self.error(f"stream {sim.cred.id}: {exc!r}")
        finally:
            self.streaming.discard(sim.cred.id)

    async def on_event(self, sim: _Sim, opened: asyncio.Event, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "connected":
            self.streaming.add(sim.cred.id)
            opened.set()
        elif kind == "job_submit":
            await self.offered(sim, event)
        elif kind == "job_cancel":
            await self.cancelled(sim, event)

    async def offered(self, sim: _Sim, event: dict[str, Any]) -> None:
        job_id, attempt_id = event["job_id"], event["attempt_id"]
        if attempt_id in sim.seen_attempts:
            self.note("resend", sim, job_id, attempt_id)
            return
        sim.seen_attempts.add(attempt_id)
        self.note("offer", sim, job_id, attempt_id)
        if sim.held is not None:
            return  # busy: a real agent ignores the offer; the server re-sends it
        sim.held = _Held(job_id, attempt_id)
        for status in ("acknowledged", "running"):
            if not await self.report(sim, status):
                return
        if self.mode == COMPLETE:
            await self.report(sim, "completed")

    async def report(self, sim: _Sim, status: str) -> bool:
        held = sim.held
        assert held is not None
        try:
            code, answer = await self.post(
                sim,
                f"/api/workers/job/{held.job_id}/status",
                {"status": status, "attempt_id": held.attempt_id},
            )
        except TRANSPORT_ERRORS as exc:
            self.error(f"report {status} {held.job_id}: {exc!r}")
            sim.held = None
            return False
        if code != 200:
            self.note("refused", sim, held.job_id, held.attempt_id)
            if code != 409:
                self.error(f"report {status}: {code} {_text(answer)}")
            sim.held = None
            return False
        if status == "running":
            self.note("running", sim, held.job_id, held.attempt_id)
        elif status in ("completed", "cancelled"):
            self.note("done" if status == "completed" else "cancel", sim, *_ids(held))
            sim.held = None
            if status == "completed" and self.following and self.completions is not None:
                self.completions.send(held.job_id)
        return True

    async def cancelled(self, sim: _Sim, event: dict[str, Any]) -> None:
        held = sim.held
        if held is not None and held.job_id == event.get("job_id"):
            await self.report(sim, "cancelled")

    async def heartbeats(self, sim: _Sim) -> None:
        # Real fleets heartbeat out of step: start at a random point of the interval.
        delay = random.uniform(0, self.interval)
        while True:
            changed = self.changed
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await changed.wait()
                    delay = random.uniform(0, self.interval)  # new interval: re-spread
                    continue
            held = sim.held
            body = {
                "worker_id": sim.cred.id,
                "status": "busy" if held else "idle",
                "current_job_id": held.job_id if held else None,
                "current_attempt_id": held.attempt_id if held else None,
            }
            phase, sent = self.phase, time.monotonic()
            try:
                code, _ = await self.post(sim, "/api/workers/heartbeat", body)
                self.beats.append((phase, time.monotonic() - sent, code))
            except TRANSPORT_ERRORS as exc:
                self.beats.append((phase, time.monotonic() - sent, 0))
                self.error(f"heartbeat {sim.cred.id}: {exc!r}")
            delay = max(0.0, self.interval - (time.monotonic() - sent))

    # ---- steering --------------------------------------------------------------------------

    async def handle(self, cmd: str, arg: Any) -> Any:
        if cmd == "start":
            gate = asyncio.Semaphore(int(arg))
            for sim in self.sims.values():
                sim.tasks.append(asyncio.create_task(self.start_worker(sim, gate)))
            return None
        if cmd == "status":
            return {
                "registered": len(self.registered),
                "connected": len(self.streaming),
                "reconnects": self.reconnects,
                "errors": list(self.errors),
                "counts": _counts(self.seen),
            }
        if cmd == "heartbeat":
            self.phase, self.interval = arg
            old, self.changed = self.changed, asyncio.Event()
            old.set()
            return None
        if cmd == "phase":
            self.phase = arg
            return None
        if cmd == "follow":
            self.following = bool(arg)
            return None
        if cmd == "busy":
            return [
                (s.cred.id, s.held.job_id, s.held.attempt_id)
                for s in self.sims.values()
                if s.held is not None
            ]
        if cmd == "kill":
            killed = []
            for worker_id in arg:
                victim = self.sims.get(worker_id)
                if victim is None:
                    continue
                for task in victim.tasks:
                    task.cancel()
                killed.append(worker_id)
            return killed
        if cmd == "finish":
            held = [s for s in self.sims.values() if s.held is not None]
            await asyncio.gather(*(self.report(s, "completed") for s in held))
            return len(held)
        if cmd == "collect":
            seen, beats = self.seen, self.beats
            self.seen, self.beats = [], []
            return {"seen": seen, "beats": beats}
        raise ValueError(f"unknown command {cmd!r}")

    async def serve(self, conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        while True:
            cmd, arg = await loop.run_in_executor(None, conn.recv)
            if cmd == "stop":
                break
            try:
                conn.send(("ok", await self.handle(cmd, arg)))
            except Exception as exc:
                conn.send(("error", repr(exc)))
        for sim in self.sims.values():
            for task in sim.tasks:
                task.cancel()
        await asyncio.gather(
            *(t for s in self.sims.values() for t in s.tasks), return_exceptions=True
        )
        await self.http.close()
        conn.send(("ok", None))


def _text(answer: bytes) -> str:
    """The start of an answer's body, for an error message."""
    return answer.decode("utf-8", "replace")[:200]


def _ids(held: _Held) -> tuple[str, str]:
    return held.job_id, held.attempt_id


def _counts(seen: Iterable[Seen]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in seen:
        out[s.kind] = out.get(s.kind, 0) + 1
    return out


def _child(
    conn: Connection,
    url: str,
    creds: list[Cred],
    mode: str,
    interval: float,
    completions: Connection,
) -> None:
    from bench.server import quiet_collector, raise_fd_limit

    raise_fd_limit()
    quiet_collector()
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()

    async def main() -> None:
        await _Process(url, creds, mode, interval, completions).serve(conn)

    asyncio.run(main())


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
                target=_child,
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
            await asyncio.sleep(0.25)

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
    async with httpx.AsyncClient(
        base_url=url, headers=admin_headers, timeout=60, limits=limits
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
