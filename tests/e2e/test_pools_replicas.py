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

from tests.e2e.conftest import ServerProcess, start_replicas, wait_job
from tests.e2e.test_pools_command import WORKER, provider
from tests.e2e.test_pools_local import held_jobs, launches, make_pool, running
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


def calls(state: Path) -> list[tuple[str, str]]:
    """(replica, worker name) of each launch call, in order."""
    lines = (state / "calls").read_text().splitlines()
    return [(tag, name) for tag, name in (line.split() for line in lines)]


def logged(replica: ServerProcess, *words: str) -> bool:
    lines = replica.log_path.read_text().splitlines()
    return any(all(w in line for w in words) for line in lines)


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
    wait_until(
        lambda: running(survivor, jobs) >= 1,
        timeout=60,
        message="a job to run on a launched worker",
    )
    wait_until(
        lambda: logged(leader, f"pool {pool} is at its max of 2"),
        timeout=30,
        message="the leader to find its pool at its max",
    )
    first = calls(state)
    lead, other = leader.data_dir.name, survivor.data_dir.name
    assert [tag for tag, _ in first] == [lead, lead]  # what the jobs need, within max, leader's
    before = {x["id"]: x for x in launches(survivor, pool)}
    assert len(before) == 2 and all(x["instance_id"] for x in before.values())
    assert not logged(survivor, f"pool {pool}")  # the other replica decided nothing

    leader.kill()  # SIGKILL: one launch's worker runs a job, the other's machine comes up
    wait_until(lambda: leaders([survivor]) == [survivor], timeout=15, message="a new leader")
    wait_until(
        lambda: logged(survivor, f"pool {pool} is at its max of 2"),
        timeout=30,
        message="the new leader to count the recorded launches toward the max",
    )
    assert calls(state) == first  # nothing launched again for the launch coming up
    (state / "up").touch()
    wait_until(
        lambda: running(survivor, jobs) == 2,
        timeout=60,
        message="the recorded launch's worker to take a job",
    )
    assert calls(state) == first
    gate.touch()
    done = [wait_job(survivor, j, "completed", "failed", timeout=90) for j in jobs]
    assert [d["status"] for d in done] == ["completed"] * 3, done

    rows = launches(survivor, pool)
    made = calls(state)
    assert [tag for tag, _ in made] == [lead, lead, other]  # the third by the new leader
    assert sorted(name for _, name in made) == sorted(
        f"{pool}-{x['id'].removeprefix('launch_')}" for x in rows
    )  # one call a launch row
    assert {x["worker_id"] for x in rows} == {d["worker_id"] for d in done}
    assert most_at_once(rows) <= 2  # the max held across the two leaders
