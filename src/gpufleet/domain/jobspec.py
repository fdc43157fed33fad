"""What a config and a submission must say, checked before anything is stored."""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.domain.job_secrets import MASK, looks_like_credential, reference
from gpufleet.domain.naming import LABEL_KEY, LABEL_KEY_RULE, NAME, NAME_RULE, check_name
from gpufleet.errors import InvalidInput

# A config's name follows the rule of every name (domain/naming.py); the Train page checks
# it with the same pattern before it saves.
CONFIG_NAME = NAME
CONFIG_NAME_RULE = NAME_RULE
MAX_CONFIG_BYTES = 1_000_000


def check_config_name(name: str) -> str:
    return check_name("config", name)


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


WORKDIR = re.compile(r"sha256:[0-9a-f]{64}")


def workdir_of(config: dict[str, Any]) -> str | None:
    """The 64 hex digits of the snapshot a config names in `workdir`; None when it names
    none (docs/jobs.md)."""
    value = config.get("workdir")
    if value is None:
        return None
    if not isinstance(value, str) or not WORKDIR.fullmatch(value):
        raise InvalidInput(
            f"config field 'workdir' must be 'sha256:' and 64 lowercase hex digits (a snapshot "
            f"uploaded to PUT /api/workdirs/{{digest}}), got {str(value)[:100]!r}",
            cli="the job's workdir must be a snapshot's digest, 'sha256:<64 hex digits>'; "
            "`gpufleet run` makes one",
        )
    return value.removeprefix("sha256:")


MAX_REQUIREMENTS_BYTES = 64 * 1024
MAX_SETUP_BYTES = 16 * 1024
# What `env_from` may name in the snapshot: a project's metadata, its lock, a requirements file.
ENV_FROM = re.compile(
    r"(?:[^/\x00-\x1f\x7f]+/)*(?:pyproject\.toml|uv\.lock|[^/\x00-\x1f\x7f]*\.txt)"
)


