"""The pools' reconcile loop (#36), run by the leader every --pool-interval seconds.

Each pass: launches follow their workers (registered; never registered by the pool's
`launch_timeout_s`: terminated, counted as failed; an ephemeral worker gone after its job:
its instance terminated), then `domain/capacity.py` decides, from the waiting jobs the policy
would start, the fleet and the launches, what each pool launches and retires, and this
applies it. A launch is recorded (its worker and token minted, state `launching`) in a
transaction before its provider is called: a crash leaves a row, never a second launch.
After a crash, such a row without an instance id is ended as soon as no replica can still be
calling its provider (`domain/pool_strays.py` `orphaned`), and the machine it may have
started is found as a stray: every `LIST_EVERY_S`, each pool's provider lists its instances,
and a stray is terminated, retried after a failure with the pools' backoff.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from gpufleet.domain import pools as rules
from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.pool_limits import backoff_s
from gpufleet.domain.pool_reasons import PoolReason
from gpufleet.domain.pool_strays import INTERRUPTED, orphaned, strays
from gpufleet.domain.pools import Launch, LaunchState, Pool
from gpufleet.domain.records import Worker
from gpufleet.domain.secrets import new_id
from gpufleet.domain.states import WorkerStatus, WorkerType
from gpufleet.errors import ProviderError
from gpufleet.server.context import Context, transaction
from gpufleet.server.hub import POOLS_TOPIC
from gpufleet.server.local import own_url
from gpufleet.server.providers import Launched, Provider, Providers, WorkerLaunch
from gpufleet.server.providers.local import log_tail
from gpufleet.server.services import capacity, fleet

log = logging.getLogger("gpufleet.server.pools")
LIST_EVERY_S = 60.0  # how often a pool's provider is asked for its instances (strays)
# Beyond --pool-call-timeout, what a provider that kills its own calls has to say so.
CALL_OVERRUN_S = 15.0
CLOCKED = frozenset({"next_in_s", "last_launch_ago_s"})  # a reason's parameters that tick
L = LaunchState
T = TypeVar("T")


async def _call(timeout_s: float, fn: Callable[..., T], *args: Any) -> T:
    """A provider's call, off the event loop; given up on (its thread left to end) past
    `timeout_s` and the overrun."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(fn, *args), timeout_s + CALL_OVERRUN_S)
    except ProviderError:
        raise
    except TimeoutError:
        raise ProviderError(f"the provider did not answer in {timeout_s:g} s") from None
    except Exception as exc:  # a provider's bug fails its launch, not the whole pass
        raise ProviderError(f"the provider failed: {exc!r}") from exc


