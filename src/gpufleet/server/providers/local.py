"""The `local` provider: `gpufleet worker` processes on the orchestrator's own machine.

Each launch is a process in a session of its own (its instance id `local-<pid>-<tag>`), its
settings in its environment, its output appended to `worker.log` in its work folder. To
terminate is to signal its process group: SIGTERM, then SIGKILL after a grace. The list is
the processes this orchestrator started that still run; after a restart it is empty, and a
worker left from before is found by its launch row (docs/capacity.md, "On a crash").
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path

from gpufleet.errors import ProviderError
from gpufleet.server.providers import WorkerLaunch, inherited_environment

PREFIX = "local-"
TERMINATE_GRACE_S = 10.0
# The worker's command: this interpreter's gpufleet, whatever is on PATH.
WORKER = (sys.executable, "-c", "from gpufleet.cli.main import main; main()", "worker")


class LocalProvider:
    def __init__(self) -> None:
        self._started: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.Lock()

    def launch(self, worker: WorkerLaunch) -> str:
        worker.work_dir.mkdir(parents=True, exist_ok=True)
        env = {
            **inherited_environment(),
            **worker.environment(),
            "GPUFLEET_WORK_DIR": str(worker.work_dir),
        }
        try:
            with (worker.work_dir / "worker.log").open("ab") as log:
                proc = subprocess.Popen(
                    [*WORKER],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=worker.work_dir,
                    start_new_session=True,  # its own process group: terminate stops its jobs
                )
        except OSError as exc:
            raise ProviderError(f"could not start gpufleet worker: {exc}", str(exc)) from exc
        # A pid is reused in time; an instance id never is (one a pool's launch).
        instance = f"{PREFIX}{proc.pid}-{secrets.token_hex(4)}"
        with self._lock:
            self._started[instance] = proc
        return instance

    def terminate(self, instance_id: str) -> None:
        pid = _pid(instance_id)
        with self._lock:
            proc = self._started.pop(instance_id, None)
        if proc is None:  # started before a restart: its group, if it still runs
            _signal_group(pid, signal.SIGTERM)
            return
        if proc.poll() is None:
            _signal_group(pid, signal.SIGTERM)
            try:
                proc.wait(TERMINATE_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(pid, signal.SIGKILL)
                proc.wait()

    def list(self) -> list[str]:
        with self._lock:
            return [i for i, proc in self._started.items() if proc.poll() is None]


def _pid(instance_id: str) -> int:
    digits = instance_id.removeprefix(PREFIX).split("-")[0]
    if not instance_id.startswith(PREFIX) or not digits.isdigit():
        raise ProviderError(f"{instance_id!r} is not a local instance id (local-<pid>-<tag>)")
    return int(digits)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # already gone
        os.killpg(pid, sig)


def log_tail(work_dir: Path, limit: int) -> str:
    """The end of a local worker's log: what a launch that never registered said."""
    try:
        with (work_dir / "worker.log").open("rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - limit))
            return log.read().decode(errors="replace")
    except OSError:
        return ""
