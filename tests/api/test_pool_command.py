"""The `command` provider's faults through the reconcile loop (#36): real shell scripts as a
pool's launch, terminate and list commands. A launch that hangs is killed at the call timeout,
one that fails or prints garbage is a failed launch with its stderr kept, one whose machine
never calls home is terminated; each is backed off. Strays are terminated, retried."""

from __future__ import annotations

import logging
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpufleet.server.providers import Providers
from gpufleet.server.services.reconcile import Reconciler
from tests.api.conftest import Agent, Fleet
from tests.api.test_pool_reconcile import launches, make_pool
from tests.e2e.conftest import process_alive


def script(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return str(path)


async def command_pool(fleet: Fleet, tmp_path: Path, launch: str, **fields: Any) -> None:
    """Pool `burst` whose terminate appends GPUFLEET_INSTANCE_ID to `terminated`."""
    terminate = script(
        tmp_path,
        "terminate.sh",
        f"""\
        echo "$GPUFLEET_INSTANCE_ID $GPUFLEET_POOL" >> {tmp_path}/terminated
        [ ! -e {tmp_path}/terminate-fails ] || {{ echo "api down" >&2; exit 1; }}
        """,
    )
    provider = {"type": "command", "launch": [launch, str(tmp_path)], "terminate": [terminate]}
    await make_pool(fleet, provider=provider | fields.pop("provider", {}), **fields)


def lists(listing: str, printed: str) -> None:
    """What the list script prints from now on."""
    Path(listing + ".out").write_text(printed)


def terminated(tmp_path: Path) -> list[str]:
    path = tmp_path / "terminated"
    return path.read_text().splitlines() if path.exists() else []


def loop(timeout_s: float = 30) -> Reconciler:
    return Reconciler(Providers(call_timeout_s=timeout_s))


@pytest.mark.both_databases
async def test_a_launch_runs_with_the_workers_settings_and_a_machine_that_never_calls_home_is_terminated(  # noqa: E501
    fleet: Fleet, tmp_path: Path
) -> None:
    launch = script(
        tmp_path,
        "launch.sh",
        """\
        env | grep '^GPUFLEET_' | sort > "$1/env"
        pwd > "$1/cwd"
        echo "creating a machine with token $GPUFLEET_WORKER_TOKEN" >&2
        echo "Instance created:"
        echo "vm-0a1b"
        """,
    )
    await command_pool(fleet, tmp_path, launch)
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    reconcile = loop()
    await reconcile(fleet.ctx)
    [started] = await launches(fleet)
    assert (started["state"], started["instance_id"]) == ("launching", "vm-0a1b")
    env = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines())
    token = env["GPUFLEET_WORKER_TOKEN"]
    assert len(token) >= 20
    fleet.secrets.add(token)
    expected = {
        "GPUFLEET_ORCHESTRATOR_URL": fleet.settings.worker_url(),
        "GPUFLEET_POOL": "burst",
        "GPUFLEET_WORKER_NAME": f"burst-{started['id'].removeprefix('launch_')}",
        "GPUFLEET_WORKER_PERSISTENT": "0",
    }
    assert {k: env.get(k) for k in expected} == expected
    assert (tmp_path / "cwd").read_text().strip().endswith(f"pools/burst/{started['id']}")
    # Its stderr kept with the launch, the worker's token masked.
    assert started["stderr"] == "creating a machine with token [token]\n"
    assert token not in await fleet.all_stored_text()

    await reconcile(fleet.ctx)
    assert terminated(tmp_path) == []  # within launch_timeout_s: waited for
    fleet.clock.advance(61)
    await reconcile(fleet.ctx)
    [ended] = await launches(fleet)
    assert (ended["state"], ended["error"]) == ("terminated", "its worker did not register in 60 s")
    assert terminated(tmp_path) == ["vm-0a1b burst"]
    assert ended["stderr"] == started["stderr"]  # what its launch said, kept
    agent = Agent(fleet, ended["worker_id"], token, env["GPUFLEET_WORKER_NAME"])
    assert (await agent.register(gpu_count=1)).status_code == 401  # its token revoked
    # Backed off: 30 s after one failure.
    await reconcile(fleet.ctx)
    assert len(await launches(fleet)) == 1
    fleet.clock.advance(31)
    await reconcile(fleet.ctx)
    assert len(await launches(fleet)) == 2


