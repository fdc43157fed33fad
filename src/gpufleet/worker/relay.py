"""Relay a job's progress file (`gpufleet.progress`) to the orchestrator, throttled.

`ProgressTail` reads only what was appended since its last look and only whole lines, so it
never parses a line the job is halfway through writing.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_MAX_READ = 4 * 1024 * 1024

Progress = dict[str, Any]


class ProgressTail:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = b""
        self.latest: Progress | None = None

    def poll(self) -> Progress | None:
        """The newest progress line appended since the last poll, if any."""
        try:
            with self._path.open("rb") as file:
                if os.fstat(file.fileno()).st_size < self._offset:  # rewritten from scratch
                    self._offset, self._partial = 0, b""
                file.seek(self._offset)
                chunk = file.read(_MAX_READ)
        except OSError:
            return None
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        newest = None
        for line in reversed(lines):
            newest = _parse(line)
            if newest is not None:
                break
        if newest is not None:
            self.latest = newest
        return newest


def _parse(line: bytes) -> Progress | None:
    if not line.strip():
        return None
    try:
        value = json.loads(line)  # NaN and the like are made storable where reports are sent
    except (ValueError, RecursionError):
        log.debug("skipping a progress line that is not JSON: %.200r", line)
        return None
    if not isinstance(value, dict):
        return None
    progress: Progress = {"step": value.get("step"), "total": value.get("total")}
    metrics = value.get("metrics")
    progress["metrics"] = metrics if isinstance(metrics, dict) else {}
    return progress
