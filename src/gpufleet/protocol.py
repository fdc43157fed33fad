"""The wire protocol between the orchestrator and its workers: the events a worker's stream
carries and the API paths a worker calls.

The server builds every event here, and the agent and the benchmark read them by these
names. The shapes are those of the released SimpleTuner agent, which gpufleet's own agent
extends (it names the attempt in every report and heeds it in `job_cancel`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

Event = dict[str, Any]


class EventType(StrEnum):
    CONNECTED = "connected"
    PING = "ping"
    JOB_SUBMIT = "job_submit"
    JOB_CANCEL = "job_cancel"
    JOB_START = "job_start"
    DRAIN = "drain"
    UNDRAIN = "undrain"
    SHUTDOWN = "shutdown"


_TYPES = frozenset(t.value for t in EventType)


def event_type(event: Event) -> EventType | None:
    """The event's type, or None for one of no known type (which a reader ignores)."""
    kind = event.get("type")
    return EventType(kind) if isinstance(kind, str) and kind in _TYPES else None


# ---- API paths ----------------------------------------------------------------------------

WORKER_API = "/api/workers"
REGISTER = f"{WORKER_API}/register"
HEARTBEAT = f"{WORKER_API}/heartbeat"
STREAM = f"{WORKER_API}/stream"
DISCONNECT = f"{WORKER_API}/disconnect"


def job_status_path(job_id: str) -> str:
    return f"{WORKER_API}/job/{job_id}/status"


def job_logs_path(job_id: str) -> str:
    return f"{WORKER_API}/job/{job_id}/logs"


def job_secrets_path(job_id: str) -> str:
    """Where a worker reads the values of the secrets its job's env refers to (`?attempt_id=`)."""
    return f"{WORKER_API}/job/{job_id}/secrets"


def job_upload_path(job_id: str) -> str:
    """Where a worker announces an upload (docs/artifacts.md, Worker API)."""
    return f"{WORKER_API}/job/{job_id}/upload"


def job_upload_send_path(job_id: str, upload_id: str) -> str:
    """Where the bytes of an announced upload go when the orchestrator stores them."""
    return f"{WORKER_API}/job/{job_id}/upload/{upload_id}"


def job_upload_complete_path(job_id: str, upload_id: str) -> str:
    """Where a worker says a presigned upload (to object storage) is done."""
    return f"{WORKER_API}/job/{job_id}/upload/{upload_id}/complete"


def job_workdir_path(job_id: str) -> str:
    """Where a worker downloads the workdir snapshot its job names (docs/jobs.md)."""
    return f"{WORKER_API}/job/{job_id}/workdir"


def job_checkpoints_path(job_id: str) -> str:
    return f"{WORKER_API}/job/{job_id}/checkpoints"


def job_checkpoint_path(job_id: str, checkpoint_id: str) -> str:
    return f"{WORKER_API}/job/{job_id}/checkpoints/{checkpoint_id}"


def job_artifact_path(job_id: str, artifact_id: str) -> str:
    """Where a worker downloads a stored file through the orchestrator (`?attempt_id=`)."""
    return f"{WORKER_API}/job/{job_id}/artifacts/{artifact_id}"


# ---- what a worker says ------------------------------------------------------------------


