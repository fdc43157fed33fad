"""Option types shared by the commands."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import click

from gpufleet.errors import ConfigurationError
from gpufleet.settings.setting import Kind, Setting, Table, duration_text
from gpufleet.settings.worker import WORKER

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


def option(declared: Setting) -> Callable[[F], F]:
    """The click option of a declared setting: its flag, type, default, bounds and
    variables, the variables shown in --help."""
    attrs: dict[str, Any] = {"help": declared.help or None, "metavar": declared.metavar}
    if declared.show_default is not None:
        attrs["show_default"] = declared.show_default
    default = declared.default
    kind = declared.kind
    if kind is Kind.FLAG:
        attrs["is_flag"] = True
    elif kind is Kind.LABELS:
        attrs.update(multiple=True, callback=parse_labels)
        default = None
    elif kind is Kind.LIST:
        attrs["type"] = COMMA_LIST
        default = ",".join(default or ())
    elif kind in (Kind.RATE, Kind.SIZE):
        attrs["callback"] = parse_size_option
        default = str(default)
    elif kind is Kind.GPUS:
        attrs["callback"] = _gpus
    elif kind is Kind.DURATION:
        attrs["type"] = DURATION  # never negative; the settings object checks its bounds
        default = duration_text(default)
    else:
        attrs["type"] = _click_type(declared)
    decls = [d for d in (declared.short, declared.option) if d]
    if default is not None:  # none: click's own "not given"
        attrs["default"] = default
    return click.option(
        *decls,
        declared.name,
        envvar=declared.env_vars,
        show_envvar=True,
        **attrs,
    )


def options(table: Table) -> Callable[[F], F]:
    """Every setting of `table` as an option, listed by --help in the table's order."""

    def add(command: F) -> F:
        for declared in reversed(table):
            command = option(declared)(command)
        return command

    return add


_PATHS = {
    Kind.PATH: {},
    Kind.FILE: {"dir_okay": False},
    Kind.EXISTING_FILE: {"exists": True, "dir_okay": False},
    Kind.FOLDER: {"file_okay": False},
}


def _click_type(declared: Setting) -> Any:
    kind = declared.kind
    if kind is Kind.CHOICE:
        return click.Choice(declared.choices)
    if kind in _PATHS:
        return click.Path(path_type=Path, **_PATHS[kind])
    if kind in (Kind.INT, Kind.FLOAT):
        low = declared.least if declared.least is not None else declared.above
        high = declared.most
        if not declared.cli_range or (low is None and high is None):
            return int if kind is Kind.INT else float
        open_low = declared.least is None and declared.above is not None
        if kind is Kind.INT:
            whole = [None if b is None else int(b) for b in (low, high)]
            return click.IntRange(min=whole[0], max=whole[1], min_open=open_low)
        return click.FloatRange(min=low, max=high, min_open=open_low)
    return None  # text


class CommaList(click.ParamType):  # type: ignore[type-arg]
    """Comma-separated entries, spaces around them dropped: `a, b` is ("a", "b")."""

    name = "list"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, ...]:
        entries = value if isinstance(value, tuple | list) else str(value).split(",")
        return tuple(e.strip() for e in entries if e.strip())


COMMA_LIST = CommaList()


def _gpus(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, ...] | None:
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


def parse_size_option(ctx: click.Context, param: click.Parameter, value: str | None) -> int:
    from gpufleet.worker.settings import parse_rate

    try:
        return parse_rate(value or "")
    except ConfigurationError as exc:
        raise click.BadParameter(exc.message, ctx=ctx, param=param) from None


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


# How a client (the CLI, a worker) trusts the orchestrator's TLS certificate.
CA_CERT = option(WORKER.named("ca_cert"))
SSL_NO_VERIFY = option(WORKER.named("ssl_no_verify"))
