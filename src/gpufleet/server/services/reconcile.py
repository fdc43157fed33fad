"""The pools' reconcile loop (#36), run by the leader every --pool-interval seconds.

Each pass: launches follow their workers (registered; never registered by the pool's
`launch_timeout_s`: terminated, counted as failed; an ephemeral worker gone after its job:
its instance terminated), then `domain/capacity.py` decides, from the waiting jobs the policy
would start, the fleet and the launches, what each pool launches and retires, and this
applies it. A launch is recorded (its worker and token minted, state `launching`) in a
transaction before its provider is called: a crash leaves a row, never a second launch.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from gpufleet.domain import pools as rules
from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.capacity import FleetWorker, WaitingJob, decide
from gpufleet.domain.jobspec import gang_shape
from gpufleet.domain.limits import limit_hit
from gpufleet.domain.pool_reasons import PoolWhy
from gpufleet.domain.pools import Launch, LaunchState, Pool
from gpufleet.domain.records import Worker
from gpufleet.domain.secrets import new_id
from gpufleet.domain.states import WorkerStatus, WorkerType
from gpufleet.errors import ProviderError
from gpufleet.server.context import Context, transaction
from gpufleet.server.local import own_url
from gpufleet.server.providers import Provider, Providers, WorkerLaunch
from gpufleet.server.providers.local import log_tail
from gpufleet.server.services import fleet
from gpufleet.server.services.standing import candidate
from gpufleet.server.services.waiting import ranked_queue

log = logging.getLogger("gpufleet.server.pools")
CALL_TIMEOUT_S = 120.0  # the longest a provider's launch or terminate may take
ENDED_READ = 20  # a pool's newest launches the decision reads: its failures in a row
L = LaunchState
T = TypeVar("T")


async def _call(fn: Callable[..., T], *args: Any) -> T:
    """A provider's call, off the event loop, under `CALL_TIMEOUT_S`."""
    try:
        return await asyncio.wait_for(asyncio.to_thread(fn, *args), CALL_TIMEOUT_S)
    except ProviderError:
        raise
    except TimeoutError:
        raise ProviderError(f"the provider did not answer in {CALL_TIMEOUT_S:.0f} s") from None
    except Exception as exc:  # a provider's bug fails its launch, not the whole pass
        raise ProviderError(f"the provider failed: {exc!r}") from exc