def heartbeat(
    worker_id: str | None,
    job_id: str | None,
    attempt_id: str | None,
    gpu_stats: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A heartbeat's body: the job the worker runs (none: it says outright that it is idle)
    and, where it samples them, its GPUs' load."""
    body: dict[str, Any] = {
        "worker_id": worker_id,
        "status": "busy" if job_id else "idle",
        "current_job_id": job_id,
        "current_attempt_id": attempt_id,
    }
    if gpu_stats:
        body["gpu_stats"] = gpu_stats
    return body


# ---- what a worker's stream carries -------------------------------------------------------


def connected(worker_id: str) -> Event:
    return {"type": EventType.CONNECTED.value, "worker_id": worker_id}


def ping() -> Event:
    return {"type": EventType.PING.value}


def job_submit(
    job_id: str,
    attempt_id: str,
    config: dict[str, Any],
    gpu_count: int,
    *,
    upload_token: str,
    resume: dict[str, Any] | None = None,
    node: tuple[int, int] | None = None,
    inputs: list[dict[str, Any]] | None = None,
) -> Event:
    """The offer of an attempt.

    `node`: for one node of a multi-node (gang) job, its rank and the node count, sent as
    `node_rank` and `num_nodes` (only gang offers carry them: only workers that say `gang`
    in their features receive one; docs/jobs.md).

    The released SimpleTuner agent copies `upload_endpoint` and `upload_token` straight into
    the trainer's environment: both must be strings (a null crashes the agent's job handler).
    `upload_token` is the attempt's own (domain.secrets.upload_token). `resume`: the
    checkpoint the attempt starts from (docs/artifacts.md: checkpoint_id, name, path, step,
    attempt_id, attempt_number), or None. `env` holds the config's plain values; `secret_env`
    names, by env name, the secrets the worker fetches for the attempt (`job_secrets_path`):
    never a value. `inputs`: the artifacts of its dependencies the worker puts in the job
    folder first (`path`, `size`, `sha256`, `url`, `headers`; docs/jobs.md); only the offers
    of jobs that take some carry it, to workers that say `inputs` in their features.
    """
    env = config.get("env") or {}
    extra: dict[str, Any] = {} if node is None else {"node_rank": node[0], "num_nodes": node[1]}
    extra |= {} if inputs is None else {"inputs": inputs}
    return extra | {
        "type": EventType.JOB_SUBMIT.value,
        "job_id": job_id,
        "attempt_id": attempt_id,
        "config": config,
        "command": config.get("command"),
        "env": {k: v for k, v in env.items() if isinstance(v, str)},
        "secret_env": {k: v["secret"] for k, v in env.items() if isinstance(v, dict)},
        "gpu_count": gpu_count,
        "timeout_s": config.get("timeout_s"),
        "dataloader": None,
        "upload_endpoint": job_upload_path(job_id),
        "upload_token": upload_token,
        "resume": resume,
    }


def job_cancel(
    job_id: str,
    reason: str,
    attempt_id: str | None = None,
    *,
    preempt: bool = False,
    grace_s: float | None = None,
) -> Event:
    """Stop the job; with `attempt_id`, only that attempt of it (the SimpleTuner agent stops
    whatever it runs, whichever job or attempt the cancel names). With `preempt` (the queue
    policy takes its GPUs back, docs/scheduling.md): checkpoint, `grace_s` seconds for it,
    then stop and report `preempted`; an agent that knows no `preempt` just stops it."""
    event: Event = {
        "type": EventType.JOB_CANCEL.value,
        "job_id": job_id,
        "attempt_id": attempt_id,
        "reason": reason,
    }
    if preempt:
        event["preempt"] = True
        event["grace_s"] = grace_s
    return event


def job_start(
    job_id: str,
    attempt_id: str,
    node_rank: int,
    master_addr: str,
    master_port: int,
    node_addrs: list[str],
) -> Event:
    """Start one node of a multi-node attempt: every node acknowledged its offer (the
    two-phase start, docs/protocol.md). The rendezvous: rank 0's address and the free port
    its worker chose, this node's rank, and every node's address in rank order."""
    return {
        "type": EventType.JOB_START.value,
        "job_id": job_id,
        "attempt_id": attempt_id,
        "node_rank": node_rank,
        "num_nodes": len(node_addrs),
        "master_addr": master_addr,
        "master_port": master_port,
        "node_addrs": node_addrs,
    }


def drain(reason: str) -> Event:
    return {"type": EventType.DRAIN.value, "reason": reason}


def undrain() -> Event:
    return {"type": EventType.UNDRAIN.value}


def shutdown(reason: str) -> Event:
    return {"type": EventType.SHUTDOWN.value, "reason": reason}
