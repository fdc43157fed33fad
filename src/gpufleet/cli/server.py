"""`gpufleet server`: run the orchestrator."""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import click

from gpufleet import address, logs
from gpufleet.address import check_public_url, default_public_url
from gpufleet.artifacts import DEFAULT_MAX_JOB_BYTES
from gpufleet.cli.options import DURATION, log_format_option, setting
from gpufleet.domain.webhook_targets import split_entries
from gpufleet.errors import ConfigurationError

if TYPE_CHECKING:
    from gpufleet.server.settings import ServerSettings

log = logging.getLogger("gpufleet.server")


@click.command()
@setting(
    "--host",
    default="127.0.0.1",
    var="HOST",
    help="Address to listen on; 0.0.0.0 accepts remote workers.",
)
@setting(
    "--port",
    default=8001,
    type=int,
    var="PORT",
    help="Port to listen on.",
)
@setting(
    "--public-url",
    default=None,
    var="PUBLIC_URL",
    metavar="URL",
    help="The address workers on other machines reach this orchestrator at, pasted into "
    "the worker commands of Create Worker. Default: the --host address; with 0.0.0.0, this "
    "machine's first non-loopback address (http(s)://ADDRESS:PORT).",
)
@setting(
    "--data-dir",
    default=".gpufleet",
    type=click.Path(path_type=Path),
    var="DATA_DIR",
    help="Folder for the SQLite database, admin.token and certificates.",
)
@setting(
    "--database-url",
    default=None,
    var="DATABASE_URL",
    help="Database URL; default SQLite in the data folder. "
    "PostgreSQL: postgresql+asyncpg://user@host/db",
)
@setting(
    "--heartbeat-timeout",
    default="120",
    type=DURATION,
    var="HEARTBEAT_TIMEOUT",
    simpletuner=True,
    help="A worker silent this long goes offline and its job is requeued. At least twice "
    "--heartbeat-interval; 60 s or more when released SimpleTuner agents connect (they "
    "heartbeat every 30 s whatever they are told).",
)
@setting(
    "--health-interval",
    default="60",
    type=DURATION,
    var="HEALTH_INTERVAL",
    help="How often the health loop runs.",
)
@setting(
    "--usage-interval",
    default="30",
    type=DURATION,
    var="USAGE_INTERVAL",
    help="How often the policy loop adds running jobs' GPU time to their teams' and users' "
    "usage (fair share), samples it, and preempts where the policy says so.",
)
@setting(
    "--ack-timeout",
    default="30",
    type=DURATION,
    var="ACK_TIMEOUT",
    help="An offer not acknowledged this fast is withdrawn and offered elsewhere.",
)
@setting(
    "--ephemeral-cleanup-after",
    default="1h",
    type=DURATION,
    var="EPHEMERAL_CLEANUP_AFTER",
    help="Ephemeral workers offline this long are deleted.",
)
@setting(
    "--heartbeat-interval",
    default="30",
    type=DURATION,
    var="HEARTBEAT_INTERVAL",
    help="Heartbeat interval told to workers when they register.",
)
@setting(
    "--local-gpus",
    default="none",
    var="LOCAL_GPUS",
    help="Run jobs with target local/auto on this machine: auto (every GPU found, or the "
    "CPU), none, or GPU indices like 0,1.",
)
@setting(
    "--ssl",
    "use_ssl",
    is_flag=True,
    var="SSL",
    help="Serve HTTPS. Without --ssl-cert/--ssl-key, a self-signed certificate is made in "
    "the data folder on first start and reused; its SHA-256 fingerprint is printed.",
)
@setting(
    "--ssl-cert",
    type=click.Path(path_type=Path),
    var="SSL_CERT",
    help="PEM certificate (chain) to serve with --ssl.",
)
@setting(
    "--ssl-key",
    type=click.Path(path_type=Path),
    var="SSL_KEY",
    help="PEM private key of --ssl-cert.",
)
@setting(
    "--audit-key-file",
    type=click.Path(path_type=Path),
    var="AUDIT_KEY_FILE",
    help="Key of the audit log's HMAC chain; default <data-dir>/audit.key, made on first "
    "start. Replicas must share it.",
)
@setting(
    "--auth-failure-limit",
    default=20,
    type=click.IntRange(min=0),
    var="AUTH_FAILURE_LIMIT",
    help="Failed authentications one client address may make per minute before it is "
    "refused with 429 for the rest of that minute (0: no limit).",
)
@setting(
    "--poison-after-workers",
    default=3,
    type=click.IntRange(min=1),
    var="POISON_AFTER_WORKERS",
    metavar="N",
    help="A job that could not start on N different workers fails, whatever its retries "
    "(the poison-job rule).",
)
@setting(
    "--artifacts",
    default=None,
    var="ARTIFACTS",
    metavar="URL",
    help="Where jobs' artifacts and checkpoints are kept: a folder (or file://…), enough for "
    "one orchestrator or replicas sharing it, or s3://bucket/prefix (endpoint and keys from "
    "the AWS_* variables; AWS_ENDPOINT_URL for MinIO, R2, …), needed for replicas on separate "
    "machines. Default: <data-dir>/artifacts.",
)
@setting(
    "--artifact-max-job-bytes",
    default=DEFAULT_MAX_JOB_BYTES,
    type=click.IntRange(min=0),
    var="ARTIFACT_MAX_JOB_BYTES",
    metavar="BYTES",
    help="The most one job's artifacts may take in the store, all its attempts together "
    "(default 100 GiB); an upload past it is refused with 413.",
)
@setting(
    "--artifact-retention-days",
    default=30.0,
    type=click.FloatRange(min=0, max=36500),
    var="ARTIFACT_RETENTION_DAYS",
    metavar="DAYS",
    help="Artifacts of a job are deleted this many days after it ended, unless an admin "
    "pinned them (0: keep forever).",
)
@setting(
    "--keep-checkpoints",
    default=3,
    type=click.IntRange(min=0, max=10000),
    var="KEEP_CHECKPOINTS",
    metavar="N",
    help="Each job keeps its newest N checkpoints; older ones are deleted by the retention "
    "sweep, never one a running attempt resumed from (0: keep every one).",
)
@setting(
    "--webhook-timeout",
    default="10",
    type=DURATION,
    var="WEBHOOK_TIMEOUT",
    help="One webhook send's deadline, from connecting to the answer's last byte; a send "
    "past it counts as a failed try and is retried.",
)
@setting(
    "--webhook-allow-hosts",
    default="",
    var="WEBHOOK_ALLOW_HOSTS",
    metavar="HOSTS",
    help="Internal hosts, addresses or networks (comma-separated, e.g. "
    "hooks.internal,10.1.0.0/16) that webhooks may reach; other loopback, link-local, "
    "private, unique-local and multicast addresses are refused.",
)
@setting(
    "--forwarded-allow-ips",
    default="127.0.0.1",
    var="FORWARDED_ALLOW_IPS",
    metavar="ADDRESSES",
    help="Proxies (comma-separated addresses or networks, * for any) whose X-Forwarded-For "
    "names the client: the address audited and rate-limited. Default: a proxy on this "
    "host (docs/deploy.md).",
)
@setting(
    "--log-level",
    default="info",
    var="LOG_LEVEL",
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@log_format_option(
    "ts, level, logger, message, replica and the worker and job ids. With json the admin key "
    "minted on first start is not printed: read it from <data-dir>/admin.token"
)
def server(
    host: str,
    port: int,
    public_url: str | None,
    data_dir: Path,
    database_url: str | None,
    heartbeat_timeout: float,
    health_interval: float,
    usage_interval: float,
    ack_timeout: float,
    ephemeral_cleanup_after: float,
    heartbeat_interval: float,
    local_gpus: str,
    use_ssl: bool,
    ssl_cert: Path | None,
    ssl_key: Path | None,
    audit_key_file: Path | None,
    auth_failure_limit: int,
    poison_after_workers: int,
    artifacts: str | None,
    artifact_max_job_bytes: int,
    artifact_retention_days: float,
    keep_checkpoints: int,
    webhook_timeout: float,
    webhook_allow_hosts: str,
    forwarded_allow_ips: str,
    log_level: str,
    log_format: logs.Format,
) -> None:
    """Run the orchestrator: the queue, the worker and admin API, dispatch and health."""
    # No collections while the server's modules load: nearly all they allocate lives as long
    # as the process, and the collector's passes over it took a fifth of a start's CPU
    # (importing the app: 2.3 s, 1.8 s without). `_tune_gc` turns it back on, tuned.
    gc.disable()
    # Imported here: the operator commands start faster without the server's modules.
    import uvicorn
    from pydantic import ValidationError

    from gpufleet.server.app import create_app, end_streams
    from gpufleet.server.serving import Server
    from gpufleet.server.settings import ServerSettings

    logs.configure(log_level, log_format)
    tls = None
    if use_ssl:
        from gpufleet.server import tls as tls_files

        tls = tls_files.prepare(data_dir, host, ssl_cert, ssl_key)
        made = " (new self-signed certificate)" if tls.created else ""
        if log_format == "json":  # a collector reads every line: keep them all JSON
            log.info(
                "serving HTTPS with %s%s; SHA-256 fingerprint: %s", tls.cert, made, tls.fingerprint
            )
        else:
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
            usage_interval=usage_interval,
            ack_timeout=ack_timeout,
            ephemeral_cleanup_after=ephemeral_cleanup_after,
            heartbeat_interval=heartbeat_interval,
            local_gpus=local_gpus,
            tls_cert=tls.cert if tls else None,
            audit_key_file=audit_key_file,
            auth_failure_limit=auth_failure_limit,
            poison_after_workers=poison_after_workers,
            artifacts=artifacts,
            artifact_max_job_bytes=artifact_max_job_bytes,
            artifact_retention_days=artifact_retention_days,
            keep_checkpoints=keep_checkpoints,
            webhook_timeout=webhook_timeout,
            webhook_allow_hosts=split_entries(webhook_allow_hosts),
            public_url=check_public_url(public_url)
            if public_url
            else default_public_url(host, port, tls=tls is not None),
            # Printed, the raw key would land in the log collector with the JSON lines.
            print_admin_key=log_format == "text",
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConfigurationError(
            f"--{str(first['loc'][0]).replace('_', '-')}: {first['msg']}"
        ) from exc
    if warning := settings.simpletuner_agent_warning():
        log.warning(warning)
    app = create_app(settings)
    asyncio.run(_preflight(settings))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        log_config=None,  # its loggers go through logs.configure()'s handler
        proxy_headers=True,
        forwarded_allow_ips=forwarded_allow_ips,
        timeout_graceful_shutdown=3,
        lifespan="on",
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
    """
    gc.collect()
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
