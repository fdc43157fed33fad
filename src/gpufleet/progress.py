"""Report training progress from inside a job, for the worker to relay to the orchestrator.

    from gpufleet.progress import report
    report(step=10, total=100, loss=0.42)

Each call appends one JSON line `{"step": 10, "total": 100, "metrics": {"loss": 0.42}}` to the
file named by `GPUFLEET_PROGRESS_FILE`, which the worker sets for every job it runs. Outside a
worker (the variable unset) it does nothing, so a training script can call it unconditionally.
The file is opened, appended and closed on every call: one small `O_APPEND` write is what the
worker's tail reads as a whole line, and nothing stays open if the job forks.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any

PROGRESS_FILE_ENV = "GPUFLEET_PROGRESS_FILE"


def report(step: int, total: int | None = None, **metrics: Any) -> None:
    """Append one progress line to `$GPUFLEET_PROGRESS_FILE`; a no-op when it is unset."""
    path = os.environ.get(PROGRESS_FILE_ENV)
    if not path:
        return
    line = json.dumps(
        {
            "step": int(step),
            "total": None if total is None else int(total),
            "metrics": {str(name): _plain(value) for name, value in metrics.items()},
        },
        separators=(",", ":"),
    )
    with open(path, "a", encoding="utf-8") as file:
        file.write(line + "\n")


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
