"""Which of a job's stored files to bring home, and bringing them (client/transfer.py): each
path once, from the newest attempt that has it (or the one asked for), those a path, a
folder or a glob names (all when none)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

from gpufleet.client.http import ApiClient, part
from gpufleet.client.transfer import Meter, Saved, checked_record, download_all
from gpufleet.errors import NotFound


def fetch_files(
    api: ApiClient,
    job_id: str,
    directory: Path,
    paths: tuple[str, ...] = (),
    attempt: int | None = None,
    no_checkpoints: bool = False,
    meter: Meter | None = None,
) -> list[Saved]:
    """The job's stored files (those `paths` name; all when none) into `directory`, each
    checked against its sha256; `NotFound` when it has none."""
    listed = [
        checked_record(r) for r in api.get(f"/api/queue/{part(job_id)}/artifacts")["artifacts"]
    ]
    chosen = select(listed, paths, attempt, checkpoints=not no_checkpoints)
    if not chosen:
        raise NotFound(
            f"job {job_id} has no stored files{_which(attempt, no_checkpoints)} to download; "
            f"see what it has: gpufleet jobs artifacts {job_id}"
        )
    again = ["gpufleet", "jobs", "download", job_id, *paths, "-o", str(directory)]
    again += [f"--attempt={attempt}"] if attempt else []
    again += ["--no-checkpoints"] if no_checkpoints else []
    return download_all(api, job_id, chosen, directory, shlex.join(again), meter)


def _which(attempt: int | None, no_checkpoints: bool) -> str:
    said = [f" from attempt {attempt}"] if attempt else []
    return "".join(said) + (" other than checkpoints" if no_checkpoints else "")


def select(
    listed: list[dict[str, Any]],
    patterns: tuple[str, ...],
    attempt: int | None,
    *,
    checkpoints: bool = True,
) -> list[dict[str, Any]]:
    """The records to download, by path: each path once, from the newest attempt that has it
    (or from `attempt`), those `patterns` match (all when none are given)."""
    newest: dict[str, dict[str, Any]] = {}
    for record in sorted(listed, key=lambda a: -int(a["attempt_number"])):
        if attempt is not None and record["attempt_number"] != attempt:
            continue
        if not checkpoints and record["kind"] == "checkpoint":
            continue
        newest.setdefault(record["path"], record)
    if not patterns:
        return [newest[p] for p in sorted(newest)]
    matchers = {p: _matcher(p) for p in patterns}
    unmatched = [p for p, m in matchers.items() if not any(m(path) for path in newest)]
    if unmatched:
        raise NotFound(
            f"no stored file of this job matches {', '.join(repr(p) for p in unmatched)}; "
            "list them with `gpufleet jobs artifacts JOB` and give a path, a folder or a glob "
            "from it"
        )
    return [newest[p] for p in sorted(newest) if any(m(p) for m in matchers.values())]


def _matcher(pattern: str) -> Any:
    """A path test for a PATH argument: the path itself, a folder above it, or a glob."""
    clean = pattern.removeprefix("./").rstrip("/")
    regex = re.compile(_glob_regex(clean))

    def matches(path: str) -> bool:
        return path == clean or path.startswith(clean + "/") or bool(regex.fullmatch(path))

    return matches


_GLOB_TOKEN = re.compile(r"\*\*/|\*\*|\*|\?|[^*?]+")


def _glob_regex(glob: str) -> str:
    parts = []
    for token in _GLOB_TOKEN.findall(glob):
        if token == "**/":
            parts.append("(?:.*/)?")
        elif token == "**":
            parts.append(".*")
        elif token == "*":
            parts.append("[^/]*")
        elif token == "?":
            parts.append("[^/]")
        else:
            parts.append(re.escape(token))
    return "".join(parts)
