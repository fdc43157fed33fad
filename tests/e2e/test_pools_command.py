"""Worker pools with the `command` provider against a real orchestrator (#36): shell scripts as
the pool's launch, terminate and list commands start real `gpufleet worker` processes in the
background (a pid file each, as a cloud keeps its machines), stop them, and list them. An empty
fleet, three jobs, max 2: two ephemeral workers, one job each, a third for the third job; every
ended instance terminated, and a stray the list shows stopped. An idle persistent worker is
retired by the terminate script; a machine that never calls home is terminated at the launch
timeout, and the pool backs off."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.commands import gf, ok
from tests.e2e.conftest import ServerProcess, process_alive, submit_job, wait_job
from tests.e2e.test_pools_local import (
    assert_retired,
    disable,
    heartbeat,
    held_jobs,
    launches,
    make_pool,
    one_job_each_then_ended,
    retired_one,
    running,
)
from tests.waiting import wait_until

WORKER = f"{sys.executable} -c 'from gpufleet.cli.main import main; main()' worker"
SCRIPTS = {
    # The worker in the background, its output in the launch's folder (the current one).
    "launch.sh": f"""\
        set -eu
        {WORKER} >worker.log 2>&1 </dev/null &
        echo "$!" > "$1/cmd-$!.pid"
        echo "started gpufleet worker $GPUFLEET_WORKER_NAME for pool $GPUFLEET_POOL" >&2
        echo "a machine is up:"
        echo "cmd-$!"
        """,
    "terminate.sh": """\
        echo "$GPUFLEET_INSTANCE_ID" >> "$1/terminated"
        pidfile="$1/$GPUFLEET_INSTANCE_ID.pid"
        [ -f "$pidfile" ] || exit 0  # gone already: no error
        kill -TERM "$(cat "$pidfile")" 2>/dev/null || true
        rm -f "$pidfile"
        """,
    "list.sh": """\
        for f in "$1"/*.pid; do
            [ -e "$f" ] || continue
            if kill -0 "$(cat "$f")" 2>/dev/null; then basename "$f" .pid; fi
        done
        """,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    flags = {"pool-interval": 0.3, "pool-call-timeout": 30}
    proc = ServerProcess(tmp_path_factory.mktemp("pools-command"), None, **flags)
    proc.start()
    yield proc
    proc.kill(15)


def provider(state: Path, scripts: dict[str, str] = SCRIPTS) -> dict[str, object]:
    """The pool's provider: each script written to `state`, given `state` as its argument."""
    argv = {}
    for name, body in {**SCRIPTS, **scripts}.items():
        path = state / name
        path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
        path.chmod(0o755)
        argv[name.removesuffix(".sh")] = [str(path), str(state)]
    return {"type": "command", **argv}


def test_command_pool_workers_run_the_queue_within_max_and_every_instance_is_terminated(
    server: ServerProcess, machines: Path
) -> None:
    state = machines
    stray = subprocess.Popen(["sleep", "600"])  # a machine up that no launch knows of
    (state / f"cmd-{stray.pid}.pid").write_text(str(stray.pid))
    pool = make_pool(server, provider=provider(state))
    stray.wait(timeout=30)  # listed, found a stray, terminated
    assert f"cmd-{stray.pid}" in (state / "terminated").read_text().split()

    jobs = held_jobs(server, pool, gate := state / "go")
    wait_until(
        lambda: running(server, jobs) == 2,
        timeout=60,
        message="two of the three jobs to run on launched workers",
    )
    live = [x for x in launches(server, pool) if x["state"] in ("launching", "registered")]
    assert len(live) == 2, live  # the pool's max: the third job waits
    assert all(x["instance_id"].startswith("cmd-") for x in live)
    assert all("started gpufleet worker" in x["stderr"] for x in live)
    shown = ok(gf(server, "pools", "show", pool))
    assert f"started gpufleet worker {pool}-" in shown  # the provider's stderr, shown

    gate.touch()
    ended = one_job_each_then_ended(server, pool, jobs)
    told = (state / "terminated").read_text().split()
    assert {x["instance_id"] for x in ended} <= set(told)  # terminate called for each
    assert not any(process_alive(int(x["instance_id"].removeprefix("cmd-"))) for x in ended)


# The launch script, keeping what it was given: the worker's token (the test's own cloud may).
KEEPS_TOKEN = (
    textwrap.dedent(SCRIPTS["launch.sh"])
    + 'printf %s "$GPUFLEET_WORKER_TOKEN" > "$1/cmd-$!.token"\n'
)


def test_an_idle_persistent_command_worker_is_retired_by_the_terminate_script(
    server: ServerProcess, machines: Path
) -> None:
    state = machines
    scripts = provider(state, {"launch.sh": KEEPS_TOKEN})
    pool = make_pool(server, provider=scripts, worker_type="persistent", idle_timeout_s=1)
    try:
        [job] = held_jobs(server, pool, gate := state / "go", count=1)
        wait_job(server, job, "running", timeout=60)
        # The job may run before the loop's next pass marks its launch registered.
        [up] = wait_until(
            lambda: (xs := launches(server, pool)) and xs[0]["state"] == "registered" and xs,
            timeout=15,
            message="the launch to be marked registered",
        )
        token = (state / f"{up['instance_id']}.token").read_text()
        assert heartbeat(server, up, token) == 200, up
        gate.touch()
        assert wait_job(server, job, "completed", "failed", timeout=30)["status"] == "completed"
        gone, others = retired_one(server, pool, min_workers=0)
        assert others == [] and gone["id"] == up["id"]
        # The script was given the instance to stop, and stopped the worker it started.
        assert (state / "terminated").read_text().split() == [up["instance_id"]]
        pid = int(up["instance_id"].removeprefix("cmd-"))
        wait_until(lambda: not process_alive(pid), timeout=15, message="the retired worker to end")
        assert_retired(server, pool, gone, token)
    finally:
        disable(server, pool)


NEVER_BOOTS = """\
    echo "$GPUFLEET_WORKER_NAME" >> "$1/launched"
    echo "a machine that will never boot" >&2
    echo "ghost-$$"
    """


def test_a_machine_that_never_calls_home_is_terminated_at_the_launch_timeout_and_backed_off(
    server: ServerProcess, machines: Path
) -> None:
    state = machines
    scripts = provider(state, {"launch.sh": NEVER_BOOTS})
    pool = make_pool(server, provider=scripts, launch_timeout_s=1)
    try:
        submit_job(server, {"pool": pool}, [sys.executable, "-c", "pass"], gpu_count=0)
        failed = wait_until(
            lambda: (xs := launches(server, pool)) and xs[0]["state"] == "terminated" and xs[0],
            timeout=20,
            message="the launch to time out and be terminated",
        )
        assert failed["instance_id"].startswith("ghost-") and failed["registered_at"] is None
        assert failed["error"] == "its worker did not register in 1 s"
        assert "a machine that will never boot" in failed["stderr"]
        assert (state / "terminated").read_text().split() == [failed["instance_id"]]
        # Backed off (30 s after a first failure), launching nothing while passes go by.
        backoff = wait_until(
            lambda: (r := reason(server, pool))["code"] == "backing_off" and r,
            timeout=10,
            message="the pool to back off",
        )
        assert backoff["params"]["failures"] == 1 and backoff["params"]["next_in_s"] > 20

        def launched_once_while_backing_off() -> bool:
            assert len(launches(server, pool)) == 1
            assert len((state / "launched").read_text().split()) == 1
            now = reason(server, pool)
            assert now["code"] == "backing_off", now
            # A second of the backoff: three of the loop's passes (every 0.3 s).
            return bool(now["params"]["next_in_s"] <= backoff["params"]["next_in_s"] - 1)

        wait_until(
            launched_once_while_backing_off, timeout=10, message="1 s of the backoff to pass"
        )
        log = server.log_path.read_text()
        assert f"the last launch in pool {pool} failed: " in log
    finally:
        disable(server, pool)


def reason(server: ServerProcess, pool: str) -> dict[str, Any]:
    """What the pool does now and why (`GET /api/capacity`)."""
    with server.admin() as admin:
        resp = admin.get("/api/capacity")
    assert resp.status_code == 200, resp.text
    [mine] = [p for p in resp.json()["pools"] if p["name"] == pool]
    return dict(mine["reason"])
