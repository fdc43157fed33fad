"""An orchestrator SIGKILLed mid-launch launches nothing twice (#36): a real `gpufleet server`
on a real SQLite file (the launch cut off before its answer alone on PostgreSQL too), a
`command` pool whose launch script (its
first call held) starts a machine (a process, a pid file each) and is then cut off.

- Before its answer (no instance id stored): the restarted server ends the launch at once
  (its error says why, its worker's token revoked), terminates the machine the list shows
  as a stray, and launches afresh for the job, which completes: two calls, one a launch row.
- After its answer (the instance id stored, the worker still coming up): the restarted server
  follows the launch; its worker registers with its token and runs the job: one call.
- With the `local` provider, whose launch is a Popen answered at once (no instance id left
  unstored to kill into without a hook in the server), the kill lands after the answer: the
  worker process, started and held before it calls home, outlives it and runs the job."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gpufleet.domain.pool_strays import INTERRUPTED
from tests.e2e.conftest import ServerProcess, process_alive, submit_job, wait_job
from tests.e2e.local_workers import hold, local_env, release, starts
from tests.e2e.test_pools_command import WORKER, provider
from tests.e2e.test_pools_local import launches, make_pool, pid_of
from tests.waiting import wait_until

# The first call is held: "hang" starts a machine, says so and waits for the gate without
# answering; "late" answers at once, its worker waiting for the gate before it starts.
LAUNCH = f"""\
    set -eu
    echo "$GPUFLEET_WORKER_NAME" >> "$1/calls"
    first=no; [ "$(wc -l < "$1/calls")" -eq 1 ] && first=yes
    if [ "$first" = yes ] && [ "$(cat "$1/mode")" = hang ]; then
        sleep 600 </dev/null >/dev/null 2>&1 &
        echo "$!" > "$1/cmd-$!.pid"
        echo "$GPUFLEET_WORKER_TOKEN" > "$1/token"
        touch "$1/started"
        while [ ! -e "$1/gate" ]; do sleep 0.05; done
        echo "cmd-$!"
        exit 0
    fi
    (
        if [ "$first" = yes ]; then while [ ! -e "$1/gate" ]; do sleep 0.05; done; fi
        exec {WORKER}
    ) >worker.log 2>&1 </dev/null &
    echo "$!" > "$1/cmd-$!.pid"
    echo "cmd-$!"
    """
FLAGS = {"pool-interval": 0.3, "pool-call-timeout": 60}


# PostgreSQL decides one thing here: whether a restarted orchestrator is alone (no other
# replica can still be calling the provider: the killed one's session ended), which only a
# launch cut off before its answer asks. A launch with its instance id stored is followed
# alike on either backend, from the same rows: those run on SQLite alone.
DATABASES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def alone(
    request: pytest.FixtureRequest, tmp_path: Path, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """One orchestrator on SQLite, or alone on PostgreSQL where the test parametrises its
    fixture (indirect) with "postgres"."""
    backend = getattr(request, "param", "sqlite")
    url = request.getfixturevalue("pg_database") if backend == "postgres" else None
    proc = ServerProcess(tmp_path / "data", url, env=env, **FLAGS)
    proc.start()
    yield proc
    proc.kill()


@pytest.fixture
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServerProcess]:
    yield from alone(request, tmp_path)


@pytest.fixture
def local_server(
    request: pytest.FixtureRequest, tmp_path: Path, local_machines: Path
) -> Iterator[ServerProcess]:
    """`alone`, its local workers noting their starts in `local_machines`."""
    yield from alone(request, tmp_path, local_env(local_machines))


def crash_pool(server: ServerProcess, state: Path, mode: str) -> str:
    (state / "mode").write_text(mode)
    # Never ended by its launch timeout here: only by what a crash leaves.
    return make_pool(server, provider=provider(state, {"launch.sh": LAUNCH}), launch_timeout_s=3600)


def calls(state: Path) -> list[str]:
    return (state / "calls").read_text().split()


def one_job(server: ServerProcess, pool: str) -> str:
    return submit_job(server, {"pool": pool}, [sys.executable, "-c", "pass"], gpu_count=0)


@pytest.mark.parametrize("server", DATABASES, indirect=True)
def test_killed_before_the_providers_answer_the_launch_is_ended_and_made_afresh(
    server: ServerProcess, machines: Path
) -> None:
    state = machines
    pool = crash_pool(server, state, "hang")
    job = one_job(server, pool)
    wait_until((state / "started").exists, timeout=30, message="the launch command to start")
    [cut] = launches(server, pool)
    assert (cut["state"], cut["instance_id"]) == ("launching", None)
    machine = int(next(state.glob("cmd-*.pid")).read_text())
    server.kill()  # SIGKILL, the launch command still running
    assert calls(state) == [f"{pool}-{cut['id'].removeprefix('launch_')}"]

    server.start()  # the same data
    ended = wait_until(
        lambda: (x := launches(server, pool)[-1])["state"] == "terminated" and x,
        timeout=30,
        message="the cut-off launch to end",
    )
    assert (ended["id"], ended["error"], ended["registered_at"]) == (cut["id"], INTERRUPTED, None)
    token = (state / "token").read_text().strip()
    answer = httpx.post(
        f"{server.url}/api/workers/register",
        json={"name": "stolen"},
        headers={"X-Worker-Token": token},
    )
    assert answer.status_code == 401, answer.text  # its worker's token revoked
    wait_until(lambda: not process_alive(machine), timeout=30, message="the stray to stop")
    assert f"cmd-{machine}" in (state / "terminated").read_text().split()

    done = wait_job(server, job, "completed", "failed", timeout=60)
    assert done["status"] == "completed", done
    xs = launches(server, pool)
    assert len(xs) == 2 and len(calls(state)) == 2  # one call a launch row
    [fresh] = [x for x in xs if x["id"] != cut["id"]]
    assert fresh["worker_id"] == done["worker_id"] and fresh["error"] is None


def test_killed_after_the_providers_answer_the_launch_is_followed_and_its_worker_runs_the_job(
    server: ServerProcess, machines: Path
) -> None:
    state = machines
    pool = crash_pool(server, state, "late")
    job = one_job(server, pool)
    answered = wait_until(
        lambda: (xs := launches(server, pool)) and xs[0]["instance_id"] and xs[0],
        timeout=30,
        message="the launch's instance id to be stored",
    )
    server.kill()  # its worker not started yet
    server.start()
    (state / "gate").touch()  # the machine comes up: its worker calls the restarted server
    done = wait_job(server, job, "completed", "failed", timeout=60)
    assert done["status"] == "completed", done
    # The loop's next pass marks it registered: the job may end before that pass.
    [launch] = wait_until(
        lambda: (xs := launches(server, pool)) and xs[0]["registered_at"] and xs,
        timeout=15,
        message="the launch to be marked registered",
    )
    assert (launch["id"], launch["worker_id"]) == (answered["id"], done["worker_id"])
    assert launch["error"] is None
    assert len(calls(state)) == 1


def test_a_local_worker_started_before_the_kill_is_followed_and_runs_the_job(
    local_server: ServerProcess, local_machines: Path
) -> None:
    """The `local` provider's launch is one quick Popen, its answer stored at once: the kill
    lands after the answer, the worker process started and still coming up (held before it
    calls home). It outlives the SIGKILL; the restarted server follows its launch."""
    server, state = local_server, local_machines
    hold(state, 1)
    pool = make_pool(server, launch_timeout_s=3600)
    job = one_job(server, pool)
    answered = wait_until(
        lambda: (xs := launches(server, pool)) and xs[0]["instance_id"] and xs[0],
        timeout=30,
        message="the launch's instance id to be stored",
    )
    [start] = wait_until(lambda: starts(state), timeout=30, message="the worker to start")
    assert server.proc is not None
    assert (start.pid, start.parent) == (pid_of(answered), server.proc.pid)
    server.kill()  # SIGKILL: its worker lives on, not registered yet
    assert process_alive(start.pid)
    server.start()
    release(state)  # the worker comes up and calls the restarted server
    done = wait_job(server, job, "completed", "failed", timeout=60)
    assert done["status"] == "completed", done
    [launch] = wait_until(  # a pass may come after the ephemeral worker ran its job
        lambda: (xs := launches(server, pool))[0]["registered_at"] and xs,
        timeout=15,
        message="the launch to be marked registered",
    )
    assert (launch["id"], launch["worker_id"]) == (answered["id"], done["worker_id"])
    assert launch["error"] is None
    assert starts(state) == [start]  # nothing launched again
