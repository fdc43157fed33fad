"""`gpufleet run`: run a command on the fleet with the code of a folder (docs/jobs.md).

The folder is sent by the client (client/workdirs.py: packed, its snapshot uploaded unless
the orchestrator says this user may name it already), and a job submitted whose config names
it, with its `requirements` (or `env_from`) and `setup` for the worker; with `--wait`, its log
is followed, Ctrl-C asks whether to detach or cancel, `--download` brings its files home
(cli/artifacts.py), and the command exits with the job's exit code.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from gpufleet.cli import output as out
from gpufleet.cli.api import Client, api_options
from gpufleet.cli.artifacts import Bar, summary
from gpufleet.cli.follow import LogView, follow_to_end
from gpufleet.cli.options import parse_size_option, setting
from gpufleet.cli.submitting import say_submitted, submit_options, with_shape
from gpufleet.cli.sweeps import say_made, sweep_options
from gpufleet.client.client import run_config
from gpufleet.client.workdirs import Packed
from gpufleet.domain.jobspec import ENV_NAME
from gpufleet.domain.states import JobStatus
from gpufleet.errors import InvalidInput, NotFound

DEFAULT_MAX_WORKDIR = "1G"  # the client's DEFAULT_MAX_WORKDIR, as the flag writes it
_HAD = ": the orchestrator had this snapshot, and now knows you have its files too."


def _env(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    env = {}
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or not ENV_NAME.fullmatch(name):
            raise click.BadParameter(
                f"{value!r} is not NAME=VALUE with a NAME of letters, digits and '_'",
                ctx=ctx,
                param=param,
            )
        env[name] = text
    return env


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@click.option(
    "--workdir",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=Path("."),
    help="The folder whose files the job gets (less what .gitignore and .gpufleetignore "
    "leave out); the command starts in their copy.",
)
@setting(
    "--max-workdir-size",
    var="MAX_WORKDIR_SIZE",
    default=DEFAULT_MAX_WORKDIR,
    callback=parse_size_option,
    metavar="SIZE",
    help="Refuse a workdir whose files hold more than this: 800K, 50M, 1G.",
)
@click.option(
    "--env",
    "env",
    multiple=True,
    metavar="NAME=VALUE",
    callback=_env,
    help="Set this variable in the job's environment (repeatable).",
)
@click.option("--name", metavar="NAME", help="A name for the job, kept in its config.")
@click.option(
    "--requirements",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="A requirements file: the worker builds a virtualenv of them with uv (cached, "
    "shared by jobs with the same requirements) and runs the command with its python.",
)
@click.option(
    "--env-from",
    metavar="PATH",
    help="Build the job's virtualenv from this file of the workdir instead: a "
    "pyproject.toml, a uv.lock or a requirements .txt file.",
)
@click.option(
    "--setup",
    metavar="CMD",
    help="A shell command run in the job's folder, with its virtualenv, before COMMAND "
    "(its output in the job's log; the job fails when it fails).",
)
@click.option(
    "--wait",
    is_flag=True,
    help="Follow the job's log until it ends, then exit with its exit code. Ctrl-C asks "
    "whether to detach or cancel the job (detaches without a terminal).",
)
@click.option(
    "--download",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="With --wait: when the job ends, download its stored files (not its "
    "checkpoints) into DIR.",
)
@submit_options
@sweep_options
@api_options
def run(
    api: Client,
    command: tuple[str, ...],
    workdir: Path,
    max_workdir_size: int,
    env: dict[str, str],
    name: str | None,
    requirements: Path | None,
    env_from: str | None,
    setup: str | None,
    wait: bool,
    download: Path | None,
    submit: dict[str, Any],
    shape: dict[str, Any],
    sweep: dict[str, Any],
) -> None:
    """Run COMMAND on a worker, in a copy of the workdir: `gpufleet run -- python train.py`;
    with --sweep, one job a point: `gpufleet run --sweep lr=1e-4,3e-4 -- python train.py
    --lr {lr}`."""
    if sweep and wait:
        raise click.UsageError("--wait follows one job; watch a sweep with `gpufleet sweeps show`")
    if download is not None and not wait:
        raise click.UsageError(
            "--download DIR brings the job's files home when it ends: add --wait"
        )
    if requirements is not None and env_from is not None:
        raise click.UsageError("--requirements and --env-from both name the environment: keep one")
    needs = _read(requirements) if requirements is not None else None
    sent = api.send_workdir(
        workdir, max_bytes=max_workdir_size, env_from=env_from, packed=_say_packed
    )
    if not sent.sent:
        out.echo("0 bytes sent: the orchestrator has this snapshot already.")
    else:
        out.echo(f"{sent.packed.size} bytes sent{_HAD if sent.had else '.'}")
    config = run_config(command, sent.packed, needs, env, name, env_from, setup)
    job = api.submit_body({**submit, **sweep, "config": with_shape(config, shape)})
    if sweep:
        say_made(job)
        return
    say_submitted(api, job, follow_hint=not wait)
    if not wait:
        return
    try:
        labelled = LogView(labelled=int(job.get("nodes", 1)) > 1)  # each line says its node
        status = follow_to_end(api, job["id"], view=labelled)
    except KeyboardInterrupt:
        _interrupted(api, job["id"])
    ended = api.job(job["id"])
    if ended.error:  # why it failed (a build, a setup, a start), not just that it did
        out.echo(f"Error: {str(ended.error).rstrip()}", err=True)
    if download is not None:
        _bring_home(api, job["id"], download)
    code = ended.exit_code
    if isinstance(code, int) and 0 <= code <= 255:
        sys.exit(code)
    sys.exit(0 if status == JobStatus.COMPLETED else 1)


def _read(requirements: Path) -> str:
    try:
        return requirements.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"--requirements {requirements}: cannot be read as text: {exc}") from exc


def _say_packed(snapshot: Packed) -> None:
    size = out.size(snapshot.size)
    digest = snapshot.digest[:19]
    out.echo(f"Workdir {snapshot.root}: {snapshot.files} files, {size} ({digest}…).")


def _interrupted(api: Client, job_id: str) -> NoReturn:
    """Ctrl-C while following: on a terminal, ask whether to detach or cancel the job."""
    choice = "detach"
    if sys.stdin.isatty():
        choice = click.prompt(
            "\nDetach (the job goes on) or cancel the job?",
            type=click.Choice(["detach", "cancel"]),
            default="detach",
            err=True,
        )
    if choice == "cancel":
        cancelled = api.cancel(job_id)
        out.echo(f"Job {job_id} is {cancelled.status}.", err=True)
    else:
        out.echo(
            f"Stopped following; job {job_id} goes on (gpufleet jobs watch {job_id}).", err=True
        )
    sys.exit(130)


def _bring_home(api: Client, job_id: str, directory: Path) -> None:
    try:
        saved = api.download(job_id, directory, meter=Bar())
    except NotFound:
        out.echo(f"Job {job_id} stored no files to download.", err=True)
        return
    out.echo(summary(job_id, saved, directory), err=True)
