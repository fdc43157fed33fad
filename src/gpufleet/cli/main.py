"""The `gpufleet` command: one group, one module per subcommand."""

from __future__ import annotations

import importlib
import sys

import click

from gpufleet import __version__
from gpufleet.cli import output
from gpufleet.errors import GpufleetError

# Each command's module, imported only when that command runs (or help lists it): a
# `gpufleet server` or `gpufleet worker` no longer imports the HTTP client and every other
# command's code before it starts, nor `gpufleet jobs` the server's (0.2 s at each start).
COMMANDS = {
    "server": "gpufleet.cli.server",
    "worker": "gpufleet.cli.worker",
    "workers": "gpufleet.cli.workers",
    "jobs": "gpufleet.cli.jobs",
    "queue": "gpufleet.cli.queue",
    "run": "gpufleet.cli.run",
    "configs": "gpufleet.cli.configs",
    "audit": "gpufleet.cli.audit",
    "keys": "gpufleet.cli.keys",
    "users": "gpufleet.cli.people",
    "teams": "gpufleet.cli.people",
    "webhooks": "gpufleet.cli.webhooks",
    "pools": "gpufleet.cli.pools",
    "secrets": "gpufleet.cli.secrets",
    "sweeps": "gpufleet.cli.sweeps",
    "login": "gpufleet.cli.login",
    "logout": "gpufleet.cli.login",
}


class LazyGroup(click.Group):
    """A group whose commands are imported by name when first asked for (click's
    "Lazily Loading Subcommands")."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            command = getattr(importlib.import_module(COMMANDS[cmd_name]), cmd_name)
            assert isinstance(command, click.Command), cmd_name
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(__version__, prog_name="gpufleet")
def cli() -> None:
    """gpufleet: spread GPU training jobs over a fleet of machines."""


def main() -> None:
    try:
        cli.main(standalone_mode=True)
    except GpufleetError as exc:  # a user's mistake: one line, no traceback
        output.echo(f"Error: {exc.message}", err=True)
        sys.exit(1)
