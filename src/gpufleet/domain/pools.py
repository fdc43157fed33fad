"""Worker pools (#36): what a pool describes, its provider, and its launches. Pure rules.

A pool describes workers the orchestrator may launch: the provider that starts and stops
their machines, the labels and GPUs those workers have, how many may run (`min_workers` ..
`max_workers`), when an idle one is retired, and what one costs an hour. What to launch and
what to retire is `domain/capacity.py`'s decision (docs/capacity.md).

A launch is recorded before its provider is called (state `launching`, no instance yet), so
that a crash between the two never launches twice and `max_workers` counts it at once.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from gpufleet.domain.jobspec import MAX_GPUS
from gpufleet.domain.jsonpolicy import text_problem
from gpufleet.domain.naming import check_labels, check_name
from gpufleet.domain.states import WorkerType
from gpufleet.errors import InvalidInput

MAX_POOL_WORKERS = 1000  # `max_workers` at most: a typo of 10,000 machines is refused
MAX_ARGV = 64  # arguments in one provider command
MAX_ARG = 4096  # characters in one argument
MAX_TIMEOUT_S = 30 * 86400  # `idle_timeout_s` and `launch_timeout_s` at most: 30 days
MAX_PRICE = 1_000_000.0  # `price_per_hour` and `max_cost_per_hour` at most
MAX_GPU_NAME = 256
STDERR_KEPT = 8192  # characters of a provider's stderr kept with its launch (the end)
ERROR_KEPT = 512


class ProviderType(StrEnum):
    LOCAL = "local"  # `gpufleet worker` processes on the orchestrator's machine
    COMMAND = "command"  # argv templates: any cloud's command-line tool
    SLURM = "slurm"  # the worker as a Slurm batch job


@dataclass(frozen=True, slots=True)
class LocalProvider:
    def as_json(self) -> dict[str, Any]:
        return {"type": ProviderType.LOCAL.value}


@dataclass(frozen=True, slots=True)
class CommandProvider:
    launch: tuple[str, ...]
    terminate: tuple[str, ...]
    listing: tuple[str, ...] | None = None  # `list` in JSON: finds strays

    def as_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "type": ProviderType.COMMAND.value,
            "launch": list(self.launch),
            "terminate": list(self.terminate),
        }
        if self.listing is not None:
            shown["list"] = list(self.listing)
        return shown


SLURM_WORKER = ("gpufleet", "worker")  # what a slurm pool's batch job runs, unless told


@dataclass(frozen=True, slots=True)
class SlurmProvider:
    partition: str
    time_limit: str
    account: str | None = None
    command: tuple[str, ...] = SLURM_WORKER  # the worker's argv on the node

    def as_json(self) -> dict[str, Any]:
        shown = {"type": "slurm", "partition": self.partition, "time_limit": self.time_limit}
        account = {"account": self.account} if self.account is not None else {}
        return (
            shown | account | ({"command": [*self.command]} if self.command != SLURM_WORKER else {})
        )


Provider = LocalProvider | CommandProvider | SlurmProvider

_FIELDS: dict[ProviderType, tuple[frozenset[str], frozenset[str]]] = {  # required, optional
    ProviderType.LOCAL: (frozenset(), frozenset()),
    ProviderType.COMMAND: (frozenset({"launch", "terminate"}), frozenset({"list"})),
    ProviderType.SLURM: (frozenset({"partition", "time_limit"}), frozenset({"account", "command"})),
}
PROVIDER_EXAMPLE = (
    '{"type": "command", "launch": ["/opt/launch.sh"], "terminate": ["/opt/stop.sh"]}'
)
# What Slurm takes for a partition or an account, and for `--time` (sbatch(1)): minutes,
# minutes:seconds, hours:minutes:seconds, days-hours, days-hours:minutes,
# days-hours:minutes:seconds, or no limit.
SLURM_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}")
SLURM_TIME = re.compile(
    r"\d{1,7}(:\d{1,2}){0,2}|\d{1,5}-\d{1,2}(:\d{1,2}){0,2}|UNLIMITED|INFINITE|unlimited|infinite"
)


def _argv(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise InvalidInput(
            f"{where} must be a non-empty list of strings (an argv), e.g. "
            f'["/opt/launch.sh", "--region", "us-east"]'
        )
    if len(value) > MAX_ARGV:
        raise InvalidInput(f"{where} has {len(value)} arguments; at most {MAX_ARGV} are taken")
    for index, arg in enumerate(value):
        if not isinstance(arg, str) or not arg:
            raise InvalidInput(f"{where}[{index}] must be a non-empty string")
        why = text_problem(arg)
        if why:
            raise InvalidInput(f"{where}[{index}] {why}")
        if len(arg) > MAX_ARG:
            raise InvalidInput(f"{where}[{index}] is over {MAX_ARG} characters; shorten it")
    return tuple(value)


def _slurm_name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not SLURM_NAME.fullmatch(value):
        raise InvalidInput(
            f"{where} must be a Slurm name: letters, digits, '_', '-' and '.' (at most 64, "
            f"starting with a letter or digit), got {_shown(value)}"
        )
    return value


def check_provider(value: Any) -> Provider:
    """The provider a pool's JSON names, refused field by field when it is not one."""
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise InvalidInput(f"provider must be an object with a type, such as {PROVIDER_EXAMPLE}")
    try:
        kind = ProviderType(value["type"])
    except ValueError:
        choices = ", ".join(t.value for t in ProviderType)
        raise InvalidInput(
            f"provider type {_shown(value['type'])} is not known; choose {choices}"
        ) from None
    required, optional = _FIELDS[kind]
    unknown = sorted(set(value) - required - optional - {"type"}, key=str)
    if unknown:
        allowed = ", ".join(["type", *sorted(required | optional)])
        raise InvalidInput(
            f"provider field {_shown(unknown[0])} is not one a {kind.value} provider has "
            f"({allowed}); remove it"
        )
    missing = sorted(required - set(value))
    if missing:
        raise InvalidInput(f"a {kind.value} provider needs {' and '.join(missing)}")
    if kind is ProviderType.COMMAND:
        listing = value.get("list")
        return CommandProvider(
            _argv(value["launch"], "provider.launch"),
            _argv(value["terminate"], "provider.terminate"),
            None if listing is None else _argv(listing, "provider.list"),
        )
    if kind is ProviderType.SLURM:
        limit = value["time_limit"]
        if not isinstance(limit, str) or not SLURM_TIME.fullmatch(limit):
            raise InvalidInput(
                "provider.time_limit must be a Slurm time limit such as 60 (minutes), "
                f"4:00:00 or 1-12:00:00, or UNLIMITED; got {_shown(limit)}"
            )
        account, command = value.get("account"), value.get("command")
        return SlurmProvider(
            _slurm_name(value["partition"], "provider.partition"),
            limit,
            None if account is None else _slurm_name(account, "provider.account"),
            SLURM_WORKER if command is None else _argv(command, "provider.command"),
        )
    return LocalProvider()


