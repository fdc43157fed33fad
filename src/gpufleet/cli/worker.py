"""`gpufleet worker`: run a worker agent on this machine (see gpufleet.worker.agent)."""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from pathlib import Path

import click

from gpufleet import logs
from gpufleet.cli.options import (
    CA_CERT,
    DURATION,
    SSL_NO_VERIFY,
    log_format_option,
    parse_labels,
    setting,
)
from gpufleet.errors import ConfigurationError


def _parse_gpus(
    ctx: click.Context, param: click.Parameter, value: str | None
) -> tuple[int, ...] | None:
    if value is None or not value.strip():
        return None
    try:
        return tuple(int(part) for part in value.split(",") if part.strip())
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a comma-separated list of GPU indices like 0,1",
            ctx=ctx,
            param=param,
        ) from None


def _parse_rate(ctx: click.Context, param: click.Parameter, value: str | None) -> int:
    from gpufleet.worker.settings import parse_rate

    try:
        return parse_rate(value or "")
    except ConfigurationError as exc:
        raise click.BadParameter(exc.message, ctx=ctx, param=param) from None


@click.command()
@setting(
    "--orchestrator-url",
    metavar="URL[,URL…]",
    var="ORCHESTRATOR_URL",
    simpletuner=True,
    help=(
        "Orchestrator panel URL, e.g. https://host:8001; several, comma-separated, for "
        "replicas: the worker fails over to the next when one is unreachable."
    ),
)
@setting(
    "--worker-token",
    metavar="TOKEN",
    var="WORKER_TOKEN",
    simpletuner=True,
    help=(
        "The worker's authentication token (wt_…). The worker restarts itself at once "
        "without it in its arguments and environment, where its jobs could read it."
    ),
)
@setting(
    "--worker-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    var="WORKER_TOKEN_FILE",
    help="Read the worker's token from FILE (keep it 0600) instead of --worker-token.",
)
@setting(
    "--run-as",
    metavar="USER",
    var="WORKER_RUN_AS",
    simpletuner=True,
    help=(
        "Run jobs as this OS user (the worker must be root): the job's folder is given to "
        "it, the worker's own files and process are not readable by it."
    ),
)
@setting(
    "--name",
    metavar="NAME",
    var="WORKER_NAME",
    simpletuner=True,
    default=socket.gethostname,
    show_default="hostname",
    help="Worker name.",
)
@setting(
    "--persistent",
    is_flag=True,
    var="WORKER_PERSISTENT",
    simpletuner=True,
    help="Stay online between jobs (default: ephemeral, exit after one job).",
)
@setting(
    "-v",
    "--verbose",
    is_flag=True,
    var="VERBOSE",
    help="Enable debug logging.",
)
@setting(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".gpufleet/worker"),
    var="WORK_DIR",
    help="Folder for job folders (jobs/<job_id>/<attempt_id>/).",
)
@CA_CERT
@SSL_NO_VERIFY
@setting(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    callback=parse_labels,
    var="WORKER_LABELS",
    help="A label to report (repeatable; the env var takes space-separated pairs).",
)
@setting(
    "--gpus",
    metavar="0,1",
    callback=_parse_gpus,
    var="GPUS",
    help="Offer only these GPU indices (default: all).",
)
@setting(
    "--heartbeat-interval",
    type=DURATION,
    default=30.0,
    var="HEARTBEAT_INTERVAL",
    metavar="SECONDS",
    help="Seconds between heartbeats (shorter if the orchestrator asks).",
)
@log_format_option("ts, level, logger, message and the worker and job ids")
@setting(
    "--cancel-grace",
    type=DURATION,
    default=30.0,
    var="CANCEL_GRACE",
    metavar="SECONDS",
    help="Seconds between SIGTERM and SIGKILL when a job is stopped.",
)
@setting(
    "--upload-bandwidth",
    default="0",
    callback=_parse_rate,
    var="UPLOAD_BANDWIDTH",
    metavar="RATE",
    help="Cap on artifact and checkpoint uploads, bytes per second: 800K, 50M, 1G; 0: none.",
)
@setting(
    "--preempt-grace",
    type=DURATION,
    default=30.0,
    var="PREEMPT_GRACE",
    metavar="SECONDS",
    help=(
        "On SIGTERM (a spot instance's notice), how long a job that handles the checkpoint "
        "signal gets to write and upload its checkpoint before it is stopped."
    ),
)
def worker(
    orchestrator_url: str | None,
    worker_token: str | None,
    worker_token_file: Path | None,
    run_as: str | None,
    name: str,
    persistent: bool,
    verbose: bool,
    work_dir: Path,
    ca_cert: Path | None,
    ssl_no_verify: bool,
    labels: dict[str, str],
    gpus: tuple[int, ...] | None,
    heartbeat_interval: float,
    log_format: logs.Format,
    cancel_grace: float,
    upload_bandwidth: int,
    preempt_grace: float,
) -> None:
    """Run a worker agent: register with the orchestrator and run the jobs it dispatches.

    Ctrl-C (SIGINT) once: finish the running job, then exit; twice: cancel it, then exit.
    SIGTERM (how spot instances are told they are going away): ask the job for a checkpoint
    if it handles the checkpoint signal, wait --preempt-grace for it, stop the job, upload,
    report it preempted (it is requeued), exit; a second SIGTERM stops the job at once.
    """
    # Imported here: the operator commands start faster without the agent's modules.
    from gpufleet.worker import keys
    from gpufleet.worker.detect import detect
    from gpufleet.worker.main import run_agent
    from gpufleet.worker.settings import AgentSettings

    # Before anything else: a token /proc shows to the jobs is taken out (keys.py).
    inherited = keys.inherited_token()
    if inherited is not None:
        worker_token = inherited
    elif worker_token and keys.shown_in_proc(worker_token):
        keys.restart_without(worker_token)
    elif not worker_token and worker_token_file is not None:
        worker_token = keys.read_token_file(worker_token_file)
    keys.make_undumpable()
    logs.configure("debug" if verbose else "info", log_format)
    if not verbose:  # httpx logs every request at INFO
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if not orchestrator_url:
        raise ConfigurationError(
            "No orchestrator URL: pass --orchestrator-url or set GPUFLEET_ORCHESTRATOR_URL"
        )
    if not worker_token:
        raise ConfigurationError(
            "No worker token: pass --worker-token or set GPUFLEET_WORKER_TOKEN "
            "(or --worker-token-file) "
            "(make one on the orchestrator with `gpufleet workers create NAME`, or Create Worker "
            "on the Workers page)"
        )
    if worker_token != worker_token.strip():
        logging.getLogger(__name__).warning("the worker token had surrounding whitespace: ignored")
    settings = AgentSettings(
        labels_process_logs=True,
        orchestrator_url=orchestrator_url,
        worker_token=worker_token,
        name=name,
        persistent=persistent,
        work_dir=work_dir,
        ca_cert=ca_cert,
        verify_tls=not ssl_no_verify,
        labels=labels,
        gpus=gpus,
        heartbeat_interval=heartbeat_interval,
        cancel_grace=cancel_grace,
        upload_bandwidth=upload_bandwidth,
        preempt_grace=preempt_grace,
        run_as=run_as,
    )
    if settings.job_user is not None:
        settings.job_user.close_work_dir(settings.work_dir)
    if ssl_no_verify:
        click.echo(
            "WARNING: --ssl-no-verify: the orchestrator's certificate is NOT checked; anyone on "
            "the network path can read the worker token and send jobs. Development only.",
            err=True,
        )
    capabilities = detect().only(gpus)
    code = asyncio.run(run_agent(settings, capabilities=capabilities, handle_signals=True))
    sys.exit(code)
