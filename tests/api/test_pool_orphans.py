"""A launch cut off by a crash (#36): the orchestrator dies while its provider is called, so
the row stays `launching` with no instance id and the answer is lost. The next leader ends it
(its token revoked, an error that says so, no backoff) as soon as no replica can still be
calling, and launches afresh; an answer that comes after its launch ended terminates its
machine. The e2e version (a real server SIGKILLed mid-launch): tests/e2e/test_pools_crash.py."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.domain.pool_strays import INTERRUPTED
from gpufleet.server.providers import Providers, WorkerLaunch
from gpufleet.server.services.reconcile import CALL_OVERRUN_S
from tests.api.conftest import Agent, Fleet
from tests.api.test_pool_reconcile import FakeProvider, a_pass, launches, make_pool


class HangingProvider(FakeProvider):
    """A launch that waits to be released, with what it was given."""

    def __init__(self) -> None:
        super().__init__()
        self.called = threading.Event()
        self.release = threading.Event()
        self.given: WorkerLaunch | None = None
        self.answered: str | None = None

    def launch(self, worker: WorkerLaunch) -> str:
        self.given = worker
        self.called.set()
        self.release.wait(30)
        self.answered = super().launch(worker)
        return self.answered


@pytest.fixture
def hanging() -> Iterator[HangingProvider]:
    provider = HangingProvider()
    yield provider
    provider.release.set()  # its thread ends with the test


async def called(provider: HangingProvider, fleet: Fleet) -> asyncio.Task[None]:
    """A pass whose launch is in its provider's hands: the task, still running."""
    await make_pool(fleet, launch_timeout_s=3600)  # the orphan rule, not the launch's timeout
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    task = asyncio.create_task(a_pass(fleet, provider))
    assert await asyncio.to_thread(provider.called.wait, 10)
    return task


def by_worker(xs: list[dict[str, Any]], worker_id: str) -> dict[str, Any]:
    return next(x for x in xs if x["worker_id"] == worker_id)


@pytest.mark.both_databases
async def test_a_launch_cut_off_by_a_restart_is_ended_and_its_job_launched_afresh(
    fleet: Fleet, hanging: HangingProvider
) -> None:
    task = await called(hanging, fleet)
    task.cancel()  # the orchestrator dies with the call in flight: no answer is stored
    with contextlib.suppress(asyncio.CancelledError):
        await task
    [cut] = await launches(fleet)
    assert (cut["state"], cut["instance_id"]) == ("launching", None)
    assert hanging.given is not None
    agent = Agent(fleet, cut["worker_id"], hanging.given.token, hanging.given.name)
    fleet.secrets.add(hanging.given.token)

    await fleet.restart()
    again = FakeProvider()
    if fleet.ctx.replicas.shared:
        # Another replica may be the one calling (this one is not linked, so cannot tell):
        # the launch holds its job and room until any caller would have given up.
        await a_pass(fleet, again)
        assert again.launched == [] and (await launches(fleet))[0]["state"] == "launching"
        fleet.clock.advance(Providers().call_timeout_s + CALL_OVERRUN_S + 1)
    await a_pass(fleet, again)  # SQLite: one process, so at once
    ended = by_worker(await launches(fleet), cut["worker_id"])
    assert (ended["state"], ended["error"]) == ("terminated", INTERRUPTED)
    assert ended["ended_at"] is not None and ended["registered_at"] is None
    assert (await agent.register()).status_code == 401  # its token revoked
    assert again.terminated == []  # no id to terminate: the list finds its machine
    assert len(again.launched) == 1  # afresh, in the same pass: a crash is not backed off
    assert len(await launches(fleet)) == 2


async def test_an_answer_after_its_launch_ended_terminates_its_machine(
    fleet: Fleet, hanging: HangingProvider
) -> None:
    task = await called(hanging, fleet)
    # Another leader (here: a second loop on the same store) judges the launch an orphan
    # while the first still waits for its provider.
    other = FakeProvider()
    await a_pass(fleet, other)
    assert len(other.launched) == 1
    hanging.release.set()
    await asyncio.wait_for(task, 10)
    assert hanging.answered is not None
    [late] = [x for x in await launches(fleet) if x["error"] == INTERRUPTED]
    assert (late["state"], late["instance_id"]) == ("terminated", None)  # stays ended
    assert hanging.terminated == [hanging.answered]  # its machine, stopped at once
