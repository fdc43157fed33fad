"""`gpufleet worker`: run a worker agent on this machine (see gpufleet.worker.agent)."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

import click

from gpufleet import logs
from gpufleet.cli.options import options
from gpufleet.errors import ConfigurationError
from gpufleet.settings.worker import WORKER


@click.command()
@options(WORKER)
def worker(**values: Any) -> None:
    """Run a worker agent: register with the orchestrator and run the jobs it dispatches.

    Ctrl-C (SIGINT) once: finish the running job, then exit; twice: cancel it, then exit.
    SIGTERM (how spot instances are told they are going away): ask the job for a checkpoint
    if it handles the checkpoint signal, wait --preempt-grace for it, stop the job, upload,
    report it preempted (it is requeued), exit; a second SIGTERM stops the job at once.
    """
    # Imported here: the operator commands start faster without the agent's modules.
    from gpufleet.worker import keys

    # Before anything else: a token /proc shows to the jobs is taken out (keys.py). The
    # agent's modules are imported after it, and after the checks of what was given: a
    # restart imported them twice (a third of a CPU-second at every start, #32).
    worker_token: str | None = values.pop("worker_token")
    token_file: Path | None = values.pop("worker_token_file")
    inherited = keys.inherited_token()
    if inherited is not None:
        worker_token = inherited
    elif worker_token and keys.shown_in_proc(worker_token):
        keys.restart_without(worker_token)
    elif not worker_token and token_file is not None:
        worker_token = keys.read_token_file(token_file)
    keys.make_undumpable()
    verbose = values.pop("verbose")
    logs.configure("debug" if verbose else "info", values.pop("log_format"))
    if not verbose:  # httpx logs every request at INFO
        logging.getLogger("httpx").setLevel(logging.WARNING)
    if not values["orchestrator_url"]:
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
    from gpufleet.worker.detect import detect
    from gpufleet.worker.main import run_agent
    from gpufleet.worker.settings import AgentSettings

    ssl_no_verify = values.pop("ssl_no_verify")
    settings = AgentSettings(
        **values, worker_token=worker_token, verify_tls=not ssl_no_verify, labels_process_logs=True
    )
    if settings.job_user is not None:
        settings.job_user.close_work_dir(settings.work_dir)
    if ssl_no_verify:
        click.echo(
            "WARNING: --ssl-no-verify: the orchestrator's certificate is NOT checked; anyone on "
            "the network path can read the worker token and send jobs. Development only.",
            err=True,
        )
    capabilities = detect().only(settings.gpus)
    code = asyncio.run(run_agent(settings, capabilities=capabilities, handle_signals=True))
    sys.exit(code)
