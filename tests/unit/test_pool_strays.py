"""Which listed instances are strays (domain/pool_strays.py): never one a live launch follows,
never one whose worker is up or runs a job; nothing while a live launch has no id yet. Which
unanswered launches are orphans of a crash."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpufleet.domain.pool_strays import orphaned, strays
from gpufleet.domain.pools import Launch, LaunchState
from gpufleet.domain.records import Worker
from gpufleet.domain.states import WorkerType, derive_worker_status

NOW = datetime(2026, 11, 27, tzinfo=UTC)


def launch(
    instance: str, state: LaunchState, worker_id: str | None = "w_1", pool: str = "pool_1"
) -> Launch:
    return Launch("launch_1", pool, state, instance, worker_id, NOW, None, None, None, None)


def worker(*, offline: bool, busy: bool) -> Worker:
    return Worker(
        id="w_1",
        name="burst-1",
        status=derive_worker_status(
            offline=offline, drained=False, has_job=busy, stream_open=not offline
        ),
        worker_type=WorkerType.EPHEMERAL,
        type_set_by_admin=True,
        labels={},
        admin_labels={"pool": "burst"},
        drained=False,
        is_local=False,
        registered=True,
        gpu_count=1,
        gpu_name=None,
        gpu_vram_gb=None,
        accelerator_type=None,
        capabilities={},
        current_job_id="j_1" if busy else None,
        current_attempt_id="a_1" if busy else None,
        stream_owner=None if offline else "replica:1",
        jobs_run=0,
        created_at=NOW,
        last_heartbeat=NOW,
        connected_at=NOW,
        offline_since=NOW if offline else None,
        token_issued_at=NOW,
    )


def test_an_instance_no_launch_named_is_a_stray() -> None:
    assert strays(["vm-1", "vm-1"], [], {}, unnamed=False) == ["vm-1"]


def test_an_instance_a_live_launch_follows_is_left_to_it() -> None:
    for state in (LaunchState.LAUNCHING, LaunchState.REGISTERED, LaunchState.TERMINATING):
        assert strays(["vm-1"], [launch("vm-1", state)], {}, unnamed=False) == []


def test_an_ended_launchs_instance_is_a_stray_unless_its_worker_is_up_or_busy() -> None:
    ended = [launch("vm-1", LaunchState.TERMINATED)]
    gone = worker(offline=True, busy=False)
    assert strays(["vm-1"], ended, {"w_1": gone}, unnamed=False) == ["vm-1"]
    assert strays(["vm-1"], ended, {}, unnamed=False) == ["vm-1"]  # its worker deleted
    for up in (worker(offline=False, busy=False), worker(offline=True, busy=True)):
        assert strays(["vm-1"], ended, {"w_1": up}, unnamed=False) == []


def test_nothing_is_a_stray_while_a_live_launch_has_no_instance_id_yet() -> None:
    assert strays(["vm-1"], [], {}, unnamed=True) == []


def test_an_instance_another_pools_live_launch_follows_is_never_a_stray() -> None:
    """A provider may list more than its pool's machines (a Slurm user's jobs)."""
    theirs = launch("job-7", LaunchState.REGISTERED, pool="pool_2")
    mine_ended = launch("job-7", LaunchState.TERMINATED, worker_id=None)
    assert strays(["job-7"], [mine_ended, theirs], {}, unnamed=False) == []


def unanswered(state: LaunchState = LaunchState.LAUNCHING, instance: str | None = None) -> Launch:
    return Launch("launch_1", "pool_1", state, instance, "w_1", NOW, None, None, None, None)


def test_a_launch_without_an_answer_is_an_orphan_at_once_where_no_other_replica_calls() -> None:
    assert orphaned(unanswered(), NOW, alone=True, call_bound_s=135)
    assert not orphaned(unanswered(instance="i-1"), NOW, alone=True, call_bound_s=135)
    for state in (LaunchState.REGISTERED, LaunchState.TERMINATING, LaunchState.FAILED):
        assert not orphaned(unanswered(state), NOW, alone=True, call_bound_s=135)


def test_beside_other_replicas_an_orphan_waits_until_any_caller_would_have_given_up() -> None:
    at_bound = NOW + timedelta(seconds=135)
    assert not orphaned(unanswered(), at_bound, alone=False, call_bound_s=135)
    assert orphaned(unanswered(), at_bound + timedelta(seconds=1), alone=False, call_bound_s=135)
