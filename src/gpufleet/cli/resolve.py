"""Names for ids: an operator may name a worker where its id is asked for."""

from __future__ import annotations

from typing import Any, Protocol

from gpufleet.errors import InvalidInput, NotFound


class Reader(Protocol):
    """What resolving needs of the client (cli.api.ApiClient)."""

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
