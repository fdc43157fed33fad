"""What an operator is told about a worker's connection: its status in words, and whether
its uptime runs. Decided here once; the API's worker view carries it to the UI and the CLI.

The status (`domain.states.WorkerStatus`) is what the API filters and counts by, and what
SimpleTuner's shapes name; it says `connecting` for every worker without an open stream.
That is three different things to an operator, told apart by facts the worker record keeps.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
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
    UNHEALTHY = "unhealthy"  # its preflight fails: offered nothing until it passes
    OFFLINE = "offline"


PRESENCE_TEXT: dict[Presence, str] = {
    Presence.NEVER_CONNECTED: "never connected",
    Presence.TOKEN_ROTATED: "token rotated, waiting for the worker",
    Presence.DISCONNECTED: "disconnected, waiting for it to reconnect",
    Presence.CONNECTING: "connecting",
    Presence.IDLE: "idle",
    Presence.BUSY: "busy",
    Presence.DRAINING: "draining",
    Presence.UNHEALTHY: "unhealthy: its preflight fails",
    Presence.OFFLINE: "offline",
}

# One colour a word, wherever it shows (a row's badge, the count chips): the status whose
# colour each presence wears: a worker never connected, or gone quiet, is awaited (not offline).
PRESENCE_TONE: dict[Presence, WorkerStatus] = {
    Presence.NEVER_CONNECTED: WorkerStatus.CONNECTING,
    Presence.TOKEN_ROTATED: WorkerStatus.CONNECTING,
    Presence.DISCONNECTED: WorkerStatus.CONNECTING,
    Presence.CONNECTING: WorkerStatus.CONNECTING,
    Presence.IDLE: WorkerStatus.IDLE,
    Presence.BUSY: WorkerStatus.BUSY,
    Presence.DRAINING: WorkerStatus.DRAINING,
    Presence.UNHEALTHY: WorkerStatus.DRAINING,
    Presence.OFFLINE: WorkerStatus.OFFLINE,
}


def presence_tones() -> dict[str, str]:
    """Each word's colour by name, for the counts (`PRESENCE_TONE`)."""
    return {seen.value: tone.value for seen, tone in PRESENCE_TONE.items()}


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


def _stream_gone(worker: Worker) -> bool:
    """It had a stream, and has none now, though it is not offline yet: whatever it runs
    hears no offer and no cancel, and it may well be dead (its process killed with its
    connection) until the heartbeat timeout says so."""
    return worker.stream_owner is None and worker.connected_at is not None and not worker.offline


def presence(worker: Worker) -> Presence:
    if not worker.ever_connected:
        return Presence.NEVER_CONNECTED
    streaming = worker.stream_owner is not None and not worker.offline
    if not streaming and token_rotated_since_heard(worker):
        return Presence.TOKEN_ROTATED
    if _stream_gone(worker):  # busy or draining too: not "busy" while nothing hears it
        return Presence.DISCONNECTED
    if worker.status is WorkerStatus.CONNECTING:
        return Presence.CONNECTING
    if worker.preflight_error is not None and not worker.drained and not worker.offline:
        return Presence.UNHEALTHY  # status `draining`, as the dispatcher sees it
    return Presence(worker.status.value)


def tally(workers: Iterable[Worker]) -> dict[str, int]:
    """How many workers each word describes (every word, 0 included): the count chips and
    the CLI's summary say what the rows say."""
    counts = Counter(presence(w) for w in workers)
    return {p.value: counts.get(p, 0) for p in Presence}


def offline_due(worker: Worker, heartbeat_timeout: timedelta) -> datetime | None:
    """When the health sweep marks a worker whose stream is gone offline (its job, if any,
    requeued), unless it is heard from first: its last sign of life plus the timeout. None
    while its stream is open, or once it is offline."""
    heard = _last_heard(worker)
    if not _stream_gone(worker) or heard is None:
        return None
    return heard + heartbeat_timeout


def requeue_due(worker: Worker, heartbeat_timeout: timedelta) -> datetime | None:
    """When the job a worker holds is requeued if the worker stays silent (`offline_due`);
    None when it holds none, or is still connected."""
    if worker.current_attempt_id is None:
        return None
    return offline_due(worker, heartbeat_timeout)


def up_since(worker: Worker) -> datetime | None:
    """When its open stream opened: its uptime counts from there, and only while it is open."""
    if worker.stream_owner is None or worker.offline:
        return None
    return worker.connected_at


@dataclass(frozen=True, slots=True)
class Unheard:
    """A live attempt whose worker's stream is gone: what the job's page says of it."""

    worker_id: str
    presence: Presence
    text: str
    requeue_due: datetime | None  # when its job is requeued unless the worker is heard


def attempt_unheard(
    worker: Worker | None, attempt_id: str | None, heartbeat_timeout: timedelta
) -> Unheard | None:
    """Whether the worker running this attempt has lost its stream (None: it has not, or
    it no longer holds the attempt)."""
    if worker is None or attempt_id is None or worker.current_attempt_id != attempt_id:
        return None
    seen = presence(worker)
    if seen not in (Presence.DISCONNECTED, Presence.TOKEN_ROTATED) or worker.offline:
        return None
    return Unheard(worker.id, seen, PRESENCE_TEXT[seen], requeue_due(worker, heartbeat_timeout))
