"""Worker pools as an admin configures them (#36): create, list, show, change, delete, each
change audited. What a pool launches and retires is `domain/capacity.py`'s decision; the
providers and the loop that applies it come later (docs/capacity.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.domain import pools as rules
from gpufleet.domain.pools import Launch, Pool
from gpufleet.domain.secrets import new_id
from gpufleet.errors import Conflict, NotFound
from gpufleet.server.context import Context, Tx, transaction
from gpufleet.server.hub import POOLS_TOPIC
from gpufleet.store import Queries

RECENT_LAUNCHES = 20  # a pool's launches its page shows, newest first


@dataclass(frozen=True, slots=True)
class PoolView:
    pool: Pool
    live_launches: int  # launching, registered or terminating: counted toward max_workers
    launches: tuple[Launch, ...] = ()  # its newest, when one pool is shown


def _missing(name: str) -> NotFound:
    return NotFound(
        f"no pool {name!r}; list the pools with GET /api/admin/pools",
        cli=f"no pool {name!r}; list the pools with `gpufleet pools list`",
    )


def _taken(name: str) -> Conflict:
    return Conflict(
        f"a pool named {name!r} exists already; choose another name, or change it with "
        f"PATCH /api/admin/pools/{name}",
        cli=f"a pool named {name!r} exists already; choose another name, or change it with "
        f"`gpufleet pools update {name}`",
    )


async def _pool(q: Queries, name: str, *, lock: bool = False) -> Pool:
    pool = await q.get_pool(name, lock=lock)
    if pool is None:
        raise _missing(name)
    return pool


async def _view(q: Queries, pool: Pool, launches: int = 0) -> PoolView:
    counts = await q.live_launch_counts()
    recent = tuple(await q.recent_launches(pool.id, launches)) if launches else ()
    return PoolView(pool, counts.get(pool.id, 0), recent)


async def list_pools(ctx: Context) -> list[PoolView]:
    async with ctx.store.read() as q:
        counts = await q.live_launch_counts()
        return [PoolView(p, counts.get(p.id, 0)) for p in await q.list_pools()]


async def get_pool(ctx: Context, name: str) -> PoolView:
    async with ctx.store.read() as q:
        return await _view(q, await _pool(q, name), RECENT_LAUNCHES)


async def create(
    ctx: Context, name: str, given: Mapping[str, Any], actor: str, client: str | None
) -> PoolView:
    """A new pool of `given`'s fields (`rules.EDITABLE`; the defaults for those not given)."""
    rules.check_pool_name(name)
    values = rules.check_pool(given)
    pool_id = new_id("pool")
    async with transaction(ctx) as tx:
        if await tx.q.get_pool(name) is not None:
            raise _taken(name)
        row = {"id": pool_id, "name": name, **values}
        stamps = {"created_at": tx.now, "created_by": actor, "updated_at": tx.now}
        if not await tx.q.insert_pool(row | stamps):
            raise _taken(name)  # created by another request since the look above
        tx.audit("pool.created", actor, pool_id, client, name=name, **rules.audited(values))
        tx.wake(POOLS_TOPIC)
        return await _view(tx.q, await _pool(tx.q, name))


async def update(
    ctx: Context, name: str, changes: Mapping[str, Any], actor: str, client: str | None
) -> PoolView:
    """Change the fields `changes` names (checked with the pool's others); a field sent as
    null goes back to its default."""
    async with transaction(ctx) as tx:
        pool = await _pool(tx.q, name, lock=True)
        values = rules.check_changes(pool, changes)
        if values:
            await tx.q.update_pool(pool.id, **values, updated_at=tx.now)
            tx.audit("pool.updated", actor, pool.id, client, name=name, **rules.audited(values))
            tx.wake(POOLS_TOPIC)
        return await _view(tx.q, await _pool(tx.q, name))


async def delete(ctx: Context, name: str, actor: str, client: str | None) -> None:
    """Delete the pool and its launches' records; refused while one may have a machine up."""
    async with transaction(ctx) as tx:
        pool = await _pool(tx.q, name, lock=True)
        await _none_live(tx, pool)
        await tx.q.delete_pool(pool.id)
        tx.audit("pool.deleted", actor, pool.id, client, name=name)
        tx.wake(POOLS_TOPIC)


async def _none_live(tx: Tx, pool: Pool) -> None:
    live = (await tx.q.live_launch_counts()).get(pool.id, 0)
    if live:
        raise Conflict(
            f"pool {pool.name} has {live} launch(es) launching, registered or terminating, "
            f"whose machines may be up; disable it (PATCH with enabled false) and delete it "
            "once its launches have ended",
            cli=f"pool {pool.name} has {live} launch(es) launching, registered or terminating, "
            f"whose machines may be up; disable it (`gpufleet pools update {pool.name} "
            "--disable`) and delete it once its launches have ended",
        )
