"""Reports applied together (group commit): on PostgreSQL, the reports that wait on one row's
lock (a gang's start: each node's acknowledgement and `running`; its nodes' completions
besides rank 0's, #35) are taken in one transaction instead of one each, while the one
before them commits.

Each report keeps its own checks and its own answer. A refused one (its error goes to its
caller) undoes only its own writes: the batch then runs again, each report in a savepoint of
its own, and the others commit. A failure of the transaction itself (the database) goes to
every caller of the batch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpufleet.errors import DomainError
from gpufleet.server.context import Context, Tx, transaction

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Item:
    worker_id: str  # the reporter's worker, locked before the row the batch shares
    apply: Callable[[Tx], Awaitable[Any]]
    done: asyncio.Future[Any] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


async def together(
    ctx: Context, key: str, worker_id: str, apply: Callable[[Tx], Awaitable[T]]
) -> T:
    """Apply `apply` in a transaction shared with the other reports queued under `key` (the
    job) meanwhile; its result, or the error it raised. The reporters' worker rows are
    locked first, in id order, then each report runs (lifecycle's lock order: workers
    before the job)."""
    item = _Item(worker_id, apply)
    if ctx.batches.join(key, item):  # the first: its own transaction at once
        try:
            await _commit(ctx, ctx.batches.take(key))
        finally:
            ctx.batches.hand_on(key, lambda: _drain(ctx, key))
    # The caller going away (a cancelled request) leaves its report in the batch.
    result: T = await asyncio.shield(item.done)
    return result


async def _drain(ctx: Context, key: str) -> None:
    while batch := ctx.batches.drained(key):
        await _commit(ctx, batch)


class _Refused(Exception):
    """A report of the batch was refused in the pass without savepoints: undo the pass."""


async def _commit(ctx: Context, batch: list[_Item]) -> None:
    """Apply the batch in one transaction, each report's outcome to its caller. First
    without savepoints (a refusal is rare: a worker's mistake or a report that came late);
    if one is refused, that transaction is undone and the batch applied again with a
    savepoint around each report, so the refused one alone is undone."""
    try:
        try:
            outcomes = await _apply(ctx, batch, alone=False)
        except _Refused:
            outcomes = await _apply(ctx, batch, alone=True)
    except Exception as exc:  # the transaction failed: every report in it did
        outcomes = [(False, exc)] * len(batch)
    except BaseException:  # cancelled (shutdown): so are the callers
        for item in batch:
            item.done.cancel()
        raise
    for item, (ok, value) in zip(batch, outcomes, strict=True):
        if item.done.done():
            continue
        if ok:
            item.done.set_result(value)
        else:
            item.done.set_exception(value)


async def _apply(ctx: Context, batch: list[_Item], *, alone: bool) -> list[tuple[bool, Any]]:
    outcomes: list[tuple[bool, Any]] = []
    async with transaction(ctx) as tx:
        if len(batch) > 1:  # (a report alone locks its own worker before the job)
            await tx.q.lock_workers({item.worker_id for item in batch})
        for item in batch:
            if not alone:
                try:
                    outcomes.append((True, await item.apply(tx)))
                except DomainError as exc:
                    raise _Refused from exc
                continue
            try:
                async with tx.savepoint():
                    outcomes.append((True, await item.apply(tx)))
            except DomainError as exc:  # refused: this report alone
                outcomes.append((False, exc))
    return outcomes
