"""Worker pools with the `local` provider against a real orchestrator (#36): the leader
launches `gpufleet worker` processes for waiting jobs, follows them, and ends their launches;
a launch whose worker never calls home is terminated and backed off; an idle persistent
worker above the pool's min is drained and terminated, its token refused."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import (
    ServerProcess,
    create_pool,
    pool_launches,
    process_alive,
    submit_job,
    wait_job,
)
from tests.waiting import wait_until

FLAGS = {"pool-interval": 0.3}
# On the workers' PYTHONPATH: each leaves its token in its work folder (its sitecustomize).
TOKEN_SPY = Path(__file__).parent / "token_spy"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    path = os.pathsep.join(filter(None, [str(TOKEN_SPY), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    proc = ServerProcess(tmp_path_factory.mktemp("pools-local"), None, env=env, **FLAGS)
    proc.start()
    yield proc
    proc.kill(15)


def make_pool(server: ServerProcess, **fields: Any) -> str:
    """A pool (`local` unless `fields` name its provider) of no GPUs, max 2, labelled
    pool=<its name>."""
    return create_pool(server, "burst", fields.pop("provider", {"type": "local"}), **fields)


launches = pool_launches


def held_jobs(server: ServerProcess, pool: str, gate: Path, count: int = 3) -> list[str]:
    """Jobs for the pool's workers, each holding its worker until the file `gate` appears."""
    hold = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
    return [
        submit_job(server, {"pool": pool}, [sys.executable, "-c", hold], gpu_count=0)
        for _ in range(count)
    ]


def running(server: ServerProcess, jobs: list[str]) -> int:
    """How many of the jobs run now."""
    states = [wait_job(server, j, "queued", "offered", "running")["status"] for j in jobs]
    return states.count("running")


def pid_of(launch: dict[str, Any]) -> int:
    return int(launch["instance_id"].split("-")[1])


def test_a_launch_that_never_registers_is_terminated_and_backed_off(
    server: ServerProcess,
) -> None:
    unreachable = server
    # Its workers cannot call home: TOKEN_SPY tells those of an `unreachable-…` pool to trust
    # a CA file that is not one, so each exits before it registers.
    pool = create_pool(server, "unreachable", {"type": "local"})
    submit_job(unreachable, {"pool": pool}, [sys.executable, "-c", "pass"], gpu_count=0)
    # Its worker gone (its words in its log), the timeout comes down to a second: the next
    # pass ends the launch, not a fixed wait for a worker start on a loaded machine (#32).
    wait_until(
        lambda: (
            (xs := launches(unreachable, pool))
            and xs[0]["instance_id"] is not None
            and not process_alive(pid_of(xs[0]))
        ),
        timeout=30,
        message="the launched worker to exit unregistered",
    )
    with unreachable.admin() as admin:
        resp = admin.patch(f"/api/admin/pools/{pool}", json={"launch_timeout_s": 1})
    assert resp.status_code == 200, resp.text
    failed = wait_until(
        lambda: (xs := launches(unreachable, pool)) and xs[0]["state"] == "terminated" and xs[0],
        timeout=30,
        message="the launch to time out and be terminated",
    )
    assert failed["registered_at"] is None
    assert failed["error"] == "its worker did not register in 1 s"
    assert "NO_CERTIFICATE" in failed["stderr"], failed  # the worker's words, kept
    assert not process_alive(pid_of(failed))
    with unreachable.admin() as admin:
        worker = admin.get(f"/api/admin/workers/{failed['worker_id']}").json()
    assert worker["connected_at"] is None
    # Backed off (30 s after a first failure): the decision says so, and launches nothing.
    wait_until(
        lambda: f"the last launch in pool {pool} failed" in unreachable.log_path.read_text(),
        timeout=10,
        message="the pool to back off",
    )
    assert len(launches(unreachable, pool)) == 1


def test_ephemeral_workers_are_launched_for_waiting_jobs_within_the_pools_max(
    server: ServerProcess,
) -> None:
    pool = make_pool(server)
    # Each job holds its worker until a file appears: the third waits for a worker the
    # first two leave room for, never a third at once.
    jobs = held_jobs(server, pool, gate := Path(server.data_dir) / f"{pool}.go")
    wait_until(
        lambda: running(server, jobs) == 2,
        timeout=60,
        message="two of the three jobs to run on launched workers",
    )
    live = [x for x in launches(server, pool) if x["state"] in ("launching", "registered")]
    assert len(live) == 2, live  # the third job waits: the pool is at its max
    gate.touch()
    ended = one_job_each_then_ended(server, pool, jobs)
    assert not any(process_alive(pid_of(x)) for x in ended)


def one_job_each_then_ended(
    server: ServerProcess, pool: str, jobs: list[str]
) -> list[dict[str, Any]]:
    """The jobs completed, each on an ephemeral worker of its own whose launch then ended;
    those launches."""
    done = [wait_job(server, j, "completed", "failed", timeout=60) for j in jobs]
    assert [d["status"] for d in done] == ["completed"] * 3, done
    assert len({d["worker_id"] for d in done}) == 3  # each ephemeral worker ran one job
    ended: list[dict[str, Any]] = wait_until(
        lambda: (
            len(xs := launches(server, pool)) == 3
            and all(x["state"] == "terminated" for x in xs)
            and xs
        ),
        timeout=30,
        message="the three launches to end once their workers left",
    )
    assert {x["worker_id"] for x in ended} == {d["worker_id"] for d in done}
    assert all(x["registered_at"] is not None and x["error"] is None for x in ended)
    return ended


