"""Run one job's command as a process group, read its output, and stop it when told.

The command runs in a session of its own (`start_new_session`), so stopping it reaches every
process it spawned: SIGTERM to the group, SIGKILL to the group after the grace period. When the
main process exits, whatever it left behind in its group is killed too: a finished job must not
keep holding GPUs. On Linux the main process also gets SIGKILL if the agent itself dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import enum
import logging
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpufleet.errors import AgentError
from gpufleet.worker.jobuser import JobUser

log = logging.getLogger(__name__)

TAIL_LINES = 20
# An error's output tail, at most: the orchestrator refuses an error past 100,000 characters,
# and a refused final report would leave the job running there.
MAX_ERROR_CHARS = 16_000
MAX_LINE_BYTES = 64 * 1024
_READ_CHUNK = 64 * 1024
_PUMP_DRAIN_TIMEOUT = 2.0

LineSink = Callable[[str, str], None]  # (stream name, text without newline)


class LaunchError(AgentError):
    """The command could not be started (missing executable, bad working folder)."""


class Outcome(enum.Enum):
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class JobResult:
    outcome: Outcome
    exit_code: int | None
    error: str | None = None


class JobProcess:
    """A started command: its process group, its output pumps and the last lines it printed."""

    def __init__(self, process: asyncio.subprocess.Process, on_line: LineSink) -> None:
        self._process = process
        self._on_line = on_line
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._end: asyncio.Task[int] | None = None
        self._pumps = [
            asyncio.create_task(self._pump(process.stdout, "stdout"), name=f"stdout {process.pid}"),
            asyncio.create_task(self._pump(process.stderr, "stderr"), name=f"stderr {process.pid}"),
        ]

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        on_line: LineSink,
        user: JobUser | None = None,
    ) -> JobProcess:
        """Start `argv`; with `user` (`--run-as`), as that user with its groups (the uid is
        switched before the death signal is asked for: a switch would clear it)."""
        if not argv:
            raise LaunchError("the job's command is empty: give config.command as an argv list")
        identity: dict[str, object] = {}
        if user is not None:
            identity = {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups)}
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=dict(env),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=_die_with_parent_hook(),
                **identity,  # type: ignore[arg-type]
            )
        except OSError as exc:
            raise LaunchError(f"could not start {argv[0]!r}: {exc.strerror or exc}") from exc
        except (ValueError, TypeError, subprocess.SubprocessError) as exc:
            # What the OS cannot take: a NUL in an argument, a bad environment name.
            raise LaunchError(f"could not start {argv[0]!r}: {exc}") from exc
        log.info("started pid %s: %s", process.pid, " ".join(argv))
        return cls(process, on_line)

    @property
    def pid(self) -> int:
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    async def wait(self) -> int:
        """Wait for the end of the job: its exit code, once its last output has been read."""
        if self._end is None:
            self._end = asyncio.create_task(self._finish(), name=f"end {self.pid}")
        return await asyncio.shield(self._end)

    async def _finish(self) -> int:
        code = await self._process.wait()
        # Whatever the main process left in its group must not outlive the job.
        self.signal_group(signal.SIGKILL)
        _, pending = await asyncio.wait(self._pumps, timeout=_PUMP_DRAIN_TIMEOUT)
        for pump in pending:  # a process outside the group still holds the pipe
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        return code

    async def stop(self, grace: float) -> int:
        """SIGTERM the group; SIGKILL it if the main process outlives `grace` seconds."""
        self.signal_group(signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                return await self.wait()
        except TimeoutError:
            log.warning("pid %s ignored SIGTERM for %.0f s: sending SIGKILL", self.pid, grace)
        self.signal_group(signal.SIGKILL)
        return await self.wait()

    def signal_main(self, sig: signal.Signals) -> None:
        """Signal the main process only: its children may not handle `sig`."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self._process.send_signal(sig)

    def signal_group(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, sig)

    async def _pump(self, reader: asyncio.StreamReader | None, stream: str) -> None:
        if reader is None:
            return
        pending = b""
        while chunk := await reader.read(_READ_CHUNK):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                for start in range(0, max(len(line), 1), MAX_LINE_BYTES):
                    self._emit(stream, line[start : start + MAX_LINE_BYTES])
            while len(pending) > MAX_LINE_BYTES:
                self._emit(stream, pending[:MAX_LINE_BYTES])
                pending = pending[MAX_LINE_BYTES:]
        if pending:
            self._emit(stream, pending)

    def _emit(self, stream: str, raw: bytes) -> None:
        # A terminal shows what follows the last carriage return (progress bars redraw so).
        text = raw.rstrip(b"\r").rsplit(b"\r", 1)[-1].decode("utf-8", errors="replace")
        self.tail.append(text)
        self._on_line(stream, text)


async def run_to_end(
    process: JobProcess,
    *,
    timeout_s: float | None,
    stop: asyncio.Event,
    grace: float,
    stop_reason: Callable[[], str],
) -> JobResult:
    """Wait until the process exits, `stop` is set (cancelled) or `timeout_s` runs out (failed)."""
    exited = asyncio.create_task(process.wait(), name=f"wait {process.pid}")
    stopped = asyncio.create_task(stop.wait(), name=f"stop {process.pid}")
    try:
        done, _ = await asyncio.wait(
            {exited, stopped}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        stopped.cancel()
        if not exited.done():
            exited.cancel()
    if exited in done:
        return _exit_result(exited.result(), process.tail)
    code = await process.stop(grace)
    if stopped in done:
        return JobResult(Outcome.CANCELLED, code, stop_reason())
    return JobResult(
        Outcome.FAILED,
        code,
        _with_tail(f"timed out after {timeout_s:g} s (timeout_s) and was stopped", process.tail),
    )


def _exit_result(code: int, tail: deque[str]) -> JobResult:
    if code == 0:
        return JobResult(Outcome.COMPLETED, 0)
    if code < 0:
        what = f"was killed by signal {signal.Signals(-code).name}"
    else:
        what = f"exited with code {code}"
    return JobResult(Outcome.FAILED, code, _with_tail(what, tail))


def _with_tail(what: str, tail: deque[str]) -> str:
    if not tail:
        return what
    lines = "\n".join(tail)
    if len(lines) > MAX_ERROR_CHARS:  # twenty long lines: their end says most
        lines = "…" + lines[-MAX_ERROR_CHARS:]
    return f"{what}; last output:\n{lines}"


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A pre-exec hook asking Linux to SIGKILL the job when the agent dies, so that a killed
    agent leaves no orphan training on its GPUs. Resolved here: the child only calls it."""
    if sys.platform != "linux":
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)

    return hook
