"""The webhooks a job's end asks for, kept between transactions on SQLite
(store/webhook_cache.py): never what a job's end is told once a webhook changed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpufleet.server.services import delivery
from tests.api.conftest import Fleet, both_databases
from tests.api.test_webhooks import add_webhook, failed_job
from tests.webhook_receiver import Receiver, receiving

pytestmark = both_databases


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


async def test_a_webhook_added_deleted_or_changed_after_jobs_ended_is_heard_as_it_is_now(
    fleet: Fleet, receiver: Receiver
) -> None:
    agent = await fleet.online_worker("gpu-1")
    await failed_job(fleet, agent)  # no webhook yet: the (empty) list is read, and kept
    assert await delivery.deliver_due(fleet.ctx) == 0

    hook = await add_webhook(fleet, receiver.url, "job.failed")
    await failed_job(fleet, agent)
    assert await delivery.deliver_due(fleet.ctx) == 1

    path = f"/api/admin/webhooks/{hook['id']}"
    changed = await fleet.admin.patch(path, json={"events": ["worker.lost"]})
    assert changed.status_code == 200, changed.text
    await failed_job(fleet, agent)
    assert await delivery.deliver_due(fleet.ctx) == 0

    assert (await fleet.admin.patch(path, json={"events": ["job.failed"]})).status_code == 200
    await failed_job(fleet, agent)
    assert await delivery.deliver_due(fleet.ctx) == 1

    assert (await fleet.admin.delete(path)).status_code in (200, 204)
    await failed_job(fleet, agent)
    assert await delivery.deliver_due(fleet.ctx) == 0
    assert len(receiver.wait_for(2)) == 2
