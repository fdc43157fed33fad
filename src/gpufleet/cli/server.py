"""`gpufleet server`: run the orchestrator."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpufleet.cli.options import DURATION, env
from gpufleet.errors import ConfigurationError

if TYPE_CHECKING:
    from gpufleet.server.settings import ServerSettings


@click.command()
@click.option(
    "--host",
    default="127.0.0.1",
    envvar=env("HOST"),
    show_envvar=True,
    help="Address to listen on; 0.0.0.0 accepts remote workers.",
)
@click.option(
    "--port",
    default=8001,
    type=int,
    envvar=env("PORT"),
    show_envvar=True,
    help="Port to listen on.",
)
@click.option(
    "--data-dir",
    default=".gpufleet",
    type=click.Path(path_type=Path),
    envvar=env("DATA_DIR"),
    show_envvar=True,
    help="Folder for the SQLite database, admin.token and certificates.",
)
@click.option(
    "--database-url",
    default=None,
    envvar=env("DATABASE_URL"),
    show_envvar=True,
    help="Database URL; default SQLite in the data folder. "
    "PostgreSQL: postgresql+asyncpg://user@host/db",
)
@click.option(
    "--heartbeat-timeout",
    default="120",
    type=DURATION,
    envvar=env("HEARTBEAT_TIMEOUT", "HEARTBEAT_TIMEOUT"),
    show_envvar=True,
    help="A worker silent this long goes offline and its job is requeued.",
)
@click.option(
    "--health-interval",
    default="60",
    type=DURATION,
    envvar=env("HEALTH_INTERVAL"),
    show_envvar=True,
    help="How often the health loop runs.",
)
@click.option(
    "--ack-timeout",
    default="30",
    type=DURATION,
    envvar=env("ACK_TIMEOUT"),
    show_envvar=True,
    help="An offer not acknowledged this fast is withdrawn and offered elsewhere.",
)
@click.option(
    "--ephemeral-cleanup-after",
    default="1h",
    type=DURATION,
    envvar=env("EPHEMERAL_CLEANUP_AFTER"),
    show_envvar=True,
    help="Ephemeral workers offline this long are deleted.",
)
@click.option(
    "--heartbeat-interval",
    default="30",
    type=DURATION,
    envvar=env("HEARTBEAT_INTERVAL"),
    show_envvar=True,
    help="Heartbeat interval told to workers when they register.",
)
@click.option(
    "--local-gpus",
    default="none",
    envvar=env("LOCAL_GPUS"),
    show_envvar=True,
    help="Run jobs with target local/auto on this machine: auto (every GPU found, or the "
    "CPU), none, or GPU indices like 0,1.",
)
@click.option(
    "--ssl",
    "use_ssl",
    is_flag=True,
    envvar=env("SSL"),
    show_envvar=True,
    help="Serve HTTPS. Without --ssl-cert/--ssl-key, a self-signed certificate is made in "
    "the data folder on first start and reused; its SHA-256 fingerprint is printed.",
)
@click.option(
    "--ssl-cert",
    type=click.Path(path_type=Path),
    envvar=env("SSL_CERT"),
    show_envvar=True,
    help="PEM certificate (chain) to serve with --ssl.",
)
@click.option(
    "--ssl-key",
    type=click.Path(path_type=Path),
    envvar=env("SSL_KEY"),
    show_envvar=True,
    help="PEM private key of --ssl-cert.",
)
@click.option(
    "--audit-key-file",
    type=click.Path(path_type=Path),
    envvar=env("AUDIT_KEY_FILE"),
    show_envvar=True,
    help="Key of the audit log's HMAC chain; default <data-dir>/audit.key, made on first "
    "start. Replicas must share it.",
)
@click.option(
    "--auth-failure-limit",
    default=20,
    type=click.IntRange(min=0),
    envvar=env("AUTH_FAILURE_LIMIT"),
    show_envvar=True,
    help="Failed authentications one client address may make per minute before it is "
    "refused with 429 for the rest of that minute (0: no limit).",
)
@click.option(
    "--log-level",
    default="info",
    envvar=env("LOG_LEVEL"),
    show_envvar=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def server(
    host: str,
    port: int,
    data_dir: Path,
    database_url: str | None,
    heartbeat_timeout: float,
    health_interval: float,
    ack_timeout: float,
    ephemeral_cleanup_after: float,
    heartbeat_interval: float,
    local_gpus: str,
    use_ssl: bool,
    ssl_cert: Path | None,
    ssl_key: Path | None,
    audit_key_file: Path | None,
    auth_failure_limit: int,
    log_level: str,
) -> None:
    """Run the orchestrator: the queue, the worker and admin API, dispatch and health."""
    # Imported here: the operator commands start faster without the server's modules.
    import uvicorn
    from pydantic import ValidationError

    from gpufleet.server.app import create_app
    from gpufleet.server.settings import ServerSettings

    tls = None
    if use_ssl:
        from gpufleet.server import tls as tls_files

        tls = tls_files.prepare(data_dir, host, ssl_cert, ssl_key)
        made = " (new self-signed certificate)" if tls.created else ""
        click.echo(
            f"gpufleet: serving HTTPS with {tls.cert}{made}\n"
            f"  SHA-256 fingerprint: {tls.fingerprint}\n"
            f"  Workers trust it with: gpufleet worker --ca-cert {tls.cert} …"
        )
    elif ssl_cert or ssl_key:
        raise ConfigurationError("--ssl-cert and --ssl-key need --ssl")
    try:
        settings = ServerSettings(
            host=host,
            port=port,
            data_dir=data_dir,
            database_url=database_url,
            heartbeat_timeout=heartbeat_timeout,
            health_interval=health_interval,
            ack_timeout=ack_timeout,
            ephemeral_cleanup_after=ephemeral_cleanup_after,
            heartbeat_interval=heartbeat_interval,
            local_gpus=local_gpus,
            tls_cert=tls.cert if tls else None,
            audit_key_file=audit_key_file,
            auth_failure_limit=auth_failure_limit,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigurationError(
            f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}"
        ) from exc
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    app = create_app(settings)
    asyncio.run(_preflight(settings))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        timeout_graceful_shutdown=3,
        lifespan="on",
        ssl_certfile=str(tls.cert) if tls else None,
        ssl_keyfile=str(tls.key) if tls else None,
    )
    server = uvicorn.Server(config)
    server.run()
    if not server.started:
        raise SystemExit(1)


async def _preflight(settings: ServerSettings) -> None:
    """Open the store once before serving, so a mistake is one line, not a traceback."""
    from gpufleet.store import open_store
    from gpufleet.store.engine import data_dir_writable, default_database_url

    data_dir_writable(settings.data_dir)
    store = await open_store(settings.database_url or default_database_url(settings.data_dir))
    await store.close()
