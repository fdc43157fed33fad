"""Webhooks that cannot hurt: a secret long enough to sign, no internal address unless the
server allows it (at create, update and send time), URLs shown, audited and logged without
their userinfo, path and query, and one deadline per send whatever the receiver trickles."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.domain.webhooks import FIRST_RETRY_S
from gpufleet.server.services import delivery
from gpufleet.supervisor import Supervisor
from tests.api.conftest import Fleet
from tests.api.test_webhooks import add_webhook, deliveries
from tests.webhook_receiver import Receiver, receiving, trickling

PUBLIC = "https://hooks.example.com/a"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


def allow(fleet: Fleet, *entries: str, timeout: float | None = None) -> None:
    """Run the fleet as if started with `--webhook-allow-hosts` (and `--webhook-timeout`)."""
    update: dict[str, Any] = {"webhook_allow_hosts": entries}
    if timeout is not None:
        update["webhook_timeout"] = timeout
    fleet.ctx.settings = fleet.ctx.settings.model_copy(update=update)


async def listed(fleet: Fleet) -> list[dict[str, Any]]:
    hooks: list[dict[str, Any]] = (await fleet.admin.get("/api/admin/webhooks")).json()["webhooks"]
    return hooks


async def test_a_secret_needs_at_least_16_characters(fleet: Fleet) -> None:
    short = "s" * 15
    answer = await fleet.admin.post(
        "/api/admin/webhooks", json={"url": PUBLIC, "events": ["job.ended"], "secret": short}
    )
    assert answer.status_code == 422, answer.text
    assert "15 characters" in answer.text and "at least 16" in answer.text
    assert await listed(fleet) == [] and await fleet.audit(type="webhook.created") == []

    hook = await add_webhook(fleet, PUBLIC, "job.ended", secret="s" * 16)
    assert hook["signed"] is True
    path = f"/api/admin/webhooks/{hook['id']}"
    refused = await fleet.admin.patch(path, json={"secret": short})
    assert refused.status_code == 422 and "at least 16" in refused.text
    assert await fleet.audit(type="webhook.updated") == []
    assert (await fleet.admin.patch(path, json={"secret": "t" * 16})).status_code == 200


INTERNAL = {
    "http://127.0.0.1:9/x": "loopback",
    "http://10.0.0.1/": "private",
    "http://192.168.1.20/": "private",
    "http://169.254.169.254/latest/meta-data/": "link-local",
    "http://[::1]/": "loopback",
    "http://[fd12:3456::1]/": "unique-local",
    "http://[::ffff:127.0.0.1]/": "loopback",
    "http://0.0.0.0/": "unspecified",
    "http://224.0.0.1/": "multicast",
    "http://localhost:9/x": "loopback",  # a name resolving to 127.0.0.1
}


@pytest.mark.parametrize(("url", "kind"), INTERNAL.items())
async def test_an_internal_address_is_refused_saying_how_to_allow_it(
    fleet: Fleet, url: str, kind: str
) -> None:
    allow(fleet)  # started without --webhook-allow-hosts
    answer = await fleet.admin.post(
        "/api/admin/webhooks", json={"url": url, "events": ["job.ended"]}
    )
    assert answer.status_code == 422, answer.text
    said = answer.json()["detail"]
    assert kind in said and "--webhook-allow-hosts" in said
    assert await listed(fleet) == []

    hook = await add_webhook(fleet, PUBLIC, "job.ended")
    moved = await fleet.admin.patch(f"/api/admin/webhooks/{hook['id']}", json={"url": url})
    assert moved.status_code == 422 and "--webhook-allow-hosts" in moved.text
    assert await listed(fleet) == [hook] and await fleet.audit(type="webhook.updated") == []


@pytest.mark.parametrize(
    ("url", "entry"),
    [
        ("http://127.0.0.1:9/x", "127.0.0.1"),
        ("http://10.0.0.1/", "10.0.0.0/8"),
        ("http://169.254.169.254/", "169.254.169.254"),
        ("http://[::1]/", "::1"),
        ("http://localhost:9/x", "localhost"),
        ("http://localhost:9/x", "127.0.0.0/8,::1"),
    ],
)
async def test_an_internal_address_the_allow_list_names_is_accepted(
    fleet: Fleet, url: str, entry: str
) -> None:
    allow(fleet, *entry.split(","))
    answer = await fleet.admin.post(
        "/api/admin/webhooks", json={"url": url, "events": ["job.ended"]}
    )
    assert answer.status_code == 201, answer.text


async def test_an_internal_address_no_longer_allowed_is_not_sent_to(
    fleet: Fleet, receiver: Receiver
) -> None:
    """Checked again at every send: a name may resolve elsewhere since (DNS rebinding)."""
    named = receiver.url.replace("127.0.0.1", "localhost")
    allow(fleet, "localhost", "127.0.0.1")
    hooks = [await add_webhook(fleet, url, "job.ended") for url in (receiver.url, named)]
    allow(fleet)  # restarted without the allow-list
    for hook in hooks:
        await fleet.admin.post(f"/api/admin/webhooks/{hook['id']}/test")

    assert await delivery.deliver_due(fleet.ctx) == 2

    assert receiver.received == []
    for hook in hooks:
        [logged] = await deliveries(fleet, hook["id"])
        assert logged["status"] == "pending" and logged["attempts"] == 1
        assert "not sent" in logged["error"] and "--webhook-allow-hosts" in logged["error"]


async def test_a_name_is_sent_to_the_address_that_was_checked(
    fleet: Fleet, receiver: Receiver
) -> None:
    named = receiver.url.replace("127.0.0.1", "localhost")
    allow(fleet, "127.0.0.0/8", "::1")  # addresses only: the name is resolved and checked
    hook = await add_webhook(fleet, named, "job.ended")
    await fleet.admin.post(f"/api/admin/webhooks/{hook['id']}/test")

    assert await delivery.deliver_due(fleet.ctx) == 1

    [request] = receiver.wait_for(1)
    assert request.headers["host"] == named.split("/")[2]  # the name, though pinned
    assert (await deliveries(fleet, hook["id"]))[0]["status"] == "delivered"


async def test_a_webhook_url_is_shown_audited_and_logged_without_userinfo_path_or_query(
    fleet: Fleet, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    port = receiver.url.split(":")[2].split("/")[0]
    url = f"http://hookuser:hookpass@127.0.0.1:{port}/hook/T0PSECRETPATH?token=tok3n"
    shown = f"http://127.0.0.1:{port}/…"
    hidden = ("hookuser", "hookpass", "T0PSECRETPATH", "tok3n")

    hook = await add_webhook(fleet, url, "job.ended")
    assert hook["url"] == shown
    assert [h["url"] for h in await listed(fleet)] == [shown]
    path = f"/api/admin/webhooks/{hook['id']}"
    changed = await fleet.admin.patch(path, json={"url": url.replace("tok3n", "tok3n2")})
    assert changed.status_code == 200 and changed.json()["url"] == shown
    await fleet.admin.post(f"{path}/test")
    assert await delivery.deliver_due(fleet.ctx) == 1

    [request] = receiver.wait_for(1)  # the send itself uses the whole URL
    assert request.path == "/hook/T0PSECRETPATH?token=tok3n2"
    assert (
        request.headers["authorization"]
        == "Basic " + base64.b64encode(b"hookuser:hookpass").decode()
    )
    audited = await fleet.audit(target=hook["id"])
    assert [a["detail"]["url"] for a in audited if "url" in a["detail"]] == [shown, shown]
    logged = caplog.text
    assert f"to {shown}: answered 200" in logged
    for secret in hidden:
        assert secret not in json.dumps(audited) and secret not in logged


async def test_a_receiver_that_trickles_its_answer_is_cut_off_at_the_deadline_and_retried(
    fleet: Fleet,
) -> None:
    # A byte every 0.15 s: no read waits as long as the deadline, only the whole send does.
    allow(fleet, "127.0.0.1", timeout=0.5)
    with trickling(every=0.15, longest=20.0) as slow:
        hook = await add_webhook(fleet, slow.url, "job.ended")
        await fleet.admin.post(f"/api/admin/webhooks/{hook['id']}/test")

        began = time.monotonic()
        assert await delivery.deliver_due(fleet.ctx) == 1
        took = time.monotonic() - began

        assert slow.wait_hung_up(within=5.0) - slow.accepted[0] < 0.5 + 3.0
        assert took < 0.5 + 3.0  # not the 20 s the receiver would trickle for
        [logged] = await deliveries(fleet, hook["id"])
        assert logged["status"] == "pending" and logged["attempts"] == 1
        assert logged["error"] == "no answer within 0.5 s"

        fleet.clock.advance(FIRST_RETRY_S)
        assert await delivery.deliver_due(fleet.ctx) == 1  # retried as any failure
        slow.wait_connected(2)
        assert (await deliveries(fleet, hook["id"]))[0]["attempts"] == 2


async def test_a_trickling_receiver_holds_back_only_its_own_lane(fleet: Fleet) -> None:
    """The loop's side: a tick starts a lane per webhook and waits for none of them."""
    # The slow lane's deadline is far past the fast lane's wait; the receiver hangs up
    # after it (the deadline's cut is the test above), and the slow lane then ends.
    allow(fleet, "127.0.0.1", timeout=30.0)
    supervisor = Supervisor()
    lanes = delivery.Lanes(fleet.ctx, supervisor)
    try:
        with trickling(every=0.2, longest=60.0) as slow, receiving() as fast:
            slow_hook = await add_webhook(fleet, slow.url, "job.ended")
            fast_hook = await add_webhook(fleet, fast.url, "job.ended")
            await fleet.admin.post(f"/api/admin/webhooks/{slow_hook['id']}/test")
            await lanes.tick()
            await asyncio.to_thread(slow.wait_connected)
            assert lanes.running == [slow_hook["id"]]

            await fleet.admin.post(f"/api/admin/webhooks/{fast_hook['id']}/test")
            await lanes.tick()
            await asyncio.to_thread(fast.wait_for, 1, 10.0)
            assert not slow.hung_up  # still trickling

            await asyncio.to_thread(slow.close)  # the receiver hangs up mid-answer
            await lanes.idle()  # the slow lane records its try, then ends
            assert lanes.running == []
            [slow_log] = await deliveries(fleet, slow_hook["id"])
            assert (slow_log["status"], slow_log["attempts"]) == ("pending", 1)
            assert slow_log["error"].startswith("RemoteProtocolError"), slow_log
            [fast_log] = await deliveries(fleet, fast_hook["id"])
            assert fast_log["status"] == "delivered"
    finally:
        await supervisor.close()
