"""Pools beside replicas (#36): two real `gpufleet server` replicas on one PostgreSQL
database, a `command` pool whose launch script notes which replica called it (a variable only
that replica's environment has, passed on to the command) and starts a real worker that calls
the replica that lives on. Only the leader launches, exactly what the jobs need within the
pool's max; SIGKILLed, the other replica leads on: it counts the launches recorded (one still
coming up) toward the max, launches nothing again for them, and launches for what is left."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ServerProcess, process_alive, start_replicas, wait_job
from tests.e2e.local_workers import hold, local_env, release, starts
from tests.e2e.test_pools_command import WORKER, provider
from tests.e2e.test_pools_local import held_jobs, launches, make_pool, pid_of, running
from tests.e2e.test_replicas import leaders
from tests.waiting import wait_until

pytestmark = pytest.mark.postgres

TAG = "GF_TEST_REPLICA"  # in one replica's environment only
# The second call's machine waits for the file `up` before its worker starts.
LAUNCH = f"""\
    set -eu
    echo "${TAG} $GPUFLEET_WORKER_NAME" >> "$1/calls"
    n="$(wc -l < "$1/calls")"
    (
        if [ "$n" -eq 2 ]; then while [ ! -e "$1/up" ]; do sleep 0.05; done; fi
        GPUFLEET_ORCHESTRATOR_URL="$(cat "$1/urls")" exec {WORKER}
    ) >worker.log 2>&1 </dev/null &
    echo "$!" > "$1/cmd-$!.pid"
    echo "cmd-$!"
    """
FLAGS = {"pool-interval": 0.3, "pool-call-timeout": 60}


@pytest.fixture
def replicas(tmp_path: Path, pg_database: str) -> Iterator[list[ServerProcess]]:
    def env(n: int) -> dict[str, str]:
        return {**os.environ, TAG: f"replica-{n}"}

    started = start_replicas(tmp_path, pg_database, 2, env=env, **FLAGS)
    yield started
    for replica in started:
        replica.kill(signal.SIGTERM)


@pytest.fixture
def local_replicas(
    tmp_path: Path, pg_database: str, local_machines: Path
) -> Iterator[list[ServerProcess]]:
    """Two replicas whose local workers note their starts in `local_machines`."""
    started = start_replicas(
        tmp_path, pg_database, 2, env=lambda _: local_env(local_machines), **FLAGS
    )
    yield started
    for replica in started:
        replica.kill(signal.SIGTERM)


def calls(state: Path) -> list[tuple[str, str]]:
    """(replica, worker name) of each launch call, in order."""
    lines = (state / "calls").read_text().splitlines()
    return [(tag, name) for tag, name in (line.split() for line in lines)]


def logged(replica: ServerProcess, *words: str) -> bool:
    lines = replica.log_path.read_text().splitlines()
    return any(all(w in line for w in words) for line in lines)


def at_max(leader: ServerProcess, other: ServerProcess, pool: str, jobs: list[str]) -> None:
    """Once a job runs on a launched worker and the leader finds the pool at its max."""
    wait_until(
        lambda: running(other, jobs) >= 1,
        timeout=60,
        message="a job to run on a launched worker",
    )
    wait_until(
        lambda: logged(leader, f"pool {pool} is at its max of 2"),
        timeout=30,
        message="the leader to find its pool at its max",
    )


def leads_at_max(survivor: ServerProcess, pool: str) -> None:
    """Once the replica left leads and counts the recorded launches toward the pool's max."""
    wait_until(lambda: leaders([survivor]) == [survivor], timeout=15, message="a new leader")
    wait_until(
        lambda: logged(survivor, f"pool {pool} is at its max of 2"),
        timeout=30,
        message="the new leader to count the recorded launches toward the max",
    )


def both_run(survivor: ServerProcess, jobs: list[str]) -> None:
    wait_until(
        lambda: running(survivor, jobs) == 2,
        timeout=60,
        message="the recorded launch's worker to take a job",
    )


def all_complete(survivor: ServerProcess, jobs: list[str], gate: Path) -> list[dict[str, Any]]:
    """The held jobs let go, once all completed: their records."""
    gate.touch()
    done = [wait_job(survivor, j, "completed", "failed", timeout=90) for j in jobs]
    assert [d["status"] for d in done] == ["completed"] * 3, done
    return done


def ended(rows: list[dict[str, Any]]) -> bool:
    return all(x["state"] == "terminated" for x in rows)


def most_at_once(rows: list[dict[str, Any]]) -> int:
    """The most launches live at one time (from recorded to ended)."""
    spans = [
        (
            datetime.fromisoformat(x["created_at"]),
            x["ended_at"] and datetime.fromisoformat(x["ended_at"]),
        )
        for x in rows
    ]
    return max(
        sum(1 for start, end in spans if start <= at and (end is None or at < end))
        for at, _ in spans
    )


