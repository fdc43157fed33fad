"""`gpufleet server`: run the orchestrator."""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import TYPE_CHECKING, Any

import click

from gpufleet import address, logs
from gpufleet.cli.options import options
from gpufleet.settings.server import SERVER

if TYPE_CHECKING:
    from gpufleet.server.settings import ServerSettings

log = logging.getLogger("gpufleet.server")


@click.command()
@options(SERVER)
def server(**values: Any) -> None:
    """Run the orchestrator: the queue, the worker and admin API, dispatch and health."""
    # No collections while the server's modules load: nearly all they allocate lives as long
    # as the process, and the collector's passes over it took a fifth of a start's CPU
    # (importing the app: 2.3 s, 1.8 s without). `_tune_gc` turns it back on, tuned.
    gc.disable()
    # Imported here: the operator commands start faster without the server's modules.
    import uvicorn

    from gpufleet.server.app import create_app, end_streams
    from gpufleet.server.serving import Protocol, Server
    from gpufleet.server.settings import ServerSettings

    # Printed, the raw admin key would land in the log collector with the JSON lines.
    settings = ServerSettings.from_options(values, print_admin_key=values["log_format"] == "text")
    logs.configure(settings.log_level, settings.log_format)
    tls = None
    if settings.use_ssl:
        from gpufleet.server import tls as tls_files

        tls = tls_files.prepare(
            settings.data_dir, settings.host, settings.ssl_cert, settings.ssl_key
        )
        settings = settings.model_copy(update={"tls_cert": tls.cert})
        made = " (new self-signed certificate)" if tls.created else ""
        if settings.log_format == "json":  # a collector reads every line: keep them all JSON
            log.info(
                "serving HTTPS with %s%s; SHA-256 fingerprint: %s", tls.cert, made, tls.fingerprint
            )
        else:
            click.echo(
                f"gpufleet: serving HTTPS with {tls.cert}{made}\n"
                f"  SHA-256 fingerprint: {tls.fingerprint}\n"
                f"  Workers trust it with: gpufleet worker --ca-cert {tls.cert} …"
            )
    if warning := settings.simpletuner_agent_warning():
        log.warning(warning)
    app = create_app(settings)
    asyncio.run(_preflight(settings))
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level,
        log_config=None,  # its loggers go through logs.configure()'s handler
        proxy_headers=True,
        forwarded_allow_ips=settings.forwarded_allow_ips,
        timeout_graceful_shutdown=3,
        lifespan="on",
        http=Protocol,  # an answer's head and body in one write (server/serving.py)
        ssl_certfile=str(tls.cert) if tls else None,
        ssl_keyfile=str(tls.key) if tls else None,
    )
    server = Server(
        config,
        on_shutdown=lambda: end_streams(app),
        on_listening=lambda bound: _leave_address(settings, bound),
    )
    _tune_gc()
    server.run()
    if not server.started:
        raise SystemExit(1)


def _leave_address(settings: ServerSettings, port: int) -> None:
    """Where this server listens, for the operator commands on this machine (defect #15.11:
    they called port 8001 whatever --port said)."""
    tls = settings.tls_cert is not None
    public = settings.worker_url() if port == settings.port else None
    found = address.Address(
        url=address.local_url(settings.host, port, tls),
        public_url=public or address.default_public_url(settings.host, port, tls),
    )
    address.write(settings.data_dir, found)
    log.info("workers reach this orchestrator at %s (--public-url)", found.public_url)


def _tune_gc() -> None:
    """Short collector pauses for a long-lived server (docs/benchmarks.md, run 4).

    With a thousand open streams, CPython's default thresholds ran a full collection every
    few seconds, each one 100-200 ms on the benchmark machine, with every request waiting.
    What is loaded by now lives as long as the process, so it is left out of every
    collection (`freeze`), and the young generation is collected after 10,000 allocations
    instead of 700, so fewer short-lived objects reach the old generation at all.

    No collection before the freeze: loading the app leaves about a thousand unreachable
    objects of 260,000, and finding them cost 0.15 s of CPU, a tenth of a start (#32).
    """
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    gc.enable()


async def _preflight(settings: ServerSettings) -> None:
    """Open the store once before serving, so a mistake is one line, not a traceback."""
    from gpufleet.artifacts.backends import open_artifact_store
    from gpufleet.store import open_store
    from gpufleet.store.engine import data_dir_writable, default_database_url

    data_dir_writable(settings.data_dir)
    open_artifact_store(settings.artifact_settings())
    store = await open_store(settings.database_url or default_database_url(settings.data_dir))
    await store.close()