@dataclass(frozen=True, slots=True)
class Pool:
    id: str
    name: str
    provider: Provider
    labels: dict[str, str]  # what its workers are labelled (admin labels: they win)
    gpu_count: int  # GPUs each of its workers has
    gpu_name: str | None  # what they are, as shown (jobs choose by labels and count)
    worker_type: WorkerType
    min_workers: int
    max_workers: int
    idle_timeout_s: int  # a worker above min_workers idle this long is retired
    launch_timeout_s: int  # a launch not registered by then failed, and is terminated
    price_per_hour: float  # of one worker, in the operator's currency
    max_cost_per_hour: float | None  # launches stop where the pool would cost more
    enabled: bool
    created_at: datetime
    created_by: str | None
    updated_at: datetime


# What a pool is given, and what each field is when it is not (None: it must be given).
EDITABLE: dict[str, Any] = {
    "provider": None,
    "labels": {},
    "gpu_count": 1,
    "gpu_name": None,
    "worker_type": WorkerType.EPHEMERAL.value,
    "min_workers": 0,
    "max_workers": None,
    "idle_timeout_s": 300,
    "launch_timeout_s": 600,
    "price_per_hour": 0.0,
    "max_cost_per_hour": None,
    "enabled": True,
}
REQUIRED = frozenset({"provider", "max_workers"})


