"""Report training progress from inside a job, for the worker to relay to the orchestrator.

    from gpufleet.progress import report
    report(step=10, total=100, loss=0.42)

Each call appends one JSON line `{"step": 10, "total": 100, "metrics": {"loss": 0.42}}` to the
file named by `GPUFLEET_PROGRESS_FILE`, which the worker sets for every job it runs. Outside a
worker (the variable unset) it does nothing, so a training script can call it unconditionally.
The file is opened, appended and closed on every call: one small `O_APPEND` write is what the
worker's tail reads as a whole line, and nothing stays open if the job forks.

Checkpoints (docs/artifacts.md):

    from gpufleet.progress import checkpoint, on_checkpoint_signal
    on_checkpoint_signal(lambda: save_soon.set())   # the worker may now ask for one
    checkpoint("output/checkpoint-1200", step=1200)  # that folder is complete: upload it

`checkpoint` appends `{"checkpoint": "output/checkpoint-1200", "step": 1200}`; the worker uploads
the folder in the background and commits it. `on_checkpoint_signal` installs a handler for the
signal named by `GPUFLEET_CHECKPOINT_SIGNAL` (SIGUSR1) and appends `{"checkpoint_signal": true}`:
only a job that said so is sent the signal, as an unhandled SIGUSR1 would kill it.
"""

from __future__ import annotations

import json
import math
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROGRESS_FILE_ENV = "GPUFLEET_PROGRESS_FILE"
CHECKPOINT_SIGNAL_ENV = "GPUFLEET_CHECKPOINT_SIGNAL"
RESUME_FROM_ENV = "GPUFLEET_RESUME_FROM"
# The signal a worker sends when its machine is going away; jobs read its name from the
# environment so that a worker may name another one day.
DEFAULT_CHECKPOINT_SIGNAL = signal.SIGUSR1


def report(step: int, total: int | None = None, **metrics: Any) -> None:
    """Append one progress line to `$GPUFLEET_PROGRESS_FILE`; a no-op when it is unset."""
    _append(
        {
            "step": int(step),
            "total": None if total is None else int(total),
            "metrics": {str(name): _plain(value) for name, value in metrics.items()},
        }
    )


def checkpoint(path: str | os.PathLike[str], step: int | None = None) -> None:
    """Say that the checkpoint folder `path` (relative to the job folder, or absolute inside
    it) is complete; the worker uploads and commits it. A no-op outside a worker."""
    target = os.fspath(path)
    if not target or "\0" in target:
        raise ValueError(f"checkpoint path {target!r} is empty or holds a NUL character")
    _append({"checkpoint": target, "step": None if step is None else int(step)})


def on_checkpoint_signal(callback: Callable[[], None]) -> signal.Signals:
    """Call `callback` (in the main thread, between two bytecodes: let it set a flag that the
    training loop checks at its next step) when the worker asks for a checkpoint because its
    machine is going away, and tell the worker this job handles that signal. Returns it."""
    sig = checkpoint_signal()
    signal.signal(sig, lambda signum, frame: callback())
    _append({"checkpoint_signal": True})
    return sig


def checkpoint_signal() -> signal.Signals:
    """The signal named by `GPUFLEET_CHECKPOINT_SIGNAL` (`SIGUSR1` or `USR1`), or SIGUSR1."""
    name = os.environ.get(CHECKPOINT_SIGNAL_ENV, "").strip().upper()
    if not name:
        return DEFAULT_CHECKPOINT_SIGNAL
    try:
        return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]
    except KeyError:
        raise ValueError(
            f"{CHECKPOINT_SIGNAL_ENV}={name!r} names no signal; use one like SIGUSR1"
        ) from None


def resume_from() -> Path | None:
    """The checkpoint folder this attempt resumes from (`GPUFLEET_RESUME_FROM`), if any."""
    value = os.environ.get(RESUME_FROM_ENV)
    return Path(value) if value else None


def _append(entry: dict[str, Any]) -> None:
    path = os.environ.get(PROGRESS_FILE_ENV)
    if not path:
        return
    with open(path, "a", encoding="utf-8") as file:
        file.write(json.dumps(entry, separators=(",", ":")) + "\n")


def _plain(value: Any) -> Any:
    """JSON-ready `value`: NumPy/PyTorch scalars via `.item()`, NaN and infinities as null."""
    if isinstance(value, dict):
        return {str(key): _plain(inner) for key, inner in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(inner) for inner in value]
    item = getattr(value, "item", None)
    if callable(item):
        value = item()
    if value is None or isinstance(value, bool | int | str):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None