async def test_a_launch_that_hangs_is_killed_with_its_process_group_and_backed_off(
    fleet: Fleet, tmp_path: Path
) -> None:
    launch = script(
        tmp_path,
        "launch.sh",
        """\
        sleep 300 &
        echo $! > "$1/child"
        echo "waiting for capacity" >&2
        sleep 300
        """,
    )
    await command_pool(fleet, tmp_path, launch)
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    reconcile = loop(timeout_s=1)
    await reconcile(fleet.ctx)
    [failed] = await launches(fleet)
    assert failed["state"] == "failed" and failed["instance_id"] is None
    assert failed["error"] == (
        "the launch command did not finish in 1 s and was killed (--pool-call-timeout)"
    )
    assert failed["stderr"] == "waiting for capacity\n"
    assert not process_alive(int((tmp_path / "child").read_text()))  # the whole group
    await reconcile(fleet.ctx)
    assert len(await launches(fleet)) == 1  # backed off


async def test_a_failing_launch_keeps_its_stderr_and_the_pool_says_it_failed_three_times(
    fleet: Fleet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "gpufleet.server.pools")
    launch = script(
        tmp_path,
        "launch.sh",
        """\
        echo "Requesting an H100 in us-east-1" >&2
        echo "Error: quota exceeded for H100 in us-east-1" >&2
        exit 3
        """,
    )
    await command_pool(fleet, tmp_path, launch)
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    reconcile = loop()
    for wait in (0, 31, 61):  # each try once the backoff before it has passed
        fleet.clock.advance(wait)
        await reconcile(fleet.ctx)
        await reconcile(fleet.ctx)  # within the backoff: nothing more
    tries = await launches(fleet)
    assert [x["state"] for x in tries] == ["failed"] * 3
    assert {x["error"] for x in tries} == {"the launch command exited with status 3"}
    assert tries[0]["stderr"] == (
        "Requesting an H100 in us-east-1\nError: quota exceeded for H100 in us-east-1\n"
    )
    assert (
        "the last 3 launches in pool burst failed: Error: quota exceeded for H100 in "
        "us-east-1; the next try in 2 min"
    ) in caplog.text
    answer = await fleet.admin.get("/api/admin/workers")
    minted = [w for w in answer.json()["workers"] if w["name"].startswith("burst-")]
    assert len(minted) == 3 and not any(w["connected_at"] for w in minted)


@pytest.mark.parametrize(
    ("printed", "why"),
    [
        ("Launched i-0abc in us-east-1\n", "printed 'Launched i-0abc in us-east-1' as its last"),
        ("", "printed nothing on stdout"),
        ("i-0abc\n\n", "printed an empty last line"),
        ("i" * 300 + "\n", "printed a last line of 300 characters, over 256"),
        ("i-0\x1b[31mabc\n", "printed 'i-0\\x1b[31mabc' as its last line"),
        ("{'id': 7}\n", "printed \"{'id': 7}\" as its last line"),
    ],
)
async def test_a_launch_that_prints_no_instance_id_last_fails_saying_what_it_printed(
    fleet: Fleet, tmp_path: Path, printed: str, why: str
) -> None:
    (tmp_path / "printed").write_text(printed)
    launch = script(tmp_path, "launch.sh", 'cat "$1/printed"; echo "made one" >&2\n')
    await command_pool(fleet, tmp_path, launch)
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    await loop()(fleet.ctx)
    [failed] = await launches(fleet)
    assert (failed["state"], failed["instance_id"], failed["stderr"]) == (
        "failed",
        None,
        "made one\n",
    )
    assert f"the launch command {why}" in failed["error"], failed["error"]
    assert "print the instance id" in failed["error"]