def test_an_idle_persistent_worker_above_min_is_drained_terminated_and_its_token_refused(
    server: ServerProcess,
) -> None:
    pool = make_pool(server, worker_type="persistent", min_workers=1, idle_timeout_s=1)
    try:
        jobs = held_jobs(server, pool, gate := Path(server.data_dir) / f"{pool}.go", count=2)
        wait_until(
            lambda: running(server, jobs) == 2,
            timeout=60,
            message="both jobs to run, each on a worker launched for it",
        )
        # A job may run before the loop's next pass marks its launch registered.
        up = wait_until(
            lambda: (
                (xs := launches(server, pool))
                and [x["state"] for x in xs] == ["registered"] * 2
                and xs
            ),
            timeout=15,
            message="both launches to be marked registered",
        )
        tokens = {x["id"]: spied_token(server, pool, x) for x in up}
        assert [heartbeat(server, x, tokens[x["id"]]) for x in up] == [200, 200]
        gate.touch()
        done = [wait_job(server, j, "completed", "failed", timeout=30) for j in jobs]
        assert {d["status"] for d in done} == {"completed"}, done
        gone, [stays] = retired_one(server, pool, min_workers=1)
        wait_until(
            lambda: not process_alive(pid_of(gone)), timeout=15, message="the retired worker to end"
        )
        assert_retired(server, pool, gone, tokens[gone["id"]])
        # The pool's min: the other stays, up and trusted.
        assert stays["state"] == "registered" and process_alive(pid_of(stays)), stays
        assert heartbeat(server, stays, tokens[stays["id"]]) == 200
        retire_all(server, pool)
        assert not process_alive(pid_of(stays))
        assert heartbeat(server, stays, tokens[stays["id"]]) == 401
    finally:
        disable(server, pool)  # a persistent worker outlives its server: never leave one


def launch_folder(server: ServerProcess, pool: str, launch: dict[str, Any]) -> Path:
    """Where the launch's worker was started (its log, `worker.log`)."""
    return Path(server.data_dir).resolve() / "pools" / pool / launch["id"]


def spied_token(server: ServerProcess, pool: str, launch: dict[str, Any]) -> str:
    """The token the launch's worker was given (TOKEN_SPY)."""
    return (launch_folder(server, pool, launch) / "worker.token").read_text()


def heartbeat(server: ServerProcess, launch: dict[str, Any], token: str) -> int:
    """The status a heartbeat for the launch's worker with `token` gets."""
    headers = {"X-Worker-Token": token}
    with httpx.Client(base_url=server.url, headers=headers, verify=server.verify) as c:
        return c.post("/api/workers/heartbeat", json={"worker_id": launch["worker_id"]}).status_code


def retired_one(
    server: ServerProcess, pool: str, *, min_workers: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Once the pool (idle timeout 1 s) has retired one idle worker and holds at its min:
    that worker's launch, ended, and the pool's other launches."""
    retiring = f"retiring 1 worker of pool {pool} (idle over 1 s, above its min of {min_workers})"
    steady = f"pool {pool} needs no new worker ({min_workers} up or launching, min {min_workers},"

    def settled() -> bool:
        log = server.log_path.read_text()
        return (at := log.find(retiring)) >= 0 and steady in log[at:]

    wait_until(settled, timeout=20, message=f"pool {pool} to retire a worker down to its min")
    xs = launches(server, pool)
    ended = [x for x in xs if x["state"] == "terminated"]
    assert len(ended) == 1, xs
    return ended[0], [x for x in xs if x is not ended[0]]


def assert_retired(server: ServerProcess, pool: str, launch: dict[str, Any], token: str) -> None:
    """The launch's worker, registered, was drained, then stopped with SIGTERM; its launch
    ended without an error and its token is refused."""
    assert launch["registered_at"] is not None and launch["error"] is None, launch
    with server.admin() as admin:
        worker = admin.get(f"/api/admin/workers/{launch['worker_id']}").json()
    assert worker["drained"] is True and worker["status"] in ("draining", "offline"), worker
    log = (launch_folder(server, pool, launch) / "worker.log").read_text()
    assert "preempted (SIGTERM)" in log, log[-2000:]
    assert heartbeat(server, launch, token) == 401


def disable(server: ServerProcess, pool: str) -> None:
    with server.admin() as admin:
        resp = admin.patch(f"/api/admin/pools/{pool}", json={"enabled": False})
    assert resp.status_code == 200, resp.text


def retire_all(server: ServerProcess, pool: str) -> None:
    """Disable the pool and wait for every launch of it to end."""
    disable(server, pool)
    wait_until(
        lambda: all(x["state"] in ("terminated", "failed") for x in launches(server, pool)),
        timeout=20,
        message=f"pool {pool}, disabled, to retire its workers",
    )
