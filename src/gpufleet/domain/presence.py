"""What an operator is told about a worker's connection: its status in words, and whether
its uptime runs. Decided here once; the API's worker view carries it to the UI and the CLI.

The status (`domain.states.WorkerStatus`) is what the API filters and counts by, and what
SimpleTuner's shapes name; it says `connecting` for every worker without an open stream.
That is three different things to an operator, told apart by facts the worker record keeps.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from gpufleet.domain.records import Worker
from gpufleet.domain.states import WorkerStatus


class Presence(StrEnum):
    NEVER_CONNECTED = "never_connected"  # no agent has used its token yet
    TOKEN_ROTATED = "token_rotated"  # its token changed since it last spoke
    DISCONNECTED = "disconnected"  # its stream ended (the process exited?): offline soon
    CONNECTING = "connecting"  # registered, its stream not open yet
    IDLE = "idle"
    BUSY = "busy"
    DRAINING = "draining"
    OFFLINE = "offline"


PRESENCE_TEXT: dict[Presence, str] = {
    Presence.NEVER_CONNECTED: "never connected",
    Presence.TOKEN_ROTATED: "token rotated, waiting for the worker",
    Presence.DISCONNECTED: "disconnected, waiting for it to reconnect",
    Presence.CONNECTING: "connecting",
    Presence.IDLE: "idle",
    Presence.BUSY: "busy",
    Presence.DRAINING: "draining",
    Presence.OFFLINE: "offline",
}


def _last_heard(worker: Worker) -> datetime | None:
    times = [t for t in (worker.connected_at, worker.last_heartbeat) if t is not None]
    return max(times) if times else None


def token_rotated_since_heard(worker: Worker) -> bool:
    """Whether its live token was issued after the worker last spoke: whatever runs there
    still holds the old token, and nothing will come until it is restarted with the new one."""
    if worker.token_issued_at is None:
        return False
    heard = _last_heard(worker)
    return heard is not None and worker.token_issued_at > heard


def presence(worker: Worker) -> Presence:
    if not worker.ever_connected:
        return Presence.NEVER_CONNECTED
    streaming = worker.stream_owner is not None and not worker.offline
    if not streaming and token_rotated_since_heard(worker):
        return Presence.TOKEN_ROTATED
    if worker.status is WorkerStatus.CONNECTING:
        return Presence.DISCONNECTED if worker.connected_at is not None else Presence.CONNECTING
    return Presence(worker.status.value)


def up_since(worker: Worker) -> datetime | None:
    """When its open stream opened: its uptime counts from there, and only while it is open."""
    if worker.stream_owner is None or worker.offline:
        return None
    return worker.connected_at
