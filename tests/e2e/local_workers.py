"""The `gpufleet worker` processes a `local` pool starts, seen from a test (#36): each notes
its start (`local_spy/sitecustomize.py`) in a folder, so a test knows which orchestrator
process started it (its parent), how many were started, and stops every one afterwards: a
local worker is a process of its own, which outlives an orchestrator SIGKILLed."""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

SPY = Path(__file__).parent / "local_spy"


@dataclass(frozen=True, slots=True)
class Start:
    pid: int
    parent: int  # the orchestrator process that started it
    name: str


def local_env(folder: Path) -> dict[str, str]:
    """An orchestrator's environment whose local workers note their starts in `folder`."""
    path = os.pathsep.join(filter(None, [str(SPY), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "GF_TEST_MACHINES": str(folder)}


def starts(folder: Path) -> list[Start]:
    """The local workers started, in order."""
    path = folder / "starts"
    lines = path.read_text().splitlines() if path.exists() else []
    return [Start(int(pid), int(parent), name) for pid, parent, name in map(str.split, lines)]


def hold(folder: Path, number: int) -> None:
    """The `number`th worker started waits for `release(folder)` before it goes on."""
    (folder / "hold").write_text(str(number))


def release(folder: Path) -> None:
    (folder / "up").touch()


def stop_all(folder: Path) -> None:
    """Every local worker started, and its jobs (its process group), stopped."""
    release(folder)
    for start in starts(folder):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(start.pid, signal.SIGKILL)
