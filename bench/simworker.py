"""The simulated workers of one process, speaking the worker protocol (`gpufleet/protocol.py`);
`bench/workers.py` spreads them over processes and steers them.

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
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import aiohttp
import orjson

from bench import simgang
from bench.sse import Decoder
from gpufleet import protocol
from gpufleet.protocol import EventType

COMPLETE = "complete"  # acknowledge, run, complete at once
HOLD = "hold"  # acknowledge and run, then hold the job until told to finish
# As `httpx.Timeout(60.0)` was: 60 s to connect and between reads, none on a whole request
# or between reads on a stream (quiet between pings).
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
class Seen:  # something a worker saw or did, with both clocks
    kind: str  # offer, resend, running, done, refused, cancel; acked, start, finish (gangs')
    worker_id: str
    job_id: str
    attempt_id: str
    mono: float
    wall: float
    rank: int | None = None  # a multi-node job's offer: the node's rank, and the node count
    nodes: int | None = None


@dataclass
class _Held:
    job_id: str
    attempt_id: str
    rank: int | None = None  # one node of a multi-node job (bench/simgang.py)


@dataclass
class _Sim:
    cred: Cred
    held: _Held | None = None
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    seen_attempts: set[str] = field(default_factory=set)


class SimProcess:
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

    def note(self, kind: str, sim: _Sim, job: str, attempt: str, rank: int | None = None) -> None:
        self.seen.append(Seen(kind, sim.cred.id, job, attempt, time.monotonic(), time.time(), rank))

    def error(self, what: str) -> None:
        self.errors += [what][: 50 - len(self.errors)]

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
            "features": ["command", "attempts", "gang"],  # gpufleet's dialect, multi-node too
        }
        if sim.held is not None:
            body |= {"current_job_id": sim.held.job_id, "current_attempt_id": sim.held.attempt_id}
        try:
            status, answer = await self.post(sim, protocol.REGISTER, body)
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
                protocol.STREAM,
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
        match protocol.event_type(event):
            case EventType.CONNECTED:
                self.streaming.add(sim.cred.id)
                opened.set()
            case EventType.JOB_SUBMIT if "node_rank" in event:
                await simgang.offered(self, sim, event)
            case EventType.JOB_SUBMIT:
                await self.offered(sim, event)
            case EventType.JOB_START:
                await simgang.started(self, sim, event)
            case EventType.JOB_CANCEL:
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

    async def report(self, sim: _Sim, status: str, **extra: Any) -> bool:
        held = sim.held
        if held is None:
            raise RuntimeError("a simulated worker reported on a job it does not hold")
        body: dict[str, Any] = {"status": status, "attempt_id": held.attempt_id, **extra}
        if held.rank is not None:
            body["node_rank"] = held.rank
        if status in ("completed", "cancelled"):  # the server may free the worker from now
            self.note("finish", sim, held.job_id, held.attempt_id, held.rank)
        try:
            for wait in (0.05, 0.2, 0.8, None):  # a 503 again, after a pause, as the worker does
                code, answer = await self.post(sim, protocol.job_status_path(held.job_id), body)
                if code != 503 or wait is None:
                    break
                await asyncio.sleep(wait)
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
            self.note("running", sim, held.job_id, held.attempt_id, held.rank)
        elif status in ("completed", "cancelled"):
            self.note("done" if status == "completed" else "cancel", sim, *_ids(held))
            sim.held = None
            if status == "completed" and not held.rank and self.following and self.completions:
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
            body = protocol.heartbeat(sim.cred.id, *(_ids(held) if held else (None, None)))
            phase, sent = self.phase, time.monotonic()
            try:
                code, _ = await self.post(sim, protocol.HEARTBEAT, body)
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
                "counts": dict(Counter(s.kind for s in self.seen)),
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


def run_process(
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
        await SimProcess(url, creds, mode, interval, completions).serve(conn)

    asyncio.run(main())
