"""Names for ids: an operator may name a worker where its id is asked for, and give the start
of a job's id."""

from __future__ import annotations

from typing import Any, Protocol

from gpufleet.errors import InvalidInput, NotFound

ID_PREFIX_MAX = 32  # what GET /api/queue's id_prefix takes
PREFIX_SHOWN = 5  # ids named when a prefix fits several jobs


class Reader(Protocol):
    """What resolving needs of the client (client/http.py `ApiClient`)."""

    def get(self, path: str, **params: Any) -> Any: ...


def worker_id(api: Reader, ref: str) -> str:
    """The id of the worker `ref` names: its id, else its name when no other worker has it."""
    fleet = api.get("/api/admin/workers")["workers"]
    if any(w["id"] == ref for w in fleet):
        return ref
    named = [w["id"] for w in fleet if w["name"] == ref]
    if len(named) == 1:
        return str(named[0])
    if not named:
        raise NotFound(f"no worker has the id or name {ref!r}; list them: gpufleet workers list")
    raise InvalidInput(
        f"{len(named)} workers are named {ref!r} ({', '.join(named)}); give the id of the "
        f"one you mean, e.g. gpufleet workers show {named[0]}"
    )


def job_id(api: Reader, ref: str) -> str:
    """The id of the job `ref` names: its id, else the one job whose id starts with it."""
    if not ref.strip():
        raise InvalidInput("give a job's id, or the start of one; list them: gpufleet jobs list")
    found = api.get("/api/queue", id_prefix=ref[:ID_PREFIX_MAX], limit=PREFIX_SHOWN)
    ids = [j["id"] for j in found["jobs"] if j["id"].startswith(ref)]
    if ref in ids:
        return ref
    if len(ids) == 1 and found["total"] == 1:
        return str(ids[0])
    if not ids:
        raise NotFound(f"no job's id is or starts with {ref!r}; list them: gpufleet jobs list")
    raise InvalidInput(
        f"{found['total']} jobs' ids start with {ref!r} ({', '.join(ids)}"
        f"{', …' if found['total'] > len(ids) else ''}); give more of the id, e.g. "
        f"gpufleet jobs show {ids[0]}"
    )
