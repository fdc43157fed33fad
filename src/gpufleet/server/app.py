"""The orchestrator's ASGI application and its lifespan."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gpufleet import __version__, logs
from gpufleet.artifacts.backends import open_artifact_store
from gpufleet.server import errors, streams
from gpufleet.server.context import Context
from gpufleet.server.door import CloseAfterRefusal, RefuseNulInUrl
from gpufleet.server.headers import ResponseHeaders
from gpufleet.server.local import parse_local_gpus, start_local_runner
from gpufleet.server.oidc_client import sso_provider
from gpufleet.server.providers import Providers
from gpufleet.server.ratelimit import FailureLimiter
from gpufleet.server.routes import (
    admin,
    approvals,
    artifacts,
    capacity,
    checkpoints,
    configs,
    events,
    fleet,
    history,
    housekeeping,
    ops,
    people,
    policy,
    pools,
    queue,
    s3_storage,
    secrets,
    simpletuner_queue,
    sso,
    sweeps,
    ui,
    uploads,
    webhooks,
    workdir_files,
    workdirs,
    workers,
)
from gpufleet.server.routes import audit as audit_routes
from gpufleet.server.services import (
    agents,
    audit,
    auth,
    delivery,
    dispatch,
    fleet_history,
    health,
    policy_loop,
    reconcile,
    retention,
    sessions,
)
from gpufleet.server.settings import ServerSettings
from gpufleet.store import open_store
from gpufleet.store.engine import data_dir_writable, default_database_url
from gpufleet.supervisor import Supervisor

log = logging.getLogger("gpufleet.server")
MAX_BODY_BYTES = 4 * 1024 * 1024


# The routes whose body is a file streamed into the artifact store, never held whole: their
# own limit is the announced size and the job's (docs/artifacts.md), or --workdir-max-bytes
# for a workdir snapshot (docs/jobs.md), not the JSON body's.
_STREAMED_BODY = re.compile(
    r"/api/workers/job/[^/]+/upload/[^/]+|/api/cloud/storage/.+|/api/workdirs/[^/]+"
)


class BodyLimit:
    """Refuse bodies over the limit (413, JSON): before reading when Content-Length says so,
    and while reading when a chunked body grows past it. Artifact uploads (a PUT to
    `_STREAMED_BODY`) are streamed to the store and limited there."""

    def __init__(self, app: ASGIApp, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (
            scope["method"] == "PUT" and _STREAMED_BODY.fullmatch(scope["path"])
        ):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > self.limit:
                body = b'{"detail":"request body too large (limit 4 MiB); send less"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 413,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        seen = 0

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:  # FastAPI re-raises this from body parsing
                    raise HTTPException(413)
            return message

        await self.app(scope, counting_receive, send)


def _die(name: str, exc: BaseException) -> None:
    log.critical("stopping the orchestrator: background loop %s died (%r)", name, exc)
    os.kill(os.getpid(), signal.SIGTERM)


def end_streams(app: FastAPI) -> None:
    """Shutdown has begun: every event stream ends now, and any opened from now on, so that
    the server does not wait on them (their last database calls finish in the lifespan)."""
    ctx: Context | None = getattr(app.state, "ctx", None)
    if ctx is not None:
        ctx.hub.close_all()


StartHook = Callable[[Context, Supervisor], Awaitable[None]]
Sweep = Callable[[], Awaitable[None]]


def create_app(settings: ServerSettings, *, on_start: StartHook | None = None) -> FastAPI:
    parse_local_gpus(settings.local_gpus)  # a bad value fails before anything starts

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
        data_dir_writable(settings.data_dir)
        store = await open_store(settings.database_url or default_database_url(settings.data_dir))
        ctx = Context(
            settings=settings,
            store=store,
            ui_secret=sessions.load_secret(settings.data_dir),
            audit_key=audit.load_key(settings.audit_key_file or settings.data_dir / "audit.key"),
            artifacts=open_artifact_store(settings.artifact_settings()),
            auth_failures=FailureLimiter(settings.auth_failure_limit, settings.auth_failure_window),
            sso=sso_provider(settings),
        )
        app.state.ctx = ctx
        logs.set_replica(ctx.instance_id)
        await audit.seal_legacy(ctx)
        raw = await auth.bootstrap_admin_key(ctx)
        if raw and settings.print_admin_key:
            print(
                f"gpufleet: created the admin API key (shown once; also in "
                f"{settings.data_dir / 'admin.token'}):\n  {raw}",
                flush=True,
            )
        elif raw:  # a log collector must never receive the key itself
            log.info(
                "created the admin API key in %s (mode 0600)", settings.data_dir / "admin.token"
            )
        supervisor = Supervisor(_die)
        if ctx.replicas.shared:
            supervisor.spawn("replicas", ctx.replicas.listen(), forever=True)
            supervisor.spawn("replica-interest", ctx.replicas.speak(), forever=True)
            await ctx.replicas.wait_connected()
        await health.reset_streams_after_start(ctx)

        def leader_only(sweep: Callable[[Context], Awaitable[object]]) -> Sweep:
            async def step() -> None:
                if await ctx.replicas.leading():  # one replica at a time runs the sweeps
                    await sweep(ctx)

            return step

        supervisor.every("health", settings.health_interval, leader_only(health.health_sweep))
        # usage for fair share, its samples, and preemption (docs/scheduling.md)
        supervisor.every("policy", settings.usage_interval, leader_only(policy_loop.sweep))
        # the worker pools: launch, follow and retire their machines (docs/capacity.md)
        providers = Providers(call_timeout_s=settings.pool_call_timeout)
        supervisor.every(
            "pools", settings.pool_interval, leader_only(reconcile.Reconciler(providers))
        )
        supervisor.every(  # the fleet over time: busy, idle, GPU load, queue depth and wait
            "fleet-history",
            settings.fleet_sample_interval,
            leader_only(fleet_history.sample),
        )
        supervisor.spawn("pings", ctx.keepalive.run(), forever=True)  # the streams' keep-alives
        supervisor.every("audit-head", 1.0, lambda: audit.record_head(ctx))  # every replica
        supervisor.every(  # every replica writes the heartbeats it heard
            "heartbeat-flush",
            min(0.5, settings.heartbeat_timeout / 8),
            lambda: agents.flush_heartbeats(ctx),
        )
        if store.checkpoints:
            supervisor.every("wal-checkpoint", 1.0, store.checkpoint)
        if store.workers is not None:  # SQLite: what the worker cache dropped, read again
            supervisor.every("worker-cache", 0.5, store.refresh_workers)
        supervisor.every(
            "ack-timeout",
            min(1.0, settings.ack_timeout / 4),
            leader_only(health.withdraw_unacknowledged_offers),
        )
        # every replica: each sends only the deliveries it claimed
        lanes = delivery.Lanes(ctx, supervisor)
        supervisor.every("webhooks", delivery.INTERVAL_S, lanes.tick)
        supervisor.every("webhook-log-prune", 3600.0, lambda: delivery.prune(ctx))
        supervisor.every(
            "artifact-retention", settings.retention_interval, leader_only(retention.sweep)
        )
        await start_local_runner(ctx, supervisor)
        if on_start is not None:
            await on_start(ctx, supervisor)
        await dispatch.dispatch_all(ctx)
        try:
            yield {}
        finally:
            await streams.finish_calls(ctx)
            await supervisor.close()
            try:
                await agents.flush_heartbeats(ctx)
            except Exception as exc:  # the next start gives every worker a timeout anyway
                log.warning("could not write the last heartbeats: %s", exc)
            try:
                await audit.record_head(ctx)
            except Exception as exc:  # the record then lags by the last second's entries
                log.warning("could not record the audit chain's head: %s", exc)
            await store.close()

    # Routes are tried in order, each pattern in turn: the workers' (every report and
    # heartbeat, most of the requests a fleet makes) first. No other router's path starts
    # with /api/workers, so none is shadowed. The app holds the routes as their modules built
    # them (`routes.api_router`): included, each app would build them all again.
    routers = (
        workers.router,
        uploads.router,
        checkpoints.router,
        workdirs.worker_router,
        admin.router,
        artifacts.router,
        workdirs.router,
        workdir_files.router,
        s3_storage.router,
        webhooks.router,
        pools.router,
        capacity.router,
        # before queue's /api/queue/{job_id}, which would take their paths
        simpletuner_queue.router,
        approvals.router,
        policy.router,
        housekeeping.router,
        people.router,
        fleet.router,
        secrets.router,
        sweeps.router,
        queue.router,
        configs.router,
        audit_routes.router,
        events.router,
        ops.router,
        history.router,
        sso.router,
        sso.ui_router,
        ui.router,
    )
    app = FastAPI(
        title="gpufleet orchestrator",
        version=__version__,
        lifespan=lifespan,
        routes=[route for api in routers for route in api.routes],
    )
    errors.install(app, ui.not_found_page)
    app.mount("/static", ui.static_files(), name="static")
    app.add_middleware(BodyLimit)
    app.add_middleware(RefuseNulInUrl)
    app.add_middleware(CloseAfterRefusal)  # sees BodyLimit's 413 too
    app.add_middleware(ResponseHeaders)  # outermost: the answers of the others get them too
    return app
