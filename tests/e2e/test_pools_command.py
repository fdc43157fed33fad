"""Worker pools with the `command` provider against a real orchestrator (#36): shell scripts as
the pool's launch, terminate and list commands start real `gpufleet worker` processes in the
background (a pid file each, as a cloud keeps its machines), stop them, and list them. An empty
fleet, three jobs, max 2: two ephemeral workers, one job each, a third for the third job; every
ended instance terminated, and a stray the list shows stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.commands import gf, ok
from tests.e2e.conftest import ServerProcess, process_alive, submit_job, wait_job
from tests.e2e.test_pools_local import launches, make_pool, one_job_each_then_ended
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


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    """The scripts' folder of pid files; what they leave running is stopped afterwards."""
    yield tmp_path
    for pidfile in tmp_path.glob("*.pid"):
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def provider(state: Path) -> dict[str, object]:
    argv = {}
    for name, body in SCRIPTS.items():
        path = state / name
        path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
        path.chmod(0o755)
        argv[name.removesuffix(".sh")] = [str(path), str(state)]
    return {"type": "command", **argv}


def test_command_pool_workers_run_the_queue_within_max_and_every_instance_is_terminated(
    server: ServerProcess, state: Path
) -> None:
    stray = subprocess.Popen(["sleep", "600"])  # a machine up that no launch knows of
    (state / f"cmd-{stray.pid}.pid").write_text(str(stray.pid))
    pool = make_pool(server, provider=provider(state))
    stray.wait(timeout=30)  # listed, found a stray, terminated
    assert f"cmd-{stray.pid}" in (state / "terminated").read_text().split()

    gate = state / "go"
    hold = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
    jobs = [
        submit_job(server, {"pool": pool}, [sys.executable, "-c", hold], gpu_count=0)
        for _ in range(3)
    ]
    wait_until(
        lambda: (
            [wait_job(server, j, "queued", "running", "offered")["status"] for j in jobs].count(
                "running"
            )
            == 2
        ),
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
