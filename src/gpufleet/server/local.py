"""The embedded local runner: the orchestrator's own GPUs as a worker for `target: local`.

It is the same agent as `gpufleet worker`, run in the orchestrator's event loop against its
own loopback address, with a token minted at every start (the raw token is never stored).
Jobs reach it through the ordinary protocol, so `local` has the queue semantics, fencing and
logs of any other worker.
"""

from __future__ import annotations

import asyncio
import logging

from gpufleet.domain.audit_events import SYSTEM_ACTOR
from gpufleet.domain.records import LOCAL_WORKER_ID
from gpufleet.domain.states import WorkerType
from gpufleet.errors import ConfigurationError
from gpufleet.server.context import Context
from gpufleet.server.services import fleet
from gpufleet.server.settings import ServerSettings
from gpufleet.supervisor import Supervisor

log = logging.getLogger("gpufleet.server.local")
LOCAL_NAME = "local"


def parse_local_gpus(value: str) -> tuple[bool, tuple[int, ...] | None]:
    """(enabled, GPU indices): `none` → off, `auto` → every GPU found, `0,1` → those."""
    text = value.strip().lower()
    if text == "none":
        return False, None
    if text == "auto":
        return True, None
    try:
        indices = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        indices = ()
    if not indices or any(i < 0 for i in indices):
        raise ConfigurationError(
            f"--local-gpus {value!r} is not valid; use auto, none, or GPU indices like 0,1"
        )
    return True, indices


def _loopback(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "", "::", "localhost") else host


def own_url(settings: ServerSettings) -> str:
    """The orchestrator as a process on its own machine reaches it: its loopback address."""
    scheme = "https" if settings.tls_cert else "http"
    return f"{scheme}://{_loopback(settings.host)}:{settings.port}"


async def _wait_until_listening(host: str, port: int) -> None:
    """The agent starts once uvicorn accepts connections (after the lifespan started)."""
    try:
        async with asyncio.timeout(30):
            while True:
                try:
                    _reader, writer = await asyncio.open_connection(host, port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                await writer.wait_closed()
                return
    except TimeoutError:
        raise ConfigurationError(
            f"the local runner could not reach the orchestrator on {host}:{port}"
        ) from None


async def start_local_runner(ctx: Context, supervisor: Supervisor) -> None:
    enabled, gpus = parse_local_gpus(ctx.settings.local_gpus)
    if not enabled:
        return
    if ctx.settings.port == 0:
        raise ConfigurationError("--local-gpus needs a fixed --port (not 0)")
    existing = await fleet.find_worker(ctx, LOCAL_WORKER_ID)
    if existing is None:
        _worker, token = await fleet.create_worker(
            ctx,
            LOCAL_NAME,
            WorkerType.PERSISTENT,
            {},
            SYSTEM_ACTOR,
            None,
            worker_id=LOCAL_WORKER_ID,
            is_local=True,
        )
    else:
        token = await fleet.rotate_token(ctx, LOCAL_WORKER_ID, SYSTEM_ACTOR, None)

    from gpufleet.worker.main import run_agent
    from gpufleet.worker.settings import AgentSettings

    host = _loopback(ctx.settings.host)
    settings = AgentSettings(
        orchestrator_url=own_url(ctx.settings),
        ca_cert=ctx.settings.tls_cert,
        worker_token=token,
        name=LOCAL_NAME,
        persistent=True,
        work_dir=ctx.settings.data_dir / "local-worker",
        gpus=gpus,
        heartbeat_interval=ctx.settings.heartbeat_interval,
    )

    async def run() -> None:
        await _wait_until_listening(host, ctx.settings.port)
        code = await run_agent(settings)
        raise RuntimeError(f"the local runner stopped (exit {code})")

    supervisor.spawn("local-runner", run(), forever=True)
