"""Read a job's progress file (`gpufleet.progress`): progress to relay, checkpoints to upload.

`ProgressTail` reads only what was appended since its last look and only whole lines, so it
never parses a line the job is halfway through writing. Three kinds of line share the file:
progress (`{"step", "total", "metrics"}`, each trimmed to the orchestrator's 16 KiB by
`domain.bounds.trim_progress` and kept until the next report takes them all: the newest as
the job's progress, those before it as the chart's points), checkpoints
(`{"checkpoint": path, "step"}`, handed to the checkpoint uploader, never relayed as progress)
and the job's word that it handles the checkpoint signal (`{"checkpoint_signal": true}`).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.domain.bounds import (
    MAX_PROGRESS_BYTES,
    MAX_REPORT_POINTS,
    evenly,
    fit_points,
    trim_progress,
)
from gpufleet.worker.keep import open_inside

log = logging.getLogger(__name__)

_MAX_READ = 4 * 1024 * 1024

Progress = dict[str, Any]


@dataclass(frozen=True)
class CheckpointNote:
    """A job's `gpufleet.progress.checkpoint(path, step)`: the path as the job wrote it."""

    path: str
    step: int | None


class ProgressTail:
    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0
        self._partial = b""
        self.latest: Progress | None = None
        self.handles_checkpoint_signal = False
        self.checkpoints_announced = 0  # how many checkpoint lines were ever read
        self._checkpoints: list[CheckpointNote] = []
        self.trimmed = 0  # progress lines cut to fit the orchestrator's bound
        self._points: list[Progress] = []  # progress lines not reported yet, oldest first

    def poll(self) -> Progress | None:
        """The newest progress line appended since the last poll, if any."""
        try:
            with open_inside(self._path.parent, self._path) as file:
                if os.fstat(file.fileno()).st_size < self._offset:  # rewritten from scratch
                    self._offset, self._partial = 0, b""
                file.seek(self._offset)
                chunk = file.read(_MAX_READ)
        except OSError:
            return None
        self._offset += len(chunk)
        *lines, self._partial = (self._partial + chunk).split(b"\n")
        newest = None
        for line in lines:
            value = _parse(line)
            if value is None:
                continue
            if "checkpoint" in value:
                self._on_checkpoint(value)
            elif value.get("checkpoint_signal") is True:
                self.handles_checkpoint_signal = True
            else:
                newest = self._fitted(_progress(value))
                self._points.append(newest)
        if newest is not None:
            self.latest = newest
        if len(self._points) > 4 * MAX_REPORT_POINTS:  # the orchestrator is away: stay small
            self._points = evenly(self._points, 2 * MAX_REPORT_POINTS)
        return newest

    def take_points(self) -> list[Progress]:
        """The progress lines read since the last call, oldest first (the newest last)."""
        taken, self._points = self._points, []
        return taken

    def take_report(self) -> dict[str, Any]:
        """What a status report says of the lines read since the last: the newest as the
        job's `progress`, the ones before it as `points` (every one, for the charts; thinned
        evenly past the orchestrator's bound); empty when there are none."""
        points = self.take_points()
        if not points:
            return {}
        body: dict[str, Any] = {"progress": points[-1]}
        if len(points) > 1:
            body["points"] = fit_points(points[:-1])
        return body

    def _fitted(self, progress: Progress) -> Progress:
        fitted = trim_progress(progress)
        if fitted != progress:
            if not self.trimmed:  # once a job: a chatty trainer writes one a step
                log.warning(
                    "a progress line of the job is over %d bytes of JSON: relaying its step, "
                    "total and numeric metrics only (gpufleet.progress.report keeps it small)",
                    MAX_PROGRESS_BYTES,
                )
            self.trimmed += 1
        return fitted

    def take_checkpoints(self) -> list[CheckpointNote]:
        """The checkpoints announced since the last call, oldest first."""
        taken, self._checkpoints = self._checkpoints, []
        return taken

    def _on_checkpoint(self, value: dict[str, Any]) -> None:
        path, step = value.get("checkpoint"), value.get("step")
        if not isinstance(path, str) or not path:
            log.warning("ignoring a checkpoint line without a path: %.200r", value)
            return
        if isinstance(step, bool) or not isinstance(step, int):
            step = None
        self.checkpoints_announced += 1
        self._checkpoints.append(CheckpointNote(path, step))


def _parse(line: bytes) -> dict[str, Any] | None:
    if not line.strip():
        return None
    try:
        value = json.loads(line)  # NaN and the like are made storable where reports are sent
    except (ValueError, RecursionError):
        log.debug("skipping a progress line that is not JSON: %.200r", line)
        return None
    return value if isinstance(value, dict) else None


def _progress(value: dict[str, Any]) -> Progress:
    progress: Progress = {"step": value.get("step"), "total": value.get("total")}
    metrics = value.get("metrics")
    progress["metrics"] = metrics if isinstance(metrics, dict) else {}
    return progress