def _shown(value: Any) -> str:
    """A refused value as an error quotes it: a huge number is not written out, text is cut."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**9:
        return "a number that large"
    return repr(value)[:100]


def _whole(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInput(
            f"{field} must be a whole number from {low} to {high}, got {_shown(value)}"
        )
    return value


def _money(value: Any, field: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_PRICE
    ):
        raise InvalidInput(
            f"{field} must be a number from 0 to {MAX_PRICE:,.0f} (per hour), got {_shown(value)}"
        )
    return float(value)


def _gpu_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_GPU_NAME:
        raise InvalidInput(
            f"gpu_name must be a non-empty text of at most {MAX_GPU_NAME} characters (such as "
            f"'NVIDIA H100 80GB HBM3'), or null; got {_shown(value)}"
        )
    why = text_problem(value)
    if why:
        raise InvalidInput(f"gpu_name {why}")
    return value


def _labels(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidInput('labels must be an object of text values, such as {"pool": "burst"}')
    return check_labels(value)


def check_pool(given: Mapping[str, Any]) -> dict[str, Any]:
    """A pool's editable fields (`EDITABLE`), checked, with the defaults of those not given;
    stored as they are returned (the provider as its JSON)."""
    unknown = sorted(set(given) - set(EDITABLE), key=str)
    if unknown:
        raise InvalidInput(f"a pool has no field {_shown(unknown[0])}; remove it")
    missing = sorted(REQUIRED - {k for k, v in given.items() if v is not None})
    if missing:
        raise InvalidInput(f"a pool needs {' and '.join(missing)}")
    v = {**EDITABLE, **given}
    try:
        worker_type = WorkerType(v["worker_type"]).value
    except ValueError:
        raise InvalidInput(
            f"worker_type must be ephemeral or persistent, got {_shown(v['worker_type'])}"
        ) from None
    if not isinstance(v["enabled"], bool):
        raise InvalidInput(f"enabled must be true or false, got {_shown(v['enabled'])}")
    checked = {
        "provider": check_provider(v["provider"]).as_json(),
        "labels": _labels(v["labels"]),
        "gpu_count": _whole(v["gpu_count"], "gpu_count", 0, MAX_GPUS),
        "gpu_name": _gpu_name(v["gpu_name"]),
        "worker_type": worker_type,
        "min_workers": _whole(v["min_workers"], "min_workers", 0, MAX_POOL_WORKERS),
        "max_workers": _whole(v["max_workers"], "max_workers", 0, MAX_POOL_WORKERS),
        "idle_timeout_s": _whole(v["idle_timeout_s"], "idle_timeout_s", 0, MAX_TIMEOUT_S),
        "launch_timeout_s": _whole(v["launch_timeout_s"], "launch_timeout_s", 1, MAX_TIMEOUT_S),
        "price_per_hour": _money(v["price_per_hour"], "price_per_hour"),
        "max_cost_per_hour": None
        if v["max_cost_per_hour"] is None
        else _money(v["max_cost_per_hour"], "max_cost_per_hour"),
        "enabled": v["enabled"],
    }
    _check_together(checked)
    return checked


def _check_together(v: Mapping[str, Any]) -> None:
    if v["min_workers"] > v["max_workers"]:
        raise InvalidInput(
            f"min_workers ({v['min_workers']}) is over max_workers ({v['max_workers']}); "
            "lower min_workers or raise max_workers"
        )
    cap, price = v["max_cost_per_hour"], v["price_per_hour"]
    if cap is not None and v["min_workers"] * price > cap:
        raise InvalidInput(
            f"min_workers ({v['min_workers']}) at {price:g} an hour cost more than "
            f"max_cost_per_hour ({cap:g}); lower min_workers or raise max_cost_per_hour"
        )


def editable(pool: Pool) -> dict[str, Any]:
    """The pool's editable fields as `check_pool` takes and returns them."""
    return {name: _plain(getattr(pool, name)) for name in EDITABLE}