async def test_a_provider_naming_an_earlier_launchs_instance_fails_the_launch(
    fleet: Fleet, tmp_path: Path
) -> None:
    launch = script(tmp_path, "launch.sh", "echo vm-same\n")
    await command_pool(fleet, tmp_path, launch)
    for _ in range(2):
        await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    await loop()(fleet.ctx)
    first, second = sorted(await launches(fleet), key=lambda x: x["state"])
    assert (first["state"], first["instance_id"]) == ("failed", None)
    assert "instance id 'vm-same', which an earlier launch of the pool has" in first["error"]
    assert (second["state"], second["instance_id"]) == ("launching", "vm-same")


@pytest.mark.both_databases
async def test_strays_are_terminated_with_retries_never_a_machine_whose_worker_runs_a_job(
    fleet: Fleet, tmp_path: Path
) -> None:
    launch = script(
        tmp_path, "launch.sh", 'echo "$GPUFLEET_WORKER_TOKEN" > "$1/token"; echo vm-busy\n'
    )
    listing = script(tmp_path, "list.sh", 'cat "$0.out"\n')
    await command_pool(
        fleet, tmp_path, launch, provider={"list": [listing]}, worker_type="persistent"
    )
    job = await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    reconcile = loop()
    lists(listing, "")
    await reconcile(fleet.ctx)
    [busy] = await launches(fleet)
    token = (tmp_path / "token").read_text().strip()
    fleet.secrets.add(token)
    agent = Agent(fleet, busy["worker_id"], token, "busy")
    await agent.connect(gpu_count=1, gpu_name="Test GPU", gpu_vram_gb=24)
    offer = await agent.next_offer()
    assert offer["job_id"] == job["id"]
    await agent.run(offer)

    # The provider lists the busy machine and two it has no launch of.
    lists(listing, "vm-busy\nstray-1\n\nstray-2\n")
    (tmp_path / "terminate-fails").touch()
    fleet.clock.advance(61)
    await reconcile(fleet.ctx)
    assert terminated(tmp_path) == ["stray-1 burst", "stray-2 burst"]  # tried, failed
    await reconcile(fleet.ctx)
    assert len(terminated(tmp_path)) == 2  # not again within its backoff
    os.unlink(tmp_path / "terminate-fails")
    fleet.clock.advance(31)
    await reconcile(fleet.ctx)
    assert terminated(tmp_path)[2:] == ["stray-1 burst", "stray-2 burst"]  # retried: done
    fleet.clock.advance(61)
    lists(listing, "vm-busy\n")  # gone; vm-busy runs its job
    await reconcile(fleet.ctx)
    assert len(terminated(tmp_path)) == 4
    assert [x["state"] for x in await launches(fleet)] == ["registered"]
    assert (await fleet.job(job["id"]))["status"] == "running"


async def test_a_list_that_prints_no_ids_terminates_nothing(
    fleet: Fleet, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, "gpufleet.server.pools")
    listing = script(tmp_path, "list.sh", 'cat "$0.out"\n')
    lists(listing, "stray-1\nNAME   STATUS\nstray-2\n")  # a table's header among the ids
    launch = script(tmp_path, "launch.sh", "echo vm-1\n")
    await command_pool(fleet, tmp_path, launch, provider={"list": [listing]})
    reconcile = loop()
    await reconcile(fleet.ctx)
    assert terminated(tmp_path) == []
    assert "the list command printed 'NAME   STATUS', which is not an instance id" in caplog.text
    script(tmp_path, "list.sh", 'echo "denied" >&2; exit 1\n')  # the list now fails
    fleet.clock.advance(61)
    await reconcile(fleet.ctx)
    assert terminated(tmp_path) == []  # a list that failed says nothing of strays
    assert "could not list its instances: the list command exited with status 1" in caplog.text
