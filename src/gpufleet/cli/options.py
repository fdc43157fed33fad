"""Option types shared by the commands."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import click

from gpufleet.logs import FORMATS

F = TypeVar("F", bound=Callable[..., Any])

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_FACTOR = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
MAX_SECONDS = timedelta.max.total_seconds()  # past it, `--since` could not subtract it


class Duration(click.ParamType):  # type: ignore[type-arg]
    """Seconds, or a number with ms, s, m or h: `120`, `2m`, `1h`, `500ms`."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        seconds = _seconds(value)
        if seconds is None or not seconds >= 0:  # NaN compares false: refused too
            self.fail(f"{value!r} is not a duration; write e.g. 120, 120s, 2m or 1h", param, ctx)
        if seconds > MAX_SECONDS:
            self.fail(
                f"{value!r} is longer than any duration can be; write a shorter one", param, ctx
            )
        return seconds


# A number given as a number (a default, a setting built in code) is checked as text is.
def _seconds(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number, factor = value, 1.0
    else:
        match = _DURATION.match(str(value))
        if not match:
            return None
        number, factor = float(match.group(1)), _FACTOR[match.group(2)]
    try:
        return float(number) * factor
    except OverflowError:  # an int past float's range
        return float("inf")


DURATION = Duration()


def env(name: str, *aliases: str) -> list[str]:
    """The GPUFLEET_ variable first, then documented SIMPLETUNER_ aliases."""
    return [f"GPUFLEET_{name}", *(f"SIMPLETUNER_{a}" for a in aliases)]


def setting(*decls: str, var: str, simpletuner: bool = False, **attrs: Any) -> Callable[[F], F]:
    """A flag read also from GPUFLEET_<var> (and, with `simpletuner`, from the documented alias
    SIMPLETUNER_<var>), the variable shown in --help: every setting has its fallback."""
    names = env(var, var) if simpletuner else env(var)
    return click.option(*decls, envvar=names, show_envvar=True, **attrs)


# How a client (the CLI, a worker) trusts the orchestrator's TLS certificate.
CA_CERT = setting(
    "--ca-cert",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    var="CA_CERT",
    metavar="FILE",
    help="CA certificate to trust for the orchestrator's TLS certificate.",
)
SSL_NO_VERIFY = setting(
    "--ssl-no-verify",
    is_flag=True,
    var="SSL_NO_VERIFY",
    help="Do not verify the orchestrator's TLS certificate (development only).",
)


def log_format_option(fields: str) -> Callable[[F], F]:
    """`--log-format text|json` (GPUFLEET_LOG_FORMAT); `fields` says what a JSON line holds."""
    return setting(
        "--log-format",
        var="LOG_FORMAT",
        default="text",
        type=click.Choice(FORMATS),
        help=f"text for people; json for log collectors: one object a line with {fields}.",
    )


class Since(click.ParamType):  # type: ignore[type-arg]
    """A moment: an ISO time (`2025-01-31T12:00`, UTC unless zoned) or a duration ago (`1h`)."""

    name = "time"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        if isinstance(value, datetime):
            return value
        if _DURATION.match(str(value)):
            return datetime.now(UTC) - timedelta(seconds=DURATION.convert(value, param, ctx))
        try:
            moment = datetime.fromisoformat(str(value).strip())
        except ValueError:
            self.fail(
                f"{value!r} is neither a duration ago (30m, 2h) nor an ISO time (2025-01-31T12:00)",
                param,
                ctx,
            )
        return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


SINCE = Since()


def parse_labels(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    """`--label key=value`, repeatable, into a dict."""
    labels = {}
    for value in values:
        key, sep, text = value.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{value!r} is not key=value", ctx=ctx, param=param)
        labels[key.strip()] = text.strip()
    return labels
