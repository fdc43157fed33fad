"""The agent's health (docs/workers.md, Health): its GPUs' readings and faults, and its
preflight command. The agent asks `fields()` for its register and heartbeat bodies,
`healthy_gpus` for the GPUs a job gets, `check` before each job; `watch_xids` and
`recheck` are its supervised loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

from gpufleet.domain import gpu_health
from gpufleet.domain.gpu_health import GpuReading, Preflight
from gpufleet.supervisor import Supervisor
from gpufleet.worker.gpu_health import HealthReader

log = logging.getLogger(__name__)

XID_WAIT_MS = 1000  # one wait for an XID event: short, so that a stop is heard soon
PREFLIGHT_TIMEOUT = 300.0  # a preflight that hangs longer fails
_READ_BYTES = 1 << 20  # of a preflight's output read (its tail is kept)


async def run_preflight(command: str, limit_s: float = PREFLIGHT_TIMEOUT) -> Preflight:
    """Run `command` by the shell, in a process group of its own; passed when it exits 0."""
    try:
        proc = await asyncio.create_subprocess_shell(
            command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return Preflight(ok=False, output=f"could not run the preflight: {exc}")
    try:
        async with asyncio.timeout(limit_s):
            out, _ = await proc.communicate()
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return Preflight(ok=False, output=f"the preflight ran past {limit_s:g} s and was killed")
    text = out[-_READ_BYTES:].decode(errors="replace")
    if proc.returncode != 0:
        text = f"{text.rstrip()}\n(exit code {proc.returncode})".lstrip()
    return Preflight(ok=proc.returncode == 0, output=text)


class AgentHealth:
    def __init__(
        self,
        indices: Sequence[int],
        preflight: str | None,
        interval: float,
        *,
        reader: HealthReader | None = None,
    ) -> None:
        self._indices = tuple(indices)
        self._reader = reader if reader is not None else HealthReader(self._indices)
        self._command = preflight
        self._interval = interval
        self.preflight: Preflight | None = None  # as it last ran; None: no preflight
        self._readings: list[GpuReading] | None = None
        self.faulty: dict[int, str] = {}  # kept for the agent's life

    @property
    def failing(self) -> bool:
        return self.preflight is not None and not self.preflight.ok

    def read(self) -> None:
        """Read the GPUs now (blocking: run it in a thread); new faults are logged."""
        self._readings = self._reader.read()
        for index, why in gpu_health.faults(self._readings or ()).items():
            if index not in self.faulty:
                log.error("GPU %d taken out: %s; no job runs on it again", index, why)
                self.faulty[index] = why

    def fields(self) -> dict[str, Any]:
        """What the register and heartbeat bodies carry (none of it when nothing is known)."""
        out: dict[str, Any] = {}
        if self._readings is not None:
            out["gpu_health"] = [r.as_wire() for r in self._readings]
        if self.preflight is not None:
            out["preflight"] = {"ok": self.preflight.ok, "output": self.preflight.output}
        return out

    async def check(self) -> bool:
        """Run the preflight (if there is one) now; True when the worker may take a job."""
        if self._command is None:
            return True
        before = self.preflight
        self.preflight = await run_preflight(self._command)
        if not self.preflight.ok:
            log.error("preflight failed: offered no job until it passes\n%s", self.preflight.output)
        elif before is not None and not before.ok:
            log.info("preflight passes again: taking jobs")
        return self.preflight.ok

    async def start(
        self, supervisor: Supervisor, changed: Callable[[], None], idle: Callable[[], bool]
    ) -> None:
        """At the agent's start: the preflight and a first reading (the registration says
        both), then the loops: XID events, and the preflight again while it fails."""
        await self.check()
        await asyncio.to_thread(self.read)
        supervisor.spawn("xid-events", self.watch_xids(changed))
        if self._command is not None:
            supervisor.spawn("preflight", self.recheck(changed, idle), forever=True)

    async def recheck(self, changed: Callable[[], None], idle: Callable[[], bool]) -> None:
        """While the preflight fails, run it again every interval; `changed` when it passes."""
        while True:
            await asyncio.sleep(self._interval)
            if self.failing and idle() and await self.check():
                changed()

    async def watch_xids(self, changed: Callable[[], None]) -> None:
        """Wait for critical XID events, in a thread, one short wait after another; on one,
        read the GPUs and `changed`. Ends where there are none to wait for."""
        while True:
            came = await asyncio.to_thread(self._reader.wait_xids, XID_WAIT_MS)
            if came is None:
                return
            if came:
                await asyncio.to_thread(self.read)
                changed()