def _plain(value: Any) -> Any:
    if isinstance(value, LocalProvider | CommandProvider | SlurmProvider):
        return value.as_json()
    return value.value if isinstance(value, StrEnum) else value


def check_changes(pool: Pool, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The fields `changes` changes, checked with the pool's others (min beside max); a
    field sent as null goes back to its default (`gpu_name`, `max_cost_per_hour`: none)."""
    if "name" in changes:
        raise InvalidInput("a pool's name cannot change; create a pool of the new name instead")
    before = editable(pool)
    asked = {k: (EDITABLE.get(k) if v is None else v) for k, v in changes.items()}
    after = check_pool({**before, **asked})
    return {k: value for k, value in after.items() if value != before[k]}


def audited(values: Mapping[str, Any]) -> dict[str, Any]:
    """A pool's values as the audit log records them: a command provider's programs only
    (their arguments may carry a cloud's credentials)."""
    out = dict(values)
    provider = out.get("provider")
    if isinstance(provider, dict) and provider.get("type") == ProviderType.COMMAND.value:
        out["provider"] = {
            k: (v[0] if isinstance(v, list) and v else v) for k, v in provider.items()
        }
    return out


def check_pool_name(name: str) -> str:
    return check_name("pool", name)


# ---- launches ------------------------------------------------------------------------------


class LaunchState(StrEnum):
    LAUNCHING = "launching"  # recorded, its provider called or about to be; no worker yet
    REGISTERED = "registered"  # its worker registered
    FAILED = "failed"  # the provider refused or never answered: no instance to stop
    TERMINATING = "terminating"  # its instance is being stopped (retired, or launch timed out)
    TERMINATED = "terminated"  # stopped: the launch is over


L = LaunchState
LAUNCH_TRANSITIONS: dict[LaunchState, frozenset[LaunchState]] = {
    L.LAUNCHING: frozenset({L.REGISTERED, L.FAILED, L.TERMINATING}),
    L.REGISTERED: frozenset({L.TERMINATING}),
    L.TERMINATING: frozenset({L.TERMINATED}),
    L.FAILED: frozenset(),
    L.TERMINATED: frozenset(),
}
# An instance may be up: it counts toward `max_workers`, and its pool cannot be deleted.
LIVE_LAUNCH = frozenset(s for s in LaunchState if s not in (L.FAILED, L.TERMINATED))


@dataclass(frozen=True, slots=True)
class Launch:
    id: str
    pool_id: str
    state: LaunchState
    instance_id: str | None  # what its provider named the machine (None until it answers)
    worker_id: str | None  # the worker created for it, whose token it was given
    created_at: datetime  # recorded, before the provider was called
    registered_at: datetime | None
    ended_at: datetime | None  # failed, or its instance terminated
    stderr: str | None  # the provider's stderr, its last STDERR_KEPT characters
    error: str | None  # why it failed, in words
    terminate_tries: int = 0

    @property
    def failed(self) -> bool:
        """It never brought a worker up: the provider failed, or the launch timed out."""
        return self.error is not None and self.registered_at is None


def kept_stderr(text: str) -> str:
    """What of a provider's stderr is kept: its end, where the error is."""
    return text[-STDERR_KEPT:]
