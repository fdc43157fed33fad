"""What a config and a submission must say, checked before anything is stored."""

from __future__ import annotations

import math
import re
from typing import Any

from gpufleet.domain.job_secrets import MASK, looks_like_credential, reference
from gpufleet.errors import InvalidInput

CONFIG_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
# The rule in words: the API, the CLI and the Train page (which checks names with the same
# pattern before it saves) all say this.
CONFIG_NAME_RULE = (
    "use letters, digits, '_', '-' and '.' (at most 128 characters, starting with a letter "
    "or digit; no '/' or spaces)"
)
MAX_CONFIG_BYTES = 1_000_000


def check_config_name(name: str) -> str:
    if not CONFIG_NAME.fullmatch(name):
        raise InvalidInput(f"config name {name!r} is not valid; {CONFIG_NAME_RULE}")
    return name


def could_be_config_name(name: str) -> bool:
    return CONFIG_NAME.fullmatch(name) is not None


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
MAX_GPUS = 1024  # as `gpu_count` at submit


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise InvalidInput(
            f"config field {field!r} must be a whole number from 0 to {MAX_GPUS}, got {value!r}"
        )
    return value


def _check_command(command: Any) -> None:
    if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
        raise InvalidInput(
            "config field 'command' must be a non-empty list of strings (an argv), "
            'e.g. ["python", "train.py"]; leave it out for SimpleTuner training'
        )
    if not command[0]:
        raise InvalidInput("config field 'command[0]' is empty: name the program to run")
    for index, arg in enumerate(command):
        if "\x00" in arg:
            raise InvalidInput(f"config field 'command[{index}]' contains a NUL character")


def _check_env(env: Any) -> None:
    if not isinstance(env, dict):
        raise InvalidInput(
            "config field 'env' must be an object of string values or secret references "
            '({"secret": "NAME"})'
        )
    for name, value in env.items():
        if not ENV_NAME.fullmatch(name):
            raise InvalidInput(
                f"config field 'env' has the name {name!r}, which no process can be given: "
                "use letters, digits and '_', not starting with a digit"
            )
        if reference(name, value) is not None:  # refused naming the field, if malformed
            continue
        if value == MASK and looks_like_credential(name):
            raise InvalidInput(
                f"config field 'env.{name}' is {MASK!r}, a value masked for you: write the "
                'value itself, or refer to a secret: {"secret": "NAME"}'
            )
        if "\x00" in value:
            raise InvalidInput(f"config field 'env.{name}' contains a NUL character")


def check_config(body: Any) -> dict[str, Any]:
    """A config is a JSON object; the fields gpufleet reads must be ones a worker can start."""
    if not isinstance(body, dict):
        raise InvalidInput("a config must be a JSON object")
    if body.get("command") is not None:
        _check_command(body["command"])
    if body.get("env") is not None:
        _check_env(body["env"])
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
