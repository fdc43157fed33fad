"""What an operator is told about a worker's connection (domain.presence), over every
combination of the facts a worker record keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain.presence import PRESENCE_TEXT, Presence, presence, up_since
from gpufleet.domain.records import Worker
from gpufleet.domain.states import WorkerType, derive_worker_status

T0 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)
times = st.one_of(st.none(), st.integers(0, 100).map(lambda s: T0 + timedelta(seconds=s)))


@st.composite
def workers(draw: st.DrawFn) -> Worker:
    offline = draw(st.booleans())
    drained = draw(st.booleans())
    has_job = draw(st.booleans())
    stream = draw(st.sampled_from([None, "replica:1"]))
    registered = draw(st.booleans())
    return Worker(
        id="w_1",
        name="w",
        status=derive_worker_status(
            offline=offline, drained=drained, has_job=has_job, stream_open=stream is not None
        ),
        worker_type=WorkerType.PERSISTENT,
        type_set_by_admin=True,
        labels={},
        admin_labels={},
        drained=drained,
        is_local=False,
        registered=registered,
        gpu_count=0,
        gpu_name=None,
        gpu_vram_gb=None,
        accelerator_type=None,
        capabilities={},
        current_job_id="j_1" if has_job else None,
        current_attempt_id="a_1" if has_job else None,
        stream_owner=stream,
        jobs_run=0,
        created_at=T0,
        last_heartbeat=draw(times),
        connected_at=draw(times),
        offline_since=T0 if offline else None,
        token_issued_at=draw(times),
    )


@given(workers())
def test_every_worker_is_told_in_words(worker: Worker) -> None:
    assert PRESENCE_TEXT[presence(worker)]


@given(workers())
def test_only_a_worker_with_an_open_stream_has_an_uptime(worker: Worker) -> None:
    running = up_since(worker)

    if worker.stream_owner is None or worker.offline:
        assert running is None
    else:
        assert running == worker.connected_at


@given(workers())
def test_a_worker_no_agent_ever_used_says_never_connected_whatever_its_status(
    worker: Worker,
) -> None:
    if not worker.ever_connected:
        assert presence(worker) is Presence.NEVER_CONNECTED
    else:
        assert presence(worker) is not Presence.NEVER_CONNECTED


@given(workers())
def test_token_rotated_only_when_issued_after_the_worker_last_spoke_and_not_streaming(
    worker: Worker,
) -> None:
    heard = [t for t in (worker.connected_at, worker.last_heartbeat) if t is not None]
    rotated = (
        worker.ever_connected
        and worker.token_issued_at is not None
        and bool(heard)
        and worker.token_issued_at > max(heard)
        and (worker.stream_owner is None or worker.offline)
    )

    assert (presence(worker) is Presence.TOKEN_ROTATED) == rotated


@given(workers())
def test_connecting_is_said_only_of_a_registered_worker_whose_stream_never_opened(
    worker: Worker,
) -> None:
    if presence(worker) is Presence.CONNECTING:
        assert worker.registered and worker.connected_at is None and worker.stream_owner is None
