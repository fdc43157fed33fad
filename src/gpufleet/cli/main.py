"""The `gpufleet` command: one group, one module per subcommand."""

from __future__ import annotations

import sys

import click

from gpufleet import __version__
from gpufleet.cli import output
from gpufleet.errors import GpufleetError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="gpufleet")
def cli() -> None:
    """gpufleet: spread GPU training jobs over a fleet of machines."""


def _register_commands() -> None:
    from gpufleet.cli.audit import audit
    from gpufleet.cli.configs import configs
    from gpufleet.cli.jobs import jobs
    from gpufleet.cli.keys import keys
    from gpufleet.cli.people import teams, users
    from gpufleet.cli.queue import queue
    from gpufleet.cli.server import server
    from gpufleet.cli.webhooks import webhooks
    from gpufleet.cli.worker import worker
    from gpufleet.cli.workers import workers

    commands = (server, worker, workers, jobs, queue, configs, audit, keys, users, teams, webhooks)
    for command in commands:
        cli.add_command(command)


def main() -> None:
    _register_commands()
    try:
        cli.main(standalone_mode=True)
    except GpufleetError as exc:  # a user's mistake: one line, no traceback
        output.echo(f"Error: {exc.message}", err=True)
        sys.exit(1)
