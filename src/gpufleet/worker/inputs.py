"""Put the artifacts a job takes from its dependencies into its folder (docs/jobs.md,
Dependencies, Outputs flow). The offer's `inputs` lists each file: where it goes
(`inputs/<job id>/<path>`), its size and sha256, and where it downloads from (the
orchestrator's worker route, with this attempt's token). Each is downloaded as a resumed
checkpoint's files are (`resume.download_file`: beside it, checked, renamed into place);
any failure fails the attempt before its command starts, naming the file."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpufleet.worker.backoff import Backoff
from gpufleet.worker.resume import (
    Downloads,
    ResumeFailed,
    download_file,
    file_digest,
    relative,
    retried,
)
from gpufleet.worker.uploads import FileDigest

log = logging.getLogger(__name__)

FOLDER = "inputs"


@dataclass(frozen=True)
class InputFile:
    digest: FileDigest  # its path in the job folder, size and sha256
    url: str
    headers: Mapping[str, str]


def from_offer(value: Any) -> tuple[InputFile, ...]:
    """The offer's `inputs` (none: empty); `ResumeFailed` saying what is wrong with one."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ResumeFailed(f"the offer's inputs are not a list: {value!r:.200}")
    return tuple(_entry(entry) for entry in value)


def _entry(entry: Any) -> InputFile:
    if not isinstance(entry, Mapping):
        raise ResumeFailed(f"the offer lists an input that is not an object: {entry!r:.200}")
    path, size, sha = relative(entry.get("path")), entry.get("size"), entry.get("sha256")
    if path is None or not path.startswith(f"{FOLDER}/"):
        raise ResumeFailed(f"input {entry.get('path')!r:.200} is not a path under {FOLDER}/")
    digest = file_digest("input", path, size, sha)
    url, headers = entry.get("url"), entry.get("headers") or {}
    if not isinstance(url, str) or not url or not isinstance(headers, Mapping):
        raise ResumeFailed(f"input {path}: no download URL")
    return InputFile(digest, url, {str(k): str(v) for k, v in headers.items()})


async def download_inputs(
    downloads: Downloads,
    files: tuple[InputFile, ...],
    folder: Path,
    backoff: Callable[[], Backoff],
) -> None:
    """Every input in place under `folder`; `ResumeFailed` otherwise."""
    for wanted in files:
        path = wanted.digest.path
        await retried(
            backoff,
            functools.partial(
                download_file,
                downloads,
                wanted.url,
                dict(wanted.headers),
                folder / path,
                "input",
                wanted.digest,
            ),
            f"input {path} could not be downloaded",
        )
    if files:
        log.info("put %d input file(s) in %s", len(files), folder / FOLDER)
