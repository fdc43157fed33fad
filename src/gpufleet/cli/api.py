"""The commands' connection options (`--url`, `--api-key`, `--data-dir`, TLS), each with its
environment variable, and the client they make: the Python client's (gpufleet/client), the
one HTTP client of the CLI."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from gpufleet import address
from gpufleet.cli.options import CA_CERT, SSL_NO_VERIFY, setting
from gpufleet.client.client import Client
from gpufleet.client.connection import API_KEY_VAR, DATA_DIR_VAR, URL_VAR
from gpufleet.client.http import DEFAULT_DATA_DIR, DEFAULT_URL, ApiClient, part

__all__ = ["ApiClient", "Client", "part"]

_API_OPTIONS = (
    setting(
        "--url",
        default=None,
        var=URL_VAR,
        metavar="URL",
        help="The orchestrator's URL; default: the address the orchestrator left in "
        f"<data-dir>/{address.ADDRESS_FILE}, else {DEFAULT_URL}.",
    ),
    setting(
        "--api-key",
        var=API_KEY_VAR,
        metavar="KEY",
        help="API key; default: the session of `gpufleet login`, else the admin key in "
        "<data-dir>/admin.token.",
    ),
    setting(
        "--data-dir",
        default=DEFAULT_DATA_DIR,
        type=click.Path(file_okay=False, path_type=Path),
        var=DATA_DIR_VAR,
        help="The orchestrator's data folder, read for admin.token when no key is given.",
    ),
    CA_CERT,
    SSL_NO_VERIFY,
)


def api_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Adds the connection options and hands the command an `api: Client`, found as the
    options say (the client's own rules, client/connection.py). It sends nothing twice:
    a command run again is the operator's to decide."""

    @functools.wraps(command)
    def run(
        *args: Any,
        url: str | None,
        api_key: str | None,
        data_dir: Path,
        ca_cert: Path | None,
        ssl_no_verify: bool,
        **kwargs: Any,
    ) -> Any:
        with Client(
            url,
            api_key,
            data_dir=data_dir,
            ca_cert=ca_cert,
            ssl_no_verify=ssl_no_verify,
            retries=0,
        ) as api:
            return command(*args, api=api, **kwargs)

    for option in reversed(_API_OPTIONS):
        run = option(run)
    return run


json_option = click.option(
    "--json", "as_json", is_flag=True, help="Print the API's JSON answer instead (for scripts)."
)


def connection_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The connection options less the key (`gpufleet login`, `logout`): the command gets
    `url`, `data_dir`, `ca_cert` and `ssl_no_verify`."""
    for option in reversed([o for o in _API_OPTIONS if o is not _API_OPTIONS[1]]):
        command = option(command)
    return command
