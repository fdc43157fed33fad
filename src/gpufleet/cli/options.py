"""Option types shared by the commands."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click

from gpufleet.logs import FORMATS

F = TypeVar("F", bound=Callable[..., Any])

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_FACTOR = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


class Duration(click.ParamType):  # type: ignore[type-arg]
    """Seconds, or a number with ms, s, m or h: `120`, `2m`, `1h`, `500ms`."""

    name = "duration"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        if isinstance(value, int | float):
            return float(value)
        match = _DURATION.match(str(value))
        if not match:
            self.fail(f"{value!r} is not a duration; write e.g. 120, 120s, 2m or 1h", param, ctx)
        return float(match.group(1)) * _FACTOR[match.group(2)]


DURATION = Duration()


def env(name: str, *aliases: str) -> list[str]:
    """The GPUFLEET_ variable first, then documented SIMPLETUNER_ aliases."""
    return [f"GPUFLEET_{name}", *(f"SIMPLETUNER_{a}" for a in aliases)]


def log_format_option(fields: str) -> Callable[[F], F]:
    """`--log-format text|json` (GPUFLEET_LOG_FORMAT); `fields` says what a JSON line holds."""
    return click.option(
        "--log-format",
        default="text",
        envvar=env("LOG_FORMAT"),
        show_envvar=True,
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
