"""The pools' reconcile loop in process (#36), its provider a working fake: a launch is
recorded before its provider is called, so a restart never launches twice; a launch not
registered in time is terminated and backed off; one whose worker registers is followed."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import pytest

from gpufleet.errors import ProviderError
from gpufleet.server.providers import Providers, WorkerLaunch
from gpufleet.server.services.reconcile import Reconciler
from tests.api.conftest import Agent, Fleet

_made = itertools.count(1)  # instance ids unique across the fakes of a test, as a cloud's


class FakeProvider:
    """Machines as a list: launch appends, terminate records; `fail` makes launch refuse."""

    def __init__(self, fail: str | None = None, crash: bool = False) -> None:
        self.crash = crash
        self.launched: list[WorkerLaunch] = []
        self.terminated: list[str] = []
        self.fail = fail
        self._lock = threading.Lock()

    def launch(self, worker: WorkerLaunch) -> str:
        if self.fail is not None:
            raise ProviderError("the provider refused", self.fail)
        if self.crash:
            raise KeyError("region")  # a provider's own bug
        with self._lock:
            self.launched.append(worker)
            return f"fake-{next(_made)}"

    def terminate(self, instance_id: str) -> None:
        self.terminated.append(instance_id)

    def list(self) -> list[str]:
        return []


async def make_pool(fleet: Fleet, **fields: Any) -> dict[str, Any]:
    body = {
        "name": "burst",
        "provider": {"type": "local"},
        "labels": {"pool": "burst"},
        "gpu_count": 1,
        "max_workers": 2,
        "launch_timeout_s": 60,
        **fields,
    }
    answer = await fleet.admin.post("/api/admin/pools", json=body)
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


async def launches(fleet: Fleet) -> list[dict[str, Any]]:
    answer = await fleet.admin.get("/api/admin/pools/burst")
    return list(answer.json()["launches"])


async def a_pass(fleet: Fleet, provider: FakeProvider) -> None:
    await Reconciler(Providers(local=provider))(fleet.ctx)


@pytest.mark.both_databases
async def test_a_restart_mid_launch_launches_nothing_twice_and_the_launch_times_out(
    fleet: Fleet,
) -> None:
    await make_pool(fleet)
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    first = FakeProvider()
    await a_pass(fleet, first)
    assert len(first.launched) == 1
    [launch] = await launches(fleet)
    assert launch["state"] == "launching" and launch["instance_id"].startswith("fake-")
    assert first.launched[0].token not in await fleet.all_stored_text()  # shown to no one

    await fleet.restart()
    again = FakeProvider()
    await a_pass(fleet, again)
    assert again.launched == []  # the launch row is the record: the job is covered by it

    fleet.clock.advance(61)
    await a_pass(fleet, again)
    [ended] = await launches(fleet)
    assert ended["state"] == "terminated"
    assert ended["error"] == "its worker did not register in 60 s"
    assert again.terminated == [launch["instance_id"]] and again.launched == []  # backed off: 30 s
    fleet.clock.advance(31)
    await a_pass(fleet, again)
    assert len(again.launched) == 1


async def test_a_provider_failure_is_kept_with_its_launch_and_the_token_revoked(
    fleet: Fleet,
) -> None:
    await make_pool(fleet)
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    await a_pass(fleet, FakeProvider(fail="quota exceeded\n"))
    [launch] = await launches(fleet)
    assert launch["state"] == "failed" and launch["instance_id"] is None
    assert (launch["error"], launch["stderr"]) == ("the provider refused", "quota exceeded\n")
    worker = (await fleet.admin.get(f"/api/admin/workers/{launch['worker_id']}")).json()
    assert worker["connected_at"] is None


async def test_a_launched_worker_that_registers_moves_its_launch_to_registered(
    fleet: Fleet,
) -> None:
    await make_pool(fleet, worker_type="persistent")
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    provider = FakeProvider()
    await a_pass(fleet, provider)
    [spec] = provider.launched
    assert (spec.pool, spec.persistent, spec.environment()["GPUFLEET_POOL"]) == (
        "burst",
        True,
        "burst",
    )
    [launch] = await launches(fleet)
    agent = Agent(fleet, launch["worker_id"], spec.token, spec.name)
    fleet.secrets.add(spec.token)
    await agent.connect(gpu_count=1, gpu_name="Test GPU", gpu_vram_gb=24)
    await a_pass(fleet, provider)
    [launch] = await launches(fleet)
    assert launch["state"] == "registered" and launch["registered_at"] is not None
    assert len(provider.launched) == 1  # its worker takes the job: nothing more launched


async def test_a_provider_that_raises_fails_its_launch_and_the_pass_goes_on(
    fleet: Fleet,
) -> None:
    await make_pool(fleet)
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=1)
    await a_pass(fleet, FakeProvider(crash=True))
    [launch] = await launches(fleet)
    assert launch["state"] == "failed"
    assert launch["error"] == "the provider failed: KeyError('region')"


async def test_an_idle_persistent_worker_above_min_is_drained_and_terminated(
    fleet: Fleet,
) -> None:
    await make_pool(fleet, worker_type="persistent", min_workers=1, idle_timeout_s=60)
    provider = FakeProvider()
    await a_pass(fleet, provider)  # nothing waits: the pool comes up to its min
    [spec] = provider.launched
    [launch] = await launches(fleet)
    fleet.secrets.add(spec.token)
    agent = Agent(fleet, launch["worker_id"], spec.token, spec.name)
    await agent.connect(gpu_count=1, gpu_name="Test GPU", gpu_vram_gb=24)
    answer = await fleet.admin.patch("/api/admin/pools/burst", json={"min_workers": 0})
    assert answer.status_code == 200, answer.text
    loop = Reconciler(Providers(local=provider))
    await loop(fleet.ctx)  # registered, idle from now
    assert provider.terminated == []
    fleet.clock.advance(61)
    await loop(fleet.ctx)
    [ended] = await launches(fleet)
    assert ended["state"] == "terminated" and provider.terminated == [ended["instance_id"]]
    worker = (await fleet.admin.get(f"/api/admin/workers/{ended['worker_id']}")).json()
    assert worker["drained"] is True
    assert (await agent.heartbeat()).status_code == 401  # its token revoked


class EveryKind(Providers):
    """One fake for a pool of any provider."""

    def __init__(self, fake: FakeProvider) -> None:
        super().__init__(local=fake)
        self.fake = fake

    def of(self, pool: Any) -> FakeProvider:
        return self.fake


async def test_a_worker_launched_elsewhere_is_given_the_public_address_and_its_pools_gpus(
    fleet: Fleet,
) -> None:
    public = "http://head.example:8001"
    fleet.ctx.settings = fleet.ctx.settings.model_copy(update={"public_url": public})
    slurm = {"type": "slurm", "partition": "gpu", "time_limit": "60"}
    await make_pool(fleet, provider=slurm, gpu_count=2)
    await make_pool(fleet, name="near", labels={"pool": "near"}, gpu_count=0)
    await fleet.submit(worker_labels={"pool": "burst"}, gpu_count=2)
    await fleet.submit(worker_labels={"pool": "near"}, gpu_count=0)
    fake = FakeProvider()
    await Reconciler(EveryKind(fake))(fleet.ctx)
    by_pool = {spec.pool: spec for spec in fake.launched}
    assert (by_pool["burst"].orchestrator_url, by_pool["burst"].gpus) == (public, 2)
    assert by_pool["near"].orchestrator_url.startswith("http://127.0.0.1:")  # a local worker
    assert by_pool["near"].gpus == 0