class Reconciler:
    """The loop's state on this replica: the providers, and since when it has seen each
    pool worker idle (a new leader starts counting afresh: it retires later, never sooner)."""

    def __init__(self, providers: Providers | None = None) -> None:
        self.providers = providers or Providers()
        self.idle_seen: dict[str, datetime] = {}
        self.said: dict[str, str] = {}  # each pool's last reason logged, less its clock
        self.listed_at: dict[str, datetime] = {}  # when each pool's provider last listed
        # Strays being terminated: (pool id, instance id) → failures, and the next try.
        self.strays: dict[tuple[str, str], tuple[int, datetime]] = {}

    async def __call__(self, ctx: Context) -> None:
        async with ctx.store.read() as q:
            pools = [p for p in await q.list_pools() if self.providers.of(p)]
            if not pools:
                return
            live = await q.live_launches()
            workers = {w.id: w for w in await q.list_workers()}
        by_id = {p.id: p for p in pools}
        unnamed = any(x.state is L.LAUNCHING and x.instance_id is None for x in live)
        alone = unnamed and await _alone(ctx)
        for launch in live:
            if launch.pool_id in by_id:
                await self._follow(ctx, by_id[launch.pool_id], launch, workers, alone=alone)
        for pool in pools:
            await self._strays(ctx, pool)
        await self._plan(ctx, pools)

    @property
    def timeout_s(self) -> float:
        return self.providers.call_timeout_s

    # ---- launches follow their workers -------------------------------------------------------

    async def _follow(
        self, ctx: Context, pool: Pool, launch: Launch, workers: dict[str, Worker], *, alone: bool
    ) -> None:
        worker = workers.get(launch.worker_id or "")
        now = ctx.clock()
        bound = self.timeout_s + CALL_OVERRUN_S
        if launch.state is L.TERMINATING:  # a terminate that failed, or a crash mid-way
            await self._terminate(ctx, pool, launch)
        elif launch.state is L.LAUNCHING:
            if worker is not None and worker.ever_connected:
                await _move(ctx, launch, L.REGISTERED, registered_at=now)
            elif orphaned(launch, now, alone=alone, call_bound_s=bound):
                log.warning("pool %s: launch %s: %s", pool.name, launch.id, INTERRUPTED)
                if await _move(ctx, launch, L.TERMINATING, error=INTERRUPTED):
                    await self._terminate(ctx, pool, launch)  # its token revoked
            elif (now - launch.created_at).total_seconds() >= pool.launch_timeout_s:
                said = f"its worker did not register in {pool.launch_timeout_s} s"
                # A local worker's log; else what the launch command printed.
                stderr = log_tail(self._work_dir(ctx, pool, launch), rules.STDERR_KEPT)
                stderr = stderr or launch.stderr or ""
                if await _move(ctx, launch, L.TERMINATING, error=said, stderr=stderr or None):
                    await self._terminate(ctx, pool, launch)
        elif (worker is None or (worker.offline and worker.spent)) and await _move(
            ctx, launch, L.TERMINATING
        ):  # its worker is gone, or left after its one job
            await self._terminate(ctx, pool, launch)

    async def _terminate(self, ctx: Context, pool: Pool, launch: Launch) -> None:
        """Stop a `terminating` launch's instance, its worker's token revoked first; a
        failure is retried on the next pass."""
        if launch.worker_id is not None:
            await _revoke(ctx, launch.worker_id)
        provider = self.providers.of(pool)
        if launch.instance_id is not None and provider is not None:
            try:
                await _call(self.timeout_s, provider.terminate, launch.instance_id)
            except ProviderError as exc:
                log.warning("pool %s: could not terminate %s: %s", pool.name, launch.id, exc)
                async with transaction(ctx) as tx:
                    await tx.q.update_launch(launch.id, terminate_tries=launch.terminate_tries + 1)
                return
        await _move(ctx, launch, L.TERMINATED, ended_at=ctx.clock())

    # ---- strays: instances listed that nothing follows --------------------------------------

    async def _strays(self, ctx: Context, pool: Pool) -> None:
        """List the pool's instances (every `LIST_EVERY_S`) and terminate its strays, each
        tried again after a failure once its backoff has passed."""
        now = ctx.clock()
        provider = self.providers.of(pool)
        last = self.listed_at.get(pool.id)
        if provider is not None and (last is None or (now - last).total_seconds() >= LIST_EVERY_S):
            self.listed_at[pool.id] = now
            try:
                listed = await _call(self.timeout_s, provider.list)
            except ProviderError as exc:
                log.warning("pool %s: could not list its instances: %s", pool.name, exc)
                return
            # Judged against every pool's launches: a provider may list more than this
            # pool's machines (a Slurm user's jobs); one that is another's is never taken.
            async with ctx.store.read() as q:
                named = await q.launches_named(listed)
                unnamed = any(x.instance_id is None for x in await q.live_launches())
                workers = {w.id: w for w in await q.list_workers()}
            found = strays(listed, named, workers, unnamed=unnamed)
            known = {i: v for (p, i), v in self.strays.items() if p == pool.id}
            self.strays = {k: v for k, v in self.strays.items() if k[0] != pool.id}
            self.strays |= {(pool.id, i): known.get(i, (0, now)) for i in found}
            for launch in named:
                if launch.instance_id in found and launch.worker_id is not None:
                    await _revoke(ctx, launch.worker_id)
        for (pool_id, instance), (failures, due) in list(self.strays.items()):
            if pool_id == pool.id and provider is not None and due <= now:
                await self._end_stray(ctx, pool, provider, instance, failures)

    async def _end_stray(
        self, ctx: Context, pool: Pool, provider: Provider, instance: str, failures: int
    ) -> None:
        key = (pool.id, instance)
        try:
            await _call(self.timeout_s, provider.terminate, instance)
        except ProviderError as exc:
            wait = backoff_s(failures + 1)
            log.warning(
                "pool %s: could not terminate stray instance %s (next try in %.0f s): %s",
                pool.name,
                instance,
                wait,
                exc,
            )
            self.strays[key] = (failures + 1, ctx.clock() + timedelta(seconds=wait))
            return
        log.warning("pool %s: terminated stray instance %s (no live launch)", pool.name, instance)
        self.strays.pop(key, None)

    # ---- the decision, applied --------------------------------------------------------------

    async def _plan(self, ctx: Context, pools: Sequence[Pool]) -> None:
        now = ctx.clock()
        async with ctx.store.read() as q:
            made = await capacity.decision(q, pools, now, lambda ws: self._idle_since(ws, now))
        launches = made.launches.values()
        launch_of = {x.worker_id: x for x in launches if x.state in rules.LIVE_LAUNCH}
        by_name = {p.name: p for p in pools}
        for name, pool_plan in made.plan.pools.items():
            pool = by_name[name]
            if self.said.get(name) != (said := _unclocked(pool_plan.reason)):
                self.said[name] = said
                log.info("%s", pool_plan.reason)
            for worker_id in pool_plan.retire:
                if worker_id in launch_of:
                    await self._retire(ctx, pool, launch_of[worker_id])
            for _ in range(pool_plan.launch):
                await self._launch(ctx, pool)

    def _idle_since(self, workers: Sequence[Worker], now: datetime) -> dict[str, datetime]:
        """The workers idle now, since when this replica first saw them so."""
        seen = self.idle_seen
        self.idle_seen = {
            w.id: seen.get(w.id, now) for w in workers if w.status is WorkerStatus.IDLE
        }
        return self.idle_seen

    async def _retire(self, ctx: Context, pool: Pool, launch: Launch) -> None:
        """Drain its idle worker; terminate it if it is still without a job."""
        if launch.worker_id is None:  # a live launch's worker is minted with it
            return
        await fleet.drain(ctx, launch.worker_id, SYSTEM_ACTOR, None)
        async with transaction(ctx) as tx:
            worker = await tx.q.get_worker(launch.worker_id, lock=True)
            if worker is not None and worker.current_attempt_id is not None:
                return  # it took a job before the drain: it is retired once that ends
        if await _move(ctx, launch, L.TERMINATING):
            await self._terminate(ctx, pool, launch)

    async def _launch(self, ctx: Context, pool: Pool) -> None:
        launch_id, worker_id = new_id("launch"), new_id("w")
        name = f"{pool.name[:48]}-{launch_id.removeprefix('launch_')}"
        async with transaction(ctx) as tx:
            token = await fleet.add_worker(
                tx, worker_id, name, pool.worker_type, dict(pool.labels), SYSTEM_ACTOR, None
            )
            await tx.q.insert_launch(
                {
                    "id": launch_id,
                    "pool_id": pool.id,
                    "state": L.LAUNCHING.value,
                    "worker_id": worker_id,
                    "created_at": tx.now,
                }
            )
        provider = self.providers.of(pool)
        if provider is None:  # only the pools of a built provider are planned
            return
        record = await self._start(ctx, pool, provider, launch_id, worker_id, name, token)
        late = None
        async with transaction(ctx) as tx:
            launch = await tx.q.get_launch(launch_id, lock=True)
            instance = record.get("instance_id")
            if instance is not None and await tx.q.launches_named([instance], pool.id):
                said = (
                    f"the provider answered instance id {instance!r}, which an earlier launch "
                    "of the pool has: each launch must name a machine of its own"
                )
                record = _refused(ctx, said, record.get("stderr") or "")
            if launch is not None and launch.state is L.LAUNCHING:
                await tx.q.update_launch(launch_id, **record)
                tx.wake(POOLS_TOPIC)
                if record.get("state") == L.FAILED.value:
                    await tx.q.revoke_tokens(worker_id, tx.now)
            elif instance is not None and "state" not in record:
                late = instance  # an answer after its launch ended: an orphan to a new leader
        if late is not None:
            await self._end_late(ctx, pool, provider, launch_id, late)

    async def _end_late(
        self, ctx: Context, pool: Pool, provider: Provider, launch_id: str, instance: str
    ) -> None:
        """Terminate the machine of a launch that ended while its provider was called; one
        not terminated now is a stray for the provider's list."""
        said = "pool %s: launch %s ended while its provider was called; terminating %s"
        log.warning(said, pool.name, launch_id, instance)
        try:
            await _call(self.timeout_s, provider.terminate, instance)
        except ProviderError as exc:
            log.warning("pool %s: could not terminate %s: %s", pool.name, instance, exc)

    async def _start(
        self,
        ctx: Context,
        pool: Pool,
        provider: Provider,
        launch_id: str,
        worker_id: str,
        name: str,
        token: str,
    ) -> dict[str, Any]:
        """What the provider's answer writes on the launch: its instance, or its failure."""
        local = isinstance(pool.provider, rules.LocalProvider)
        spec = WorkerLaunch(
            # A local worker calls the loopback address; a machine elsewhere, --public-url.
            orchestrator_url=own_url(ctx.settings) if local else ctx.settings.worker_url(),
            token=token,
            name=name,
            persistent=pool.worker_type is WorkerType.PERSISTENT,
            pool=pool.name,
            work_dir=self._work_dir(ctx, pool, launch_id),
            ca_cert=ctx.settings.tls_cert,
            gpus=pool.gpu_count,
        )
        try:
            answer = await _call(self.timeout_s, provider.launch, spec)
        except ProviderError as exc:
            log.warning("pool %s: launch %s failed: %s", pool.name, launch_id, exc)
            return _refused(ctx, str(exc), exc.stderr)
        launched = answer if isinstance(answer, Launched) else Launched(answer)
        instance = launched.instance_id
        log.info("pool %s: launched %s as %s (worker %s)", pool.name, launch_id, instance, name)
        return {"instance_id": instance, "stderr": rules.kept_stderr(launched.stderr) or None}

    @staticmethod
    def _work_dir(ctx: Context, pool: Pool, launch: Launch | str) -> Path:
        launch_id = launch if isinstance(launch, str) else launch.id
        return ctx.settings.data_dir.resolve() / "pools" / pool.name / launch_id