class Reconciler:
    """The loop's state on this replica: the providers, and since when it has seen each
    pool worker idle (a new leader starts counting afresh: it retires later, never sooner)."""

    def __init__(self, providers: Providers | None = None) -> None:
        self.providers = providers or Providers()
        self.idle_seen: dict[str, datetime] = {}
        self.said: dict[str, PoolWhy] = {}  # each pool's last reason logged

    async def __call__(self, ctx: Context) -> None:
        async with ctx.store.read() as q:
            pools = [p for p in await q.list_pools() if self.providers.of(p.provider)]
            if not pools:
                return
            live = await q.live_launches()
            workers = {w.id: w for w in await q.list_workers()}
        by_id = {p.id: p for p in pools}
        for launch in live:
            if launch.pool_id in by_id:
                await self._follow(ctx, by_id[launch.pool_id], launch, workers)
        await self._plan(ctx, pools)

    # ---- launches follow their workers -------------------------------------------------------

    async def _follow(
        self, ctx: Context, pool: Pool, launch: Launch, workers: dict[str, Worker]
    ) -> None:
        worker = workers.get(launch.worker_id or "")
        now = ctx.clock()
        if launch.state is L.TERMINATING:  # a terminate that failed, or a crash mid-way
            await self._terminate(ctx, pool, launch)
        elif launch.state is L.LAUNCHING:
            if worker is not None and worker.ever_connected:
                await _move(ctx, launch, L.REGISTERED, registered_at=now)
            elif (now - launch.created_at).total_seconds() >= pool.launch_timeout_s:
                said = f"its worker did not register in {pool.launch_timeout_s} s"
                stderr = log_tail(self._work_dir(ctx, pool, launch), rules.STDERR_KEPT)
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
        provider = self.providers.of(pool.provider)
        if launch.instance_id is not None and provider is not None:
            try:
                await _call(provider.terminate, launch.instance_id)
            except ProviderError as exc:
                log.warning("pool %s: could not terminate %s: %s", pool.name, launch.id, exc)
                async with transaction(ctx) as tx:
                    await tx.q.update_launch(launch.id, terminate_tries=launch.terminate_tries + 1)
                return
        await _move(ctx, launch, L.TERMINATED, ended_at=ctx.clock())

    # ---- the decision, applied --------------------------------------------------------------

    async def _plan(self, ctx: Context, pools: Sequence[Pool]) -> None:
        now = ctx.clock()
        async with ctx.store.read() as q:
            launches: dict[str, Launch] = {x.id: x for x in await q.live_launches()}
            for pool in pools:
                launches |= {x.id: x for x in await q.recent_launches(pool.id, ENDED_READ)}
            workers = await q.list_workers()
            ranked = await ranked_queue(q, now)
        waiting = [
            WaitingJob(j.id, j.requirement(), gang_shape(j.gpu_count, j.config))
            for j in ranked.order
            if limit_hit(candidate(j, ranked.snap), ranked.snap) is None
        ]
        launch_of = {x.worker_id: x for x in launches.values() if x.state in rules.LIVE_LAUNCH}
        pool_of = {worker_id: x.pool_id for worker_id, x in launch_of.items()}
        fleet_now = self._fleet(workers, pool_of, now)
        plan = decide(pools, waiting, fleet_now, list(launches.values()), now)
        by_name = {p.name: p for p in pools}
        for name, pool_plan in plan.pools.items():
            pool = by_name[name]
            if self.said.get(name) is not pool_plan.reason.code:
                self.said[name] = pool_plan.reason.code
                log.info("%s", pool_plan.reason)
            for worker_id in pool_plan.retire:
                if worker_id in launch_of:
                    await self._retire(ctx, pool, launch_of[worker_id])
            for _ in range(pool_plan.launch):
                await self._launch(ctx, pool)

    def _fleet(
        self, workers: Sequence[Worker], pool_of: dict[str | None, str], now: datetime
    ) -> list[FleetWorker]:
        seen = self.idle_seen
        self.idle_seen = {  # the workers idle now, since when this replica first saw them so
            w.id: seen.get(w.id, now) for w in workers if w.status is WorkerStatus.IDLE
        }
        return [
            FleetWorker(w.capacity(), pool_of.get(w.id), self.idle_seen.get(w.id)) for w in workers
        ]

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
        provider = self.providers.of(pool.provider)
        if provider is None:  # only the pools of a built provider are planned
            return
        record = await self._start(ctx, pool, provider, launch_id, worker_id, name, token)
        async with transaction(ctx) as tx:
            launch = await tx.q.get_launch(launch_id, lock=True)
            if launch is not None and launch.state is L.LAUNCHING:
                await tx.q.update_launch(launch_id, **record)
                if record.get("state") == L.FAILED.value:
                    await tx.q.revoke_tokens(worker_id, tx.now)

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
        spec = WorkerLaunch(  # a worker elsewhere calls the public address
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
            instance = await _call(provider.launch, spec)
        except ProviderError as exc:
            log.warning("pool %s: launch %s failed: %s", pool.name, launch_id, exc)
            return {
                "state": L.FAILED.value,
                "error": str(exc)[: rules.ERROR_KEPT],
                "stderr": rules.kept_stderr(exc.stderr) or None,
                "ended_at": ctx.clock(),
            }
        log.info("pool %s: launched %s as %s (worker %s)", pool.name, launch_id, instance, name)
        return {"instance_id": instance}

    @staticmethod
    def _work_dir(ctx: Context, pool: Pool, launch: Launch | str) -> Path:
        launch_id = launch if isinstance(launch, str) else launch.id
        return ctx.settings.data_dir.resolve() / "pools" / pool.name / launch_id


async def _move(ctx: Context, launch: Launch, to: LaunchState, **values: Any) -> bool:
    """Move a launch to `to` if its state (read again, locked) allows it."""
    async with transaction(ctx) as tx:
        now = await tx.q.get_launch(launch.id, lock=True)
        if now is None or to not in rules.LAUNCH_TRANSITIONS[now.state]:
            return False
        await tx.q.update_launch(launch.id, state=to.value, **values)
        return True


async def _revoke(ctx: Context, worker_id: str) -> None:
    async with transaction(ctx) as tx:
        await tx.q.revoke_tokens(worker_id, tx.now)