def test_only_the_leader_launches_and_the_next_leader_keeps_the_max_launching_nothing_twice(
    replicas: list[ServerProcess], machines: Path
) -> None:
    state = machines
    wait_until(lambda: len(leaders(replicas)) == 1, timeout=15, message="one replica to lead")
    [leader] = leaders(replicas)
    [survivor] = [r for r in replicas if r is not leader]
    (state / "urls").write_text(f"{survivor.url},{leader.url}")  # the machines' workers call
    pool = make_pool(  # through the replica that does not lead: the pool is the database's
        survivor, provider=provider(state, {"launch.sh": LAUNCH}), launch_timeout_s=3600
    )
    jobs = held_jobs(survivor, pool, gate := state / "go")
    at_max(leader, survivor, pool, jobs)
    first = calls(state)
    lead, other = leader.data_dir.name, survivor.data_dir.name
    assert [tag for tag, _ in first] == [lead, lead]  # what the jobs need, within max, leader's
    before = {x["id"]: x for x in launches(survivor, pool)}
    assert len(before) == 2 and all(x["instance_id"] for x in before.values())
    assert not logged(survivor, f"pool {pool}")  # the other replica decided nothing

    leader.kill()  # SIGKILL: one launch's worker runs a job, the other's machine comes up
    leads_at_max(survivor, pool)
    assert calls(state) == first  # nothing launched again for the launch coming up
    (state / "up").touch()
    both_run(survivor, jobs)
    assert calls(state) == first
    done = all_complete(survivor, jobs, gate)

    rows = launches(survivor, pool)
    made = calls(state)
    assert [tag for tag, _ in made] == [lead, lead, other]  # the third by the new leader
    assert sorted(name for _, name in made) == sorted(
        f"{pool}-{x['id'].removeprefix('launch_')}" for x in rows
    )  # one call a launch row
    assert {x["worker_id"] for x in rows} == {d["worker_id"] for d in done}
    assert most_at_once(rows) <= 2  # the max held across the two leaders


def test_with_local_workers_only_the_leaders_process_starts_them_and_none_twice(
    local_replicas: list[ServerProcess], local_machines: Path
) -> None:
    """The `local` provider: each worker is a child of the leader's server process. Its
    workers call the replica that lives on (`urls`); SIGKILLed, they live on as processes of
    their own, which the next leader follows and ends once their jobs are done."""
    replicas, state = local_replicas, local_machines
    wait_until(lambda: len(leaders(replicas)) == 1, timeout=15, message="one replica to lead")
    [leader] = leaders(replicas)
    [survivor] = [r for r in replicas if r is not leader]
    assert leader.proc is not None and survivor.proc is not None
    lead, other = leader.proc.pid, survivor.proc.pid
    (state / "urls").write_text(f"{survivor.url},{leader.url}")
    hold(state, 2)  # the second worker comes up once the leader is gone
    pool = make_pool(survivor, launch_timeout_s=3600)
    jobs = held_jobs(survivor, pool, gate := state / "go")
    at_max(leader, survivor, pool, jobs)
    first = starts(state)
    assert [s.parent for s in first] == [lead, lead]  # the leader's children, within max
    before = launches(survivor, pool)
    assert sorted(pid_of(x) for x in before) == sorted(s.pid for s in first)
    assert not logged(survivor, f"pool {pool}")

    leader.kill()  # SIGKILL: its two workers live on, one running a job, one coming up
    assert all(process_alive(s.pid) for s in first)
    leads_at_max(survivor, pool)
    assert starts(state) == first  # nothing started again for the worker coming up
    release(state)
    both_run(survivor, jobs)
    assert starts(state) == first
    done = all_complete(survivor, jobs, gate)

    made = starts(state)
    assert [s.parent for s in made] == [lead, lead, other]  # the third by the new leader
    rows = wait_until(  # each ephemeral worker gone after its job, its launch ended
        lambda: (xs := launches(survivor, pool)) and ended(xs) and xs,
        timeout=30,
        message="the launches to end",
    )
    assert sorted(s.name for s in made) == sorted(
        f"{pool}-{x['id'].removeprefix('launch_')}" for x in rows
    )  # one worker started a launch row
    assert {x["worker_id"] for x in rows} == {d["worker_id"] for d in done}
    assert most_at_once(rows) <= 2
    # The killed leader's workers too: none left running.
    wait_until(
        lambda: not any(process_alive(s.pid) for s in made),
        timeout=15,
        message="the local workers to exit",
    )