def _unclocked(reason: PoolReason) -> str:
    """A reason less what changes with the clock alone: logged again when the rest changes
    (a third failure, a new excerpt, another count)."""
    kept = {k: v for k, v in reason.params.items() if k not in CLOCKED}
    return f"{reason.code} {sorted(kept.items())}"


def _refused(ctx: Context, error: str, stderr: str = "") -> dict[str, Any]:
    """What a failed launch's row is given."""
    return {
        "state": L.FAILED.value,
        "error": error[: rules.ERROR_KEPT],
        "stderr": rules.kept_stderr(stderr) or None,
        "ended_at": ctx.clock(),
    }


async def _move(ctx: Context, launch: Launch, to: LaunchState, **values: Any) -> bool:
    """Move a launch to `to` if its state (read again, locked) allows it."""
    async with transaction(ctx) as tx:
        now = await tx.q.get_launch(launch.id, lock=True)
        if now is None or to not in rules.LAUNCH_TRANSITIONS[now.state]:
            return False
        await tx.q.update_launch(launch.id, state=to.value, **values)
        tx.wake(POOLS_TOPIC)
        return True


async def _alone(ctx: Context) -> bool:
    """Whether no other replica could be calling a provider now: one process on SQLite, or
    the only replica linked on PostgreSQL (unknown while this one's own link is down: no)."""
    if not ctx.replicas.shared:
        return True
    return await ctx.replicas.alive() == {ctx.instance_id}


async def _revoke(ctx: Context, worker_id: str) -> None:
    async with transaction(ctx) as tx:
        await tx.q.revoke_tokens(worker_id, tx.now)