def _text(body: dict[str, Any], field: str, most: int, what: str) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"config field {field!r} must be a non-empty string: {what}")
    if "\x00" in value:
        raise InvalidInput(f"config field {field!r} contains a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(f"config field {field!r} is not valid UTF-8 text") from None
    if size > most:
        raise InvalidInput(f"config field {field!r} is over {most} bytes: {what}")
    return value


def check_environment(body: dict[str, Any]) -> None:
    """`requirements` (a requirements file's text), `env_from` (a file of the snapshot that
    names them) and `setup` (a shell command): what the worker builds and runs before the
    command (docs/jobs.md)."""
    _text(body, "requirements", MAX_REQUIREMENTS_BYTES, "the text of a requirements file")
    env_from = _text(body, "env_from", 1024, "a file of the workdir")
    _text(body, "setup", MAX_SETUP_BYTES, "a shell command run before the command")
    if env_from is None:
        return
    if body.get("requirements") is not None:
        raise InvalidInput(
            "config fields 'requirements' and 'env_from' both name the environment: keep one"
        )
    if body.get("workdir") is None:
        raise InvalidInput(
            "config field 'env_from' names a file of the workdir, and the config names no 'workdir'"
        )
    if not ENV_FROM.fullmatch(env_from) or ".." in env_from.split("/"):
        raise InvalidInput(
            f"config field 'env_from' must be a relative path in the workdir to a "
            f"pyproject.toml, a uv.lock or a requirements .txt file, got {env_from[:100]!r}"
        )


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
    _stated_gpu_count(body)
    gang_shape(0, body)
    workdir_of(body)
    check_environment(body)
    return body


# The fields where a config states its GPU count: ours, then SimpleTuner's (`num_processes`, the
# processes its trainer starts, one a GPU; `--num_processes` as its CLI spells it).
GPU_FIELDS = ("gpu_count", "num_processes", "--num_processes")


def _stated_gpu_count(config: dict[str, Any]) -> tuple[str, int] | None:
    """The field and the count the config states, None when it states none; refused when
    two of its fields disagree (the trainer would not use the GPUs the job holds)."""
    stated = [(f, _int(config[f], f)) for f in GPU_FIELDS if config.get(f) is not None]
    for field, count in stated[1:]:
        first, first_count = stated[0]
        if count != first_count:
            raise InvalidInput(
                f"config fields {first!r} ({first_count}) and {field!r} ({count}) disagree: "
                "they both say how many GPUs the job uses; make them the same number, or "
                "keep only one"
            )
    return stated[0] if stated else None


def config_gpu_count(config: dict[str, Any]) -> int:
    """GPUs a config asks for: the count its fields state (`GPU_FIELDS`), else 0."""
    stated = _stated_gpu_count(config)
    return 0 if stated is None else stated[1]


def rerun_gpu_count(edited: int | None, old: int, config: dict[str, Any]) -> int | None:
    """The GPU count an edit-and-re-run asks (`job_gpu_count`'s `requested`): the one the
    edit gave, else the old job's, unless the config states its own (then the config's)."""
    if edited is not None:
        return edited
    return None if _stated_gpu_count(config) is not None else old


def job_gpu_count(requested: int | None, config: dict[str, Any]) -> int:
    """The GPUs a job holds: the submit's `gpu_count`, else the config's. When the config
    states a count, a submit's other count is refused: the job would hold one number of
    GPUs while its trainer starts another, sidestepping the approval rules and the matching
    (a `gpu_count` of 0 beside `num_processes: 8`)."""
    stated = _stated_gpu_count(config)
    if requested is None or stated is None:
        return requested if requested is not None else config_gpu_count(config)
    field, own = stated
    if requested == own:
        return own
    why = f"disagrees with the config's own GPU count, {field!r} ({own})"
    fix = f"or change {field!r} in the config"
    raise InvalidInput(
        f"gpu_count {requested} {why}: submit with gpu_count {own}, leave gpu_count out to "
        f"take the config's, {fix}",
        cli=f"--gpus {requested} {why}: run it with --gpus {own}, or without --gpus to take "
        f"the config's, {fix}",
        ui=f"GPU count {requested} {why}: set GPU count to {own}, or leave it blank to take "
        f"the config's, {fix}",
    )


MAX_NODES = 64  # as `nodes` at submit: the machines one job runs on (docs/jobs.md)


def _shown(value: Any) -> str:
    """A refused value as an error may quote it: a huge number is not written out (Python
    refuses to write one of over 4,300 digits), a long text is cut."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**9:
        return "a number that large"
    return repr(value)[:100]


def check_nodes(value: Any, field: str = "nodes") -> int:
    """The machines a job runs on: a whole number from 1 to MAX_NODES (1: not a gang)."""
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_NODES:
        raise InvalidInput(
            f"config field {field!r} must be a whole number from 1 to {MAX_NODES} (the "
            f"machines the job runs on), got {_shown(value)}"
        )
    return value


def _same_label(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not LABEL_KEY.fullmatch(value):
        raise InvalidInput(
            f"config field 'same_label' must name a label (every node has the same value of "
            f"it), got {_shown(value)}: {LABEL_KEY_RULE}"
        )
    return value


@dataclass(frozen=True, slots=True)
class GangShape:
    """The machines a job runs on: `nodes` workers with `gpus_per_node` GPUs each, all with
    one value of the label `same_label` when it names one (None for one node: see
    `gang_shape`)."""

    nodes: int
    gpus_per_node: int
    same_label: str | None = None

    @property
    def total_gpus(self) -> int:
        """What limits, fair share and usage count: every node's GPUs."""
        return self.nodes * self.gpus_per_node


def gang_shape(gpu_count: int, config: Mapping[str, Any]) -> GangShape:
    """The shape of a job of `gpu_count` GPUs a node (`job_gpu_count`) and this config.

    `same_label` with one node is accepted and ignored, not refused: a config written for N
    nodes runs as is on one (a smoke test with `nodes` 1), where one node trivially has one
    value of any label. Refused values name their field."""
    nodes = check_nodes(config.get("nodes"))
    same = _same_label(config.get("same_label"))
    return GangShape(nodes, gpu_count, same if nodes > 1 else None)


def total_gpus(gpu_count: int, config: Mapping[str, Any]) -> int:
    """GPUs a job holds in all, as limits, fair share and usage count them: nodes times gpu_count
    (with one node, its `gpu_count` as before)."""
    return gang_shape(gpu_count, config).total_gpus


def config_digest(body: dict[str, Any]) -> str:
    """A config's sha256 over its canonical JSON (keys sorted, no spaces, ASCII): the same
    config has the same digest whatever order its keys were sent in."""
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()
