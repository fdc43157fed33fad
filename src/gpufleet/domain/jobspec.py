"""What a config and a submission must say, checked before anything is stored."""

from __future__ import annotations

import math
import re
from typing import Any

from gpufleet.errors import InvalidInput

CONFIG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
MAX_CONFIG_BYTES = 1_000_000


def check_config_name(name: str) -> str:
    if not CONFIG_NAME.fullmatch(name):
        raise InvalidInput(
            f"config name {name!r} is not valid; use letters, digits, '_', '-' and '.' "
            "(at most 128 characters, starting with a letter or digit)"
        )
    return name


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"config field {field!r} must be a whole number ≥ 0, got {value!r}")
    return value


def check_config(body: Any) -> dict[str, Any]:
    """A config is a JSON object; the fields gpufleet reads must have the right shape."""
    if not isinstance(body, dict):
        raise InvalidInput("a config must be a JSON object")
    command = body.get("command")
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command)
    ):
        raise InvalidInput(
            "config field 'command' must be a non-empty list of strings (an argv), "
            'e.g. ["python", "train.py"]; leave it out for SimpleTuner training'
        )
    env = body.get("env")
    if env is not None and (
        not isinstance(env, dict)
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    ):
        raise InvalidInput("config field 'env' must be an object of string values")
    timeout = body.get("timeout_s")
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise InvalidInput(
            f"config field 'timeout_s' must be a number of seconds > 0, got {timeout!r}"
        )
    for field in ("gpu_count", "num_processes", "--num_processes"):
        if body.get(field) is not None:
            _int(body[field], field)
    return body


def config_gpu_count(config: dict[str, Any]) -> int:
    """GPUs a config asks for: `gpu_count`, else SimpleTuner's `num_processes`, else 0."""
    for field in ("gpu_count", "num_processes", "--num_processes"):
        value = config.get(field)
        if value is not None:
            return _int(value, field)
    return 0
