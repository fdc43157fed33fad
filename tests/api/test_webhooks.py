"""Webhook notifications: configured by an admin, written to the outbox with the change they
report, sent signed to a real HTTP receiver by the delivery loop, retried, and logged."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gpufleet.domain.states import JobStatus
from gpufleet.domain.webhook_targets import redact_url
from gpufleet.domain.webhooks import FIRST_RETRY_S
from gpufleet.server.context import transaction
from gpufleet.server.hub import JOBS_TOPIC, job_topic
from gpufleet.server.services import delivery
from gpufleet.server.services.lifecycle import move_job
from tests.api.conftest import (
    HEARTBEAT_TIMEOUT,
    Agent,
    Fleet,
    both_databases,
    post_raw,
)
from tests.api.test_policy import add_user, client_of, set_policy
from tests.webhook_receiver import Receiver, receiving

SECRET = "s3cret-for-signing"
NEW_SECRET = "another-s3cret-to-sign"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


async def add_webhook(fleet: Fleet, url: str, *events: str, secret: str | None = None) -> Any:
    body: dict[str, Any] = {"url": url, "events": list(events)}
    if secret is not None:
        body["secret"] = secret
        fleet.secrets.add(secret)
    answer = await fleet.admin.post("/api/admin/webhooks", json=body)
    assert answer.status_code == 201, answer.text
    return answer.json()


async def deliveries(fleet: Fleet, webhook_id: str) -> list[dict[str, Any]]:
    answer = await fleet.admin.get(f"/api/admin/webhooks/{webhook_id}/deliveries")
    assert answer.status_code == 200, answer.text
    found: list[dict[str, Any]] = answer.json()["deliveries"]
    return found


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def test_an_admin_adds_lists_and_deletes_a_webhook_whose_secret_never_comes_back(
    fleet: Fleet,
) -> None:
    hook = await add_webhook(
        fleet, "https://hooks.example.com/gpufleet", "job.failed", "job.ended", secret=SECRET
    )
    assert hook["signed"] is True and "secret" not in hook
    assert hook["events"] == ["job.ended", "job.failed"]

    listed = (await fleet.admin.get("/api/admin/webhooks")).json()
    assert [h["id"] for h in listed["webhooks"]] == [hook["id"]]
    assert set(listed["events"]) == {
        "job.ended",
        "job.failed",
        "worker.lost",
        "job.approved",
        "job.rejected",
        "gpu.fault",
    }
    assert set(listed["formats"]) == {"gpufleet", "slack", "discord"}
    assert hook["format"] == "gpufleet"  # unless told
    stored = await fleet.all_stored_text()
    assert SECRET not in stored and SECRET not in json.dumps(listed)  # sealed, not plain
    created = await fleet.audit(type="webhook.created", target=hook["id"])
    assert created[0]["detail"]["signed"] is True and SECRET not in json.dumps(created)

    assert (await fleet.admin.delete(f"/api/admin/webhooks/{hook['id']}")).status_code == 200
    assert (await fleet.admin.get("/api/admin/webhooks")).json()["webhooks"] == []
    again = await fleet.admin.delete(f"/api/admin/webhooks/{hook['id']}")
    assert again.status_code == 404 and "list the webhooks again" in again.json()["detail"]
    missing = await fleet.admin.get(f"/api/admin/webhooks/{hook['id']}/deliveries")
    assert missing.status_code == 404


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"url": "ftp://hooks.example.com/x", "events": ["job.ended"]}, "http:// or https://"),
        ({"url": "javascript:alert(1)", "events": ["job.ended"]}, "http:// or https://"),
        ({"url": "hooks.example.com/x", "events": ["job.ended"]}, "http:// or https://"),
        ({"url": "https:///path", "events": ["job.ended"]}, "has no host"),
        ({"url": "https://exa mple.com/", "events": ["job.ended"]}, "spaces"),
        ({"url": "https://example.com:99999/", "events": ["job.ended"]}, "cannot be read"),
        ({"url": "   ", "events": ["job.ended"]}, "needs a URL"),
        ({"url": "https://example.com/", "events": ["job.started"]}, "unknown event"),
        ({"url": "https://example.com/", "events": []}, "events"),
        ({"url": "https://example.com/" + "a" * 3000, "events": ["job.ended"]}, "url"),
        ({"url": "https://example.com/", "events": ["job.ended"], "secret": " x "}, "whitespace"),
        ({"url": "https://example.com/", "events": ["job.ended"], "extra": 1}, "extra"),
        ({"url": "https://example.com/", "events": ["job.ended"], "format": "teams"}, "slack"),
        (  # a Slack or Discord webhook meets the same refusal of internal addresses
            {"url": "http://169.254.169.254/x", "events": ["job.ended"], "format": "slack"},
            "--webhook-allow-hosts",
        ),
        ({"url": "https://example.com/", "events": ["job.ended"], "format": ""}, "discord"),
        ({"url": "https://example.com/", "events": ["job.ended"], "format": 3}, "format"),
        ({"url": "https://example.com/", "events": ["job.ended"], "format": "x" * 65}, "format"),
    ],
)
async def test_a_webhook_that_could_not_work_is_refused_saying_what_to_fix(
    fleet: Fleet, body: dict[str, Any], says: str
) -> None:
    answer = await fleet.admin.post("/api/admin/webhooks", json=body)
    assert answer.status_code == 422, answer.text
    assert says in json.dumps(answer.json()["detail"])
    assert (await fleet.admin.get("/api/admin/webhooks")).json()["webhooks"] == []


async def failed_job(fleet: Fleet, agent: Agent) -> None:
    await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    await agent.finish(offer, "failed", exit_code=3, error="exited with code 3")


async def test_an_admin_changes_a_webhooks_events_secret_and_url_and_its_deliveries_follow(
    fleet: Fleet, receiver: Receiver
) -> None:
    hook = await add_webhook(fleet, receiver.url, "worker.lost", secret=SECRET)
    fleet.secrets.add(NEW_SECRET)
    path = f"/api/admin/webhooks/{hook['id']}"
    answer = await fleet.admin.patch(path, json={"events": ["job.failed"], "secret": NEW_SECRET})
    assert answer.status_code == 200, answer.text
    changed = answer.json()
    assert (changed["url"], changed["events"], changed["signed"]) == (
        redact_url(receiver.url),
        ["job.failed"],
        True,
    )
    assert changed["created_at"] == hook["created_at"] and "secret" not in changed
    [audited] = await fleet.audit(type="webhook.updated", target=hook["id"])
    assert audited["detail"] == {"events": ["job.failed"], "signed": True}
    stored = await fleet.all_stored_text()
    assert NEW_SECRET not in stored and NEW_SECRET not in json.dumps(audited)

    agent = await fleet.online_worker("gpu-1")
    await failed_job(fleet, agent)  # heard now; worker.lost no longer is
    assert await delivery.deliver_due(fleet.ctx) == 1
    [signed] = receiver.wait_for(1)
    assert signed.headers["x-gpufleet-signature"] == signature(NEW_SECRET, signed.body)

    answer = await fleet.admin.patch(path, json={"secret": None})  # unsigned from now on
    assert answer.status_code == 200 and answer.json()["signed"] is False, answer.text
    await failed_job(fleet, agent)
    assert await delivery.deliver_due(fleet.ctx) == 1
    _, unsigned = receiver.wait_for(2)
    assert "x-gpufleet-signature" not in unsigned.headers

    elsewhere = "https://hooks.example.com/moved"
    answer = await fleet.admin.patch(path, json={"url": elsewhere})
    assert answer.status_code == 200, answer.text
    [listed] = (await fleet.admin.get("/api/admin/webhooks")).json()["webhooks"]
    shown = "https://hooks.example.com/…"  # the path may be a secret: never shown
    assert (listed["url"], listed["events"], listed["signed"]) == (shown, ["job.failed"], False)
    assert [a["detail"] for a in await fleet.audit(type="webhook.updated")][:2] == [
        {"url": shown},
        {"signed": False},
    ]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"url": "ftp://hooks.example.com/x"}, "http:// or https://"),
        ({"url": None}, "needs a URL"),
        ({"url": "   "}, "needs a URL"),
        ({"events": None}, "at least one event"),
        ({"events": []}, "events"),
        ({"events": ["job.ended", "job.started"]}, "unknown event"),
        ({"secret": " x "}, "whitespace"),
        ({"name": "mine"}, "Extra inputs"),
        ({"format": None}, "a webhook has a format"),
        ({"format": "slack\x00"}, "NUL character"),
        ({"format": "matrix"}, "choose one of gpufleet, slack, discord"),
        ({"format": ["slack"]}, "format"),
    ],
)
async def test_a_change_that_could_not_work_is_refused_and_the_webhook_left_as_it_was(
    fleet: Fleet, body: dict[str, Any], says: str
) -> None:
    hook = await add_webhook(fleet, "https://hooks.example.com/a", "job.ended", secret=SECRET)
    answer = await fleet.admin.patch(f"/api/admin/webhooks/{hook['id']}", json=body)
    assert answer.status_code == 422, answer.text
    assert says in json.dumps(answer.json()["detail"])
    assert (await fleet.admin.get("/api/admin/webhooks")).json()["webhooks"] == [hook]
    assert await fleet.audit(type="webhook.updated") == []
    gone = await fleet.admin.patch(
        "/api/admin/webhooks/wh_000000000000", json={"events": ["job.ended"]}
    )
    assert gone.status_code == 404 and "list the webhooks again" in gone.json()["detail"]


@pytest.mark.parametrize(
    "body",
    [
        {"url": "https://hooks.example.com/\ud800"},
        {"url": "https://hooks.example.com/a\x00b"},
        {"events": ["job.ended\x00"]},
        {"secret": "s" * 100_000},
        {"secret": "\udfff"},
        {"events": [["job.ended"]]},
        {"url": 10**400},
        {"format": "\udfff"},
        {"format": {"$ne": "gpufleet"}},
    ],
)
async def test_hostile_changes_are_refused_and_the_webhook_left_as_it_was(
    fleet: Fleet, body: dict[str, Any]
) -> None:
    hook = await add_webhook(fleet, "https://hooks.example.com/a", "job.ended", secret=SECRET)
    answer = await post_raw(fleet.admin, f"/api/admin/webhooks/{hook['id']}", body, method="PATCH")
    assert 400 <= answer.status_code < 500, answer.text
    assert len(answer.text) < 2000  # not echoed back whole
    assert (await fleet.admin.get("/api/admin/webhooks")).json()["webhooks"] == [hook]


async def test_a_failed_job_is_posted_signed_retried_after_a_500_and_logged(
    fleet: Fleet, receiver: Receiver
) -> None:
    hook = await add_webhook(fleet, receiver.url, "job.failed", secret=SECRET)
    deaf = await add_webhook(fleet, receiver.url, "worker.lost")  # hears nothing of jobs
    agent = await fleet.online_worker("gpu-1")
    job = await fleet.submit()
    offer = await agent.next_offer()
    await agent.run(offer)
    await agent.finish(offer, "failed", exit_code=3, error="exited with code 3")

    receiver.answers = [500]
    assert await delivery.deliver_due(fleet.ctx) == 1
    [first] = receiver.wait_for(1)
    [logged] = await deliveries(fleet, hook["id"])
    assert logged["status"] == "pending" and logged["attempts"] == 1
    assert logged["status_code"] == 500 and "answered 500" in logged["error"]
    assert await delivery.deliver_due(fleet.ctx) == 0  # its retry is not due yet

    fleet.clock.advance(FIRST_RETRY_S)
    assert await delivery.deliver_due(fleet.ctx) == 1
    first, second = receiver.wait_for(2)
    assert first.body == second.body  # the same bytes, the same delivery id, every try
    for request in (first, second):
        assert request.path == "/hook"
        assert request.headers["x-gpufleet-signature"] == signature(SECRET, request.body)
        assert request.headers["x-gpufleet-event"] == "job.failed"
        assert request.headers["content-type"] == "application/json"
    payload = json.loads(second.body)
    assert payload["event"] == "job.failed"
    assert payload["id"] == second.headers["x-gpufleet-delivery"] == logged["id"]
    assert payload["job"]["id"] == job["id"]
    assert payload["job"]["status"] == "failed" and payload["job"]["exit_code"] == 3
    assert payload["job"]["error"] == "exited with code 3"
    assert payload["job"]["worker_id"] == agent.id and payload["job"]["worker_name"] == "gpu-1"
    assert payload["job"]["ended_at"].endswith("Z")

    [done] = await deliveries(fleet, hook["id"])
    assert done["status"] == "delivered" and done["attempts"] == 2
    assert done["status_code"] == 200 and done["error"] is None and done["next_at"] is None
    assert await deliveries(fleet, deaf["id"]) == []


async def test_a_receiver_that_never_answers_2xx_is_given_up_on_after_the_last_try(
    fleet: Fleet, receiver: Receiver
) -> None:
    hook = await add_webhook(fleet, receiver.url, "job.ended")
    await fleet.admin.post(f"/api/admin/webhooks/{hook['id']}/test")
    receiver.answers = [503] * 100
    tries = 0
    while (await deliveries(fleet, hook["id"]))[0]["status"] == "pending":
        tries += await delivery.deliver_due(fleet.ctx)
        fleet.clock.advance(600)
        assert tries <= 20
    [given_up] = await deliveries(fleet, hook["id"])
    assert given_up["status"] == "failed" and given_up["attempts"] == tries == 8
    assert given_up["status_code"] == 503


async def test_the_outbox_row_is_written_with_the_change_or_not_at_all(fleet: Fleet) -> None:
    hook = await add_webhook(fleet, "http://127.0.0.1:9/never", "job.ended")
    job = await fleet.submit(target="worker")  # no worker: it stays queued

    with pytest.raises(RuntimeError, match="crash"):
        async with transaction(fleet.ctx) as tx:
            found = await tx.q.get_job(job["id"], lock=True)
            assert found is not None
            await move_job(tx, found, JobStatus.CANCELLED, ended_at=tx.now)
            raise RuntimeError("crash before the commit")
    assert await deliveries(fleet, hook["id"]) == []
    assert (await fleet.job(job["id"]))["status"] == "queued"

    assert (await fleet.admin.post(f"/api/queue/{job['id']}/cancel")).status_code == 200
    [queued] = await deliveries(fleet, hook["id"])
    assert queued["event"] == "job.cancelled" and queued["status"] == "pending"
    assert queued["attempts"] == 0


async def test_a_lost_worker_is_reported_to_the_webhooks_that_listen(
    fleet: Fleet, receiver: Receiver
) -> None:
    hook = await add_webhook(fleet, receiver.url, "worker.lost")
    silent = await fleet.online_worker("silent")
    fleet.clock.advance(HEARTBEAT_TIMEOUT + 1)
    assert await fleet.heartbeat_sweep() == [silent.id]

    assert await delivery.deliver_due(fleet.ctx) == 1
    [request] = receiver.wait_for(1)
    payload = json.loads(request.body)
    assert payload["event"] == "worker.lost"
    assert payload["worker"]["id"] == silent.id and payload["worker"]["name"] == "silent"
    assert "no heartbeat" in payload["reason"]
    assert "x-gpufleet-signature" not in request.headers  # no secret, no signature
    assert (await deliveries(fleet, hook["id"]))[0]["status"] == "delivered"


@both_databases
async def test_replicas_sending_at_once_send_each_delivery_once(
    fleet: Fleet, receiver: Receiver
) -> None:
    hook = await add_webhook(fleet, receiver.url, "job.ended")
    for _ in range(6):
        answer = await fleet.admin.post(f"/api/admin/webhooks/{hook['id']}/test")
        assert answer.status_code == 202 and answer.json()["status"] == "pending"

    sent = await asyncio.gather(*(delivery.deliver_due(fleet.ctx) for _ in range(3)))

    assert sum(sent) == 6
    ids = Counter(r.headers["x-gpufleet-delivery"] for r in receiver.wait_for(6))
    assert set(ids.values()) == {1} and len(ids) == 6
    assert {d["status"] for d in await deliveries(fleet, hook["id"])} == {"delivered"}


async def test_a_receiver_that_cannot_be_reached_is_logged_and_retried_not_fatal(
    fleet: Fleet,
) -> None:
    hooks = [
        await add_webhook(fleet, "http://127.0.0.1:9/refused", "job.ended"),
        await add_webhook(fleet, "http://" + "a" * 300 + ".example/", "job.ended"),
    ]
    for hook in hooks:
        await fleet.admin.post(f"/api/admin/webhooks/{hook['id']}/test")

    assert await delivery.deliver_due(fleet.ctx) == 2

    for hook in hooks:
        [logged] = await deliveries(fleet, hook["id"])
        assert logged["status"] == "pending" and logged["attempts"] == 1
        assert logged["status_code"] is None and logged["error"]


async def held_job(fleet: Fleet, client: Any) -> str:
    """A job of 8 GPUs, held for approval by the `approve_gpus_over` rule."""
    body = {"config": {"command": ["x"]}, "gpu_count": 8}
    answer = await client.post("/api/queue/submit", json=body)
    assert answer.status_code == 201 and answer.json()["status"] == "pending_approval"
    job_id: str = answer.json()["id"]
    return job_id


async def test_a_rejected_job_tells_the_webhooks_what_a_cancelled_one_does(
    fleet: Fleet, receiver: Receiver
) -> None:
    await set_policy(fleet, approve_gpus_over=4, approve_levels=[])
    rita = await client_of(fleet, await add_user(fleet, "rita", "researcher"))
    hook = await add_webhook(fleet, receiver.url, "job.ended")
    rejected, cancelled = await held_job(fleet, rita), await held_job(fleet, rita)

    answer = await fleet.admin.post(f"/api/queue/{rejected}/reject", params={"reason": "too big"})
    assert answer.status_code == 200, answer.text
    assert (await fleet.admin.post(f"/api/queue/{cancelled}/cancel")).status_code == 200
    assert await delivery.deliver_due(fleet.ctx) == 2

    sent = {p["job"]["id"]: p for p in (json.loads(r.body) for r in receiver.wait_for(2))}
    assert set(sent) == {rejected, cancelled}
    assert sent[rejected]["event"] == sent[cancelled]["event"] == "job.cancelled"
    assert sent[rejected]["job"]["status"] == sent[cancelled]["job"]["status"] == "cancelled"
    assert sent[rejected]["job"]["error"].endswith(": too big")
    assert sent[rejected]["job"]["ended_at"] is not None
    assert {d["status"] for d in await deliveries(fleet, hook["id"])} == {"delivered"}


async def test_an_approve_and_a_reject_are_audited_and_wake_the_jobs_watchers(
    fleet: Fleet,
) -> None:
    await set_policy(fleet, approve_gpus_over=4, approve_levels=[])
    rita = await client_of(fleet, await add_user(fleet, "rita", "researcher"))
    approved, rejected = await held_job(fleet, rita), await held_job(fleet, rita)

    done = (
        (approved, "approve", "approved", "queued"),
        (rejected, "reject", "rejected", "cancelled"),
    )
    for job_id, verb, event, new in done:
        with fleet.ctx.hub.subscribe(job_topic(job_id), JOBS_TOPIC) as watching:
            answer = await fleet.admin.post(f"/api/queue/{job_id}/{verb}")
            assert answer.status_code == 200, answer.text
            assert watching.take_fired() == {job_topic(job_id), JOBS_TOPIC}
        events = await fleet.audit(target=job_id)
        [moved] = [e for e in events if e["event_type"] == "job.status_changed"]
        [said] = [e for e in events if e["event_type"] == f"job.{event}"]
        assert moved["detail"] == {"old": "pending_approval", "new": new}
        assert moved["actor"] == said["actor"] and said["actor"].startswith("key:")
        assert (await fleet.job(job_id))["status"] == new


async def add_formatted(fleet: Fleet, url: str, fmt: str, *events: str) -> Any:
    answer = await fleet.admin.post(
        "/api/admin/webhooks", json={"url": url, "events": list(events), "format": fmt}
    )
    assert answer.status_code == 201, answer.text
    assert answer.json()["format"] == fmt
    return answer.json()


async def test_slack_and_discord_webhooks_get_their_own_shapes_signed_over_the_bytes_sent(
    fleet: Fleet,
) -> None:
    agent = await fleet.online_worker("gpu-1")
    with receiving() as slack, receiving() as discord, receiving() as ours:
        hooks = {
            "slack": await add_formatted(fleet, slack.url, "slack", "job.failed"),
            "discord": await add_formatted(fleet, discord.url, "discord", "job.failed"),
            "gpufleet": await add_webhook(fleet, ours.url, "job.failed"),
        }
        answer = await fleet.admin.patch(
            f"/api/admin/webhooks/{hooks['discord']['id']}", json={"secret": SECRET}
        )
        assert answer.status_code == 200 and answer.json()["format"] == "discord"
        fleet.secrets.add(SECRET)
        # A job's error is anyone's words: it must not ping a channel nor forge a link.
        await fleet.submit()
        offer = await agent.next_offer()
        await agent.run(offer)
        hostile = "boom <!channel> <https://evil.example|click> @everyone"
        await agent.finish(offer, "failed", exit_code=3, error=hostile)
        assert await delivery.deliver_due(fleet.ctx) == 3
        [to_slack], [to_discord], [to_ours] = (
            slack.wait_for(1),
            discord.wait_for(1),
            ours.wait_for(1),
        )

    said = json.loads(to_slack.body)
    assert set(said) == {"text", "blocks"} and said["text"].startswith("gpufleet: Job j_")
    assert "failed" in said["text"] and "(exit code 3)" in said["text"]
    assert "<!channel>" not in to_slack.body.decode() and "&lt;!channel&gt;" in said["text"]
    assert said["blocks"][0] == {
        "type": "section",
        "text": {"type": "mrkdwn", "text": said["text"]},
    }
    posted = json.loads(to_discord.body)
    assert set(posted) == {"content", "allowed_mentions"} and "failed" in posted["content"]
    assert posted["allowed_mentions"] == {"parse": []} and len(posted["content"]) <= 2000
    assert to_discord.headers["x-gpufleet-signature"] == signature(SECRET, to_discord.body)
    assert to_slack.headers["content-type"] == "application/json"
    ours_said = json.loads(to_ours.body)
    assert ours_said["event"] == "job.failed" and ours_said["job"]["error"] == hostile
    ids = {r.headers["x-gpufleet-delivery"] for r in (to_slack, to_discord, to_ours)}
    assert len(ids) == 3 and all(i.startswith("d_") for i in ids)


async def test_a_webhooks_format_is_changed_and_audited_and_pending_deliveries_follow_it(
    fleet: Fleet, receiver: Receiver
) -> None:
    hook = await add_webhook(fleet, receiver.url, "job.ended")
    queued = await fleet.admin.post(f"/api/admin/webhooks/{hook['id']}/test")
    assert queued.status_code == 202, queued.text
    answer = await fleet.admin.patch(f"/api/admin/webhooks/{hook['id']}", json={"format": "slack"})
    assert answer.status_code == 200 and answer.json()["format"] == "slack", answer.text
    [audited] = await fleet.audit(type="webhook.updated", target=hook["id"])
    assert audited["detail"] == {"format": "slack"}

    assert await delivery.deliver_due(fleet.ctx) == 1
    [sent] = receiver.wait_for(1)
    assert json.loads(sent.body)["text"].startswith("gpufleet: A test event sent from gpufleet")


async def test_the_submitter_hears_that_a_held_job_was_approved_or_rejected_and_why(
    fleet: Fleet,
) -> None:
    await set_policy(fleet, approve_gpus_over=4, approve_levels=[])
    rita = await client_of(fleet, await add_user(fleet, "rita", "researcher"))
    approved, rejected, cancelled = [await held_job(fleet, rita) for _ in range(3)]
    with receiving() as ours, receiving() as slack, receiving() as deaf:
        await add_webhook(fleet, ours.url, "job.approved", "job.rejected")
        await add_formatted(fleet, slack.url, "slack", "job.rejected")
        await add_webhook(fleet, deaf.url, "job.ended", "worker.lost")

        assert (await fleet.admin.post(f"/api/queue/{approved}/approve")).status_code == 200
        reason = {"reason": "ask for 2 GPUs, not 8 <!here>"}
        answer = await fleet.admin.post(f"/api/queue/{rejected}/reject", params=reason)
        assert answer.status_code == 200, answer.text
        assert (await rita.post(f"/api/queue/{cancelled}/cancel")).status_code == 200
        assert await delivery.deliver_due(fleet.ctx) == 5  # ours 2, slack 1, deaf 2 cancels
        heard = [json.loads(r.body) for r in ours.wait_for(2)]
        [to_slack] = slack.wait_for(1)
        assert {json.loads(r.body)["event"] for r in deaf.wait_for(2)} == {"job.cancelled"}

    said = {p["event"]: p for p in heard}
    assert set(said) == {"job.approved", "job.rejected"}  # never a cancel by its owner
    assert said["job.approved"]["job"]["id"] == approved
    assert said["job.approved"]["job"]["user_name"] == "rita"
    assert said["job.approved"]["by"] == "admin" and said["job.approved"]["reason"] is None
    assert said["job.rejected"]["job"]["id"] == rejected
    assert said["job.rejected"]["reason"] == reason["reason"]
    text = json.loads(to_slack.body)["text"]
    assert text.startswith("gpufleet: rita's job ") and "rejected by admin" in text
    assert "&lt;!here&gt;" in text and "<!here>" not in text
    # The job's page says so too: who approved it, who rejected it and why.
    done = await fleet.job(approved)
    assert done["approved_by"] and done["approved_by_name"] and done["rejected_by"] is None
    refused = await fleet.job(rejected)
    assert refused["rejected_by"] == done["approved_by"] and refused["rejected_by_name"]
    assert refused["error"].endswith(reason["reason"])
