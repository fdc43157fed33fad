"""Which worker may run which job, and why a job waits."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fnmatch import fnmatchcase
from itertools import combinations
from typing import Any

from gpufleet.domain.states import Target, WorkerStatus, WorkerType


class Feature(StrEnum):
    """What a worker agent says, at registration, it does beyond running a SimpleTuner
    config. The released SimpleTuner agent says nothing: it has none of these."""

    COMMAND = "command"  # runs the config's `command` argv with its `env`, honours `timeout_s`
    ATTEMPTS = "attempts"  # names the attempt in every report, and heeds it in `job_cancel`
    # Sends the attempt's token (X-Attempt-Token) on every call about its job: the worker's
    # token alone then writes nothing into a job (docs/security.md, keeping jobs away from
    # their worker's keys). Once a worker said so, it cannot register again without it.
    ATTEMPT_TOKEN = "attempt_token"
    # Downloads the snapshot a job's config names in `workdir` and unpacks it into the job's
    # folder before the command runs (docs/jobs.md).
    WORKDIR = "workdir"
    # Builds the virtualenv a job's config asks for (`requirements`, `env_from`) with uv, and
    # runs its `setup` command before the command (docs/jobs.md).
    ENV = "env"
    # Runs one node of a multi-node job (a config's `nodes` over 1): its rank, the
    # rendezvous and the gang's stop (docs/jobs.md, Multi-node jobs). Released SimpleTuner
    # agents never say it.
    GANG = "gang"
    INPUTS = "inputs"  # fetches the artifacts a job takes (`inputs`) first (docs/jobs.md)


# What the gpufleet worker says it does: every feature.
AGENT_FEATURES = tuple(Feature)


_KNOWN_FEATURES = frozenset(f.value for f in Feature)

# Config keys only a worker with Feature.COMMAND honours: the SimpleTuner agent ignores them
# and runs `simpletuner.train`, so a job with any of them must not be offered to it.
COMMAND_KEYS = ("command", "timeout_s", "env")
# Config keys only a worker with Feature.ENV honours.
ENV_KEYS = ("requirements", "env_from", "setup")


def needs_of(config: Mapping[str, Any], *, inputs: bool = False) -> frozenset[Feature]:
    """The features a worker must have to run this config as its submitter meant (`inputs`:
    the job takes artifacts of its dependencies)."""
    needs = {Feature.INPUTS} if inputs else set()
    if any(config.get(key) is not None for key in COMMAND_KEYS):
        needs.add(Feature.COMMAND)
    if config.get("workdir") is not None:
        needs.add(Feature.WORKDIR)
    if any(config.get(key) is not None for key in ENV_KEYS):
        needs.add(Feature.ENV)
    nodes = config.get("nodes")
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 1:
        needs.add(Feature.GANG)
    return frozenset(needs)


def parse_features(reported: Any) -> frozenset[Feature]:
    """The features a registration names; unknown names (a newer agent's) are ignored."""
    if not isinstance(reported, list | tuple):
        return frozenset()
    return frozenset(Feature(name) for name in reported if name in _KNOWN_FEATURES)


@dataclass(frozen=True, slots=True)
class Requirement:
    """What a job asks of a worker."""

    target: Target
    gpu_count: int
    labels: Mapping[str, str]  # values are glob patterns, keys are exact
    needs: frozenset[Feature] = frozenset()


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a worker offers, and where it stands."""

    worker_id: str
    name: str
    status: WorkerStatus
    gpu_count: int | None  # None: never registered, capabilities unknown
    labels: Mapping[str, str]
    is_local: bool
    worker_type: WorkerType = WorkerType.PERSISTENT
    spent: bool = False  # an ephemeral worker that has already run its one job
    current_job_id: str | None = None
    features: frozenset[Feature] | None = None  # None: never registered, not known yet
    unhealthy: bool = False  # its preflight fails: `draining` to dispatch, not drained


GLOB_CHARS = "*?["
ANY_LABELS = "*"  # the match key of a job whose labels cannot be listed: checked one by one
MAX_MATCH_KEY = 500
MAX_LISTED_LABELS = 8  # a worker with more labels than this reads every queued job's key


def match_key(labels: Mapping[str, str]) -> str:
    """What a job's label requirement indexes as: its exact pairs, sorted; `ANY_LABELS` when
    a value is a glob pattern (or the pairs are too long to index)."""
    if any(ch in value for value in labels.values() for ch in GLOB_CHARS):
        return ANY_LABELS
    key = json.dumps(sorted(labels.items()), separators=(",", ":"))
    return key if len(key) <= MAX_MATCH_KEY else ANY_LABELS


def match_keys_for(labels: Mapping[str, str]) -> list[str] | None:
    """Every match key of a job these labels satisfy: the keys of all subsets of the pairs,
    and `ANY_LABELS`. None when there are too many labels to list them."""
    items = sorted(labels.items())
    if len(items) > MAX_LISTED_LABELS:
        return None
    keys = [ANY_LABELS]
    for size in range(len(items) + 1):
        for subset in combinations(items, size):
            keys.append(json.dumps(list(subset), separators=(",", ":")))
    return keys


def labels_match(wanted: Mapping[str, str], have: Mapping[str, str]) -> bool:
    return all(k in have and fnmatchcase(have[k], pattern) for k, pattern in wanted.items())


class Why(StrEnum):
    """Why one worker does not take a job now: the code of a `Reason`."""

    LOCAL_BUT_TARGET_WORKER = "local_but_target_worker"
    REMOTE_BUT_TARGET_LOCAL = "remote_but_target_local"
    NEVER_REGISTERED = "never_registered"
    TOO_FEW_GPUS = "too_few_gpus"
    SIMPLETUNER_ONLY = "simpletuner_only"
    NO_WORKDIR = "no_workdir"
    NO_ENV = "no_env"
    NO_GANG = "no_gang"
    NO_INPUTS = "no_inputs"
    NO_LABEL = "no_label"
    LABEL_MISMATCH = "label_mismatch"
    BUSY = "busy"
    DRAINING = "draining"
    UNHEALTHY = "unhealthy"  # its preflight fails (docs/workers.md, Health)
    OFFLINE = "offline"
    CONNECTING = "connecting"
    SPENT = "spent"
    HELD = "held"  # idle, and held for a multi-node job at the head of the queue (gang.py)


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason, as a code and its parameters; `str()` says it in words (every surface
    says a worker's reasons alike: they are facts about it, with no advice in them)."""

    code: Why
    params: Mapping[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        p = self.params
        match self.code:
            case Why.LOCAL_BUT_TARGET_WORKER:
                return "is the orchestrator's local runner and the job's target is 'worker'"
            case Why.REMOTE_BUT_TARGET_LOCAL:
                return "is a remote worker and the job's target is 'local'"
            case Why.NEVER_REGISTERED:
                return "has never registered, so its GPUs are unknown"
            case Why.TOO_FEW_GPUS:
                return f"has {p['has']} GPU(s), the job needs {p['needs']}"
            case Why.SIMPLETUNER_ONLY:
                return (
                    f"runs SimpleTuner configs only (a SimpleTuner agent ignores "
                    f"{'/'.join(COMMAND_KEYS)}); the job has a command, a timeout or env: run "
                    "it on a `gpufleet worker`"
                )
            case Why.NO_WORKDIR:
                return (
                    "cannot unpack a job's workdir (it does not say `workdir` in its features: "
                    "a SimpleTuner agent, or an older gpufleet worker); run it on a current "
                    "`gpufleet worker`"
                )
            case Why.NO_ENV:
                return (
                    "cannot build a job's environment or run its setup (it does not say `env` "
                    "in its features: a SimpleTuner agent, or an older gpufleet worker); run it "
                    "on a current `gpufleet worker`"
                )
            case Why.NO_GANG:
                return (
                    "does not say `gang` in its features; the job needs workers that run "
                    "multi-node jobs (feature gang)"
                )
            case Why.NO_INPUTS:
                return (
                    "cannot fetch a job's inputs (it does not say `inputs` in its features: a "
                    "SimpleTuner agent, or an older gpufleet worker); run it on a current "
                    "`gpufleet worker`"
                )
            case Why.NO_LABEL:
                return f"has no label {p['key']!r} (wanted {p['key']}={p['wanted']})"
            case Why.LABEL_MISMATCH:
                return f"label {p['key']}={p['has']!r} does not match {p['wanted']!r}"
            case Why.HELD:
                return f"is {p['note']}" if p.get("note") else "is held for a multi-node job"
            case Why.BUSY:
                return f"is busy with job {p['job_id']}" if p.get("job_id") else "is busy"
            case Why.DRAINING:
                return "is draining"
            case Why.UNHEALTHY:
                return "is unhealthy: its preflight fails"
            case Why.OFFLINE:
                return "is offline"
            case Why.CONNECTING:
                return "is connecting (its event stream is not open)"
            case Why.SPENT:
                return "is ephemeral and has already run its one job"


def label_mismatches(wanted: Mapping[str, str], have: Mapping[str, str]) -> list[Reason]:
    out = []
    for key, pattern in sorted(wanted.items()):
        if key not in have:
            out.append(Reason(Why.NO_LABEL, {"key": key, "wanted": pattern}))
        elif not fnmatchcase(have[key], pattern):
            out.append(
                Reason(Why.LABEL_MISMATCH, {"key": key, "has": have[key], "wanted": pattern})
            )
    return out


def _target_allows(target: Target, is_local: bool) -> bool:
    if target is Target.WORKER:
        return not is_local
    if target is Target.LOCAL:
        return is_local
    return True


def fits(req: Requirement, cap: Capacity) -> bool:
    """Could this worker ever run the job (ignoring whether it is free now)?"""
    if not _target_allows(req.target, cap.is_local):
        return False
    if cap.gpu_count is not None and cap.gpu_count < req.gpu_count:
        return False
    if cap.features is not None and not req.needs <= cap.features:
        return False
    return labels_match(req.labels, cap.labels)


def available(cap: Capacity) -> bool:
    return cap.status is WorkerStatus.IDLE and not cap.spent


def targets_served(cap: Capacity) -> list[str]:
    """The job targets a worker takes: the local runner `local` and `auto` jobs, a remote
    worker `worker` and `auto` jobs."""
    return [t.value for t in Target if _target_allows(t, cap.is_local)]


def can_run_now(req: Requirement, cap: Capacity) -> bool:
    return available(cap) and cap.gpu_count is not None and fits(req, cap)


def choose_worker(req: Requirement, caps: Iterable[Capacity]) -> Capacity | None:
    """The worker to offer the job to: for `auto`, an idle remote worker beats local.

    Among equals, the smallest worker that fits wins, so big machines stay free for big jobs.
    """
    ready = [c for c in caps if can_run_now(req, c)]
    if not ready:
        return None
    return min(ready, key=lambda c: (c.is_local, c.gpu_count or 0, c.worker_id))


def reasons_not_running(req: Requirement, cap: Capacity) -> list[Reason]:
    """Why this worker does not take the job now, as facts an operator can act on."""
    reasons: list[Reason] = []
    if req.target is Target.WORKER and cap.is_local:
        reasons.append(Reason(Why.LOCAL_BUT_TARGET_WORKER))
    elif req.target is Target.LOCAL and not cap.is_local:
        reasons.append(Reason(Why.REMOTE_BUT_TARGET_LOCAL))
    if cap.gpu_count is None:
        reasons.append(Reason(Why.NEVER_REGISTERED))
    elif cap.gpu_count < req.gpu_count:
        reasons.append(Reason(Why.TOO_FEW_GPUS, {"has": cap.gpu_count, "needs": req.gpu_count}))
    if cap.features is not None and Feature.COMMAND in req.needs - cap.features:
        reasons.append(Reason(Why.SIMPLETUNER_ONLY))
    if cap.features is not None and Feature.WORKDIR in req.needs - cap.features:
        reasons.append(Reason(Why.NO_WORKDIR))
    if cap.features is not None and Feature.ENV in req.needs - cap.features:
        reasons.append(Reason(Why.NO_ENV))
    if cap.features is not None and Feature.GANG in req.needs - cap.features:
        reasons.append(Reason(Why.NO_GANG))
    if cap.features is not None and Feature.INPUTS in req.needs - cap.features:
        reasons.append(Reason(Why.NO_INPUTS))
    reasons.extend(label_mismatches(req.labels, cap.labels))
    unavailable = {
        WorkerStatus.BUSY: Reason(Why.BUSY, {"job_id": cap.current_job_id}),
        WorkerStatus.DRAINING: Reason(Why.UNHEALTHY if cap.unhealthy else Why.DRAINING),
        WorkerStatus.OFFLINE: Reason(Why.OFFLINE),
        WorkerStatus.CONNECTING: Reason(Why.CONNECTING),
    }
    if cap.status in unavailable:
        reasons.append(unavailable[cap.status])
    if cap.spent and cap.status is not WorkerStatus.OFFLINE:
        reasons.append(Reason(Why.SPENT))
    return reasons


class WaitCode(StrEnum):
    """What a queued job waits for, as a whole: the code of a `Wait`."""

    ABOUT_TO_BE_OFFERED = "about_to_be_offered"
    ALL_UNAVAILABLE = "all_unavailable"  # some worker fits, and is busy, draining, ...
    NOT_REGISTERED_YET = "not_registered_yet"  # some may fit, once they register
    LOCAL_TOO_SMALL = "local_too_small"  # target local: the local runner has fewer GPUs
    NO_WORKER_MATCHES = "no_worker_matches"
    # The queue policy's (docs/scheduling.md): a limit, fair share, an approval rule.
    FLEET_AT_LIMIT = "fleet_at_limit"
    TEAM_AT_LIMIT = "team_at_limit"
    USER_AT_LIMIT = "user_at_limit"
    BEHIND_FAIR_SHARE = "behind_fair_share"
    AWAITING_APPROVAL = "awaiting_approval"
    SWEEP_AT_MAX_PARALLEL = "sweep_at_max_parallel"  # its sweep's max_parallel run (sweeps.py)
    # A multi-node job: fewer idle workers that may be its nodes than it needs (domain/gang.py)
    WAITING_FOR_NODES = "waiting_for_nodes"
    # No worker takes it now, and a pool launches for it, or cannot yet (domain/capacity.py)
    POOL = "pool"
    DEPENDENCY = "dependency"  # one of its dependencies has not ended (dependencies.py)


@dataclass(frozen=True, slots=True)
class Wait:
    """Why a queued job waits, as a code and its parameters. The words, and the advice in
    each surface's own terms (an endpoint, a button, a command), are `domain.advice`'s."""

    code: WaitCode
    params: Mapping[str, Any] = field(default_factory=dict)


def why_waiting(req: Requirement, caps: list[Capacity]) -> Wait:
    """What a queued job waits for, naming what no registered worker offers."""
    fitting = [c for c in caps if fits(req, c)]
    if any(can_run_now(req, c) for c in fitting):
        return Wait(WaitCode.ABOUT_TO_BE_OFFERED)
    if any(c.gpu_count is not None for c in fitting):
        return Wait(WaitCode.ALL_UNAVAILABLE)
    params: dict[str, Any] = {
        "target": req.target.value,
        "wanted": _wanted(req),
        "gpu_count": req.gpu_count,
    }
    if fitting:  # none registered yet: what they offer is unknown
        return Wait(WaitCode.NOT_REGISTERED_YET, {**params, "names": [c.name for c in fitting]})
    local = [c for c in caps if c.is_local and c.gpu_count is not None]
    if req.target is Target.LOCAL and local and (local[0].gpu_count or 0) < req.gpu_count:
        return Wait(WaitCode.LOCAL_TOO_SMALL, {**params, "local_gpus": local[0].gpu_count})
    return Wait(WaitCode.NO_WORKER_MATCHES, params)


def never_runs(req: Requirement, local: Capacity | None) -> Wait | None:
    """Why no worker will ever come to run this job, or None when one may: a job for the local
    runner asking more GPUs than it registered with (they change only with a restart of the
    orchestrator, so it would wait forever). Any other job may find a worker that registers
    later: `why_waiting` says what it waits for."""
    if req.target is not Target.LOCAL or local is None or local.gpu_count is None:
        return None
    if local.gpu_count >= req.gpu_count:
        return None
    params = {
        "target": req.target.value,
        "wanted": _wanted(req),
        "gpu_count": req.gpu_count,
        "local_gpus": local.gpu_count,
    }
    return Wait(WaitCode.LOCAL_TOO_SMALL, params)


def _wanted(req: Requirement) -> str:
    """What the job asks of a worker, in words: `2 GPUs and team=nlp`."""
    parts = [f"{k}={v}" for k, v in sorted(req.labels.items())]
    if req.gpu_count:
        parts.insert(0, f"{req.gpu_count} GPU{'s' if req.gpu_count != 1 else ''}")
    if Feature.COMMAND in req.needs:
        parts.append("runs commands")
    if Feature.WORKDIR in req.needs:
        parts.append("unpacks a workdir")
    if Feature.ENV in req.needs:
        parts.append("builds an environment")
    if Feature.GANG in req.needs:
        parts.append("runs multi-node jobs")
    if Feature.INPUTS in req.needs:
        parts.append("fetches inputs")
    return " and ".join(parts)
