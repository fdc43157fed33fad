"""Sending a folder as a job's code (docs/jobs.md): packed (client/workdir.py, its digest
remembered by client/digests.py), and uploaded unless the orchestrator says this user may
name it already (they uploaded it, or a team of theirs shares it: a digest alone proves
nothing, docs/security.md)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpufleet.artifacts.workdir_archive import Entry, archive_size, chunks, entries_of
from gpufleet.client.digests import DigestCache, Known, cache_folder, signature
from gpufleet.client.http import ApiClient, part
from gpufleet.client.workdir import selected
from gpufleet.errors import InvalidInput, NotFound


@dataclass(frozen=True, slots=True)
class Packed:
    """A folder's snapshot: its digest, files and size."""

    root: Path
    digest: str
    files: int
    size: int


@dataclass(frozen=True, slots=True)
class Sent:
    """A snapshot after the orchestrator heard of it: `sent` its bytes were (False: it has
    the snapshot for this user already); `had`: sent, though it had the snapshot (it now
    knows this user has its files too)."""

    packed: Packed
    sent: bool
    had: bool


def send_workdir(
    api: ApiClient,
    root: Path,
    max_bytes: int,
    env_from: str | None = None,
    packed: Callable[[Packed], None] | None = None,
) -> Sent:
    """Upload `root`'s snapshot unless the caller may name it already. The files are read
    once to learn the digest (not at all when nothing changed since they were last packed:
    client/digests.py), and again as they are sent: no archive is written. `packed` hears
    of the snapshot before anything is sent."""
    paths = selected(root, max_bytes)
    if env_from is not None and env_from not in paths:
        raise InvalidInput(
            f"--env-from {env_from}: no such file in the workdir {root} (or an ignore rule "
            "leaves it out); name it by its path in the workdir"
        )
    cache = DigestCache(cache_folder())
    before = signature(root, paths)
    entries = None
    if (known := cache.lookup(root, before)) is None:
        entries = entries_of(root, paths)
        known = _digest_of(root, entries)
        cache.remember(root, before, known, signature(root, paths))
    snapshot = Packed(root, known.digest, len(paths), known.size)
    if packed is not None:
        packed(snapshot)
    path = f"/api/workdirs/{part(known.digest)}"
    if _stored(api, path):
        return Sent(snapshot, sent=False, had=False)
    entries = entries or entries_of(root, paths)
    if archive_size(entries) != known.size:
        raise InvalidInput(
            f"the workdir {root} changed while it was packed; run again once nothing writes to it"
        )
    answer = api.upload(path, chunks(root, entries), known.size)
    had = isinstance(answer, dict) and answer.get("created") is False
    return Sent(snapshot, sent=True, had=had)


def _digest_of(root: Path, entries: list[Entry]) -> Known:
    sha, size = hashlib.sha256(), 0
    for chunk in chunks(root, entries):
        sha.update(chunk)
        size += len(chunk)
    return Known(sha.hexdigest(), size)


def _stored(api: ApiClient, path: str) -> bool:
    """Whether the orchestrator holds the snapshot for this user (a GET, not a HEAD: a refusal
    comes with the orchestrator's words for it); 404 when it does not, or when someone else
    uploaded it and this user must send its bytes to prove they have them."""
    try:
        api.get(path)
    except NotFound:
        return False
    return True
