"""A job's code for the people who may read it (the job page's Code panel, docs/jobs.md):
the files of the workdir snapshot its config names, and the text of one small file, read
from the stored tar (artifacts/workdir_listing.py), never unpacked on the orchestrator.

Who may read it is `domain/ownership.py` `may_read_code` (its owner, its team, an admin),
beside the key's `queue.read`. A snapshot's entries never change (it is named by its
digest), so each process keeps the last few listings read (`Context.workdir_listings`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpufleet.artifacts.workdir_archive import WORKDIR_PREFIX, name_problem
from gpufleet.artifacts.workdir_listing import TEXT_MAX_BYTES, Kind, Listed, Shown, as_text, scan
from gpufleet.domain.ownership import Refused, may_read_code
from gpufleet.domain.records import Job, User
from gpufleet.errors import Forbidden, InvalidInput, NotFound
from gpufleet.server.context import Context
from gpufleet.server.services.lifecycle import no_job
from gpufleet.server.services.ownership import actor_of
from gpufleet.server.services.workdirs import Snapshot, get, key_of

LISTED_MAX = 5000  # entries in one answer; `total` counts them all


@dataclass(frozen=True, slots=True)
class Code:
    snapshot: Snapshot
    entries: list[Listed]


@dataclass(frozen=True, slots=True)
class FileText:
    entry: Listed
    text: str | None  # None: not shown, `status` says why
    status: Shown


async def _readable_job(ctx: Context, user: User, job_id: str) -> Job:
    async with ctx.store.read() as q:
        job = await q.get_job(job_id)
        if job is None:
            raise no_job(job_id)
        decision = may_read_code(await actor_of(q, user), job)
    if isinstance(decision, Refused):
        raise Forbidden(f"you may not read the code of job {job_id}: {decision.reason}")
    if job.workdir is None:
        raise NotFound(
            f"job {job_id} names no workdir: its config has no 'workdir' snapshot",
            ui=f"job {job_id} brought no code (it was not submitted with a workdir)",
        )
    return job


async def code_of(ctx: Context, user: User, job_id: str) -> Code:
    """The snapshot job `job_id` names, and its entries (path order)."""
    job = await _readable_job(ctx, user, job_id)
    hex_digest = job.workdir or ""
    snapshot = await get(ctx, f"{WORKDIR_PREFIX}{hex_digest}")
    entries = ctx.workdir_listings.get(hex_digest)
    if entries is None:
        entries = await scan(await ctx.artifacts.open(key_of(hex_digest)))
        ctx.workdir_listings.keep(hex_digest, entries)
    return Code(snapshot, entries)


async def read_file(ctx: Context, user: User, job_id: str, path: str) -> FileText:
    """The text of the file at `path` in job `job_id`'s snapshot, when it is small UTF-8
    text; else why not (binary, too large, a link)."""
    if problem := name_problem(path):
        raise InvalidInput(
            f"the path {path[:120]!r} cannot name a file of a workdir: {problem}; "
            "name one as the file list does"
        )
    code = await code_of(ctx, user, job_id)
    entry = next((e for e in code.entries if e.path == path and e.kind is not Kind.DIR), None)
    if entry is None:
        raise NotFound(f"job {job_id}'s workdir has no file {path[:120]!r}; list its files")
    if entry.kind is Kind.LINK:
        return FileText(entry, None, Shown.LINK)
    if entry.size > TEXT_MAX_BYTES:
        return FileText(entry, None, Shown.TOO_LARGE)
    data = b""
    if entry.size:
        key = key_of(code.snapshot.digest.removeprefix(WORKDIR_PREFIX))
        chunks = await ctx.artifacts.open_range(key, entry.offset, entry.offset + entry.size)
        data = b"".join([chunk async for chunk in chunks])
    text = as_text(data)
    return FileText(entry, text, Shown.BINARY if text is None else Shown.TEXT)
