"""The pure rules of webhooks: URLs, events, signatures, backoff; and sealed secrets."""

from __future__ import annotations

import hashlib
import hmac

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpufleet.domain import webhook_formats
from gpufleet.domain import webhooks as rules
from gpufleet.domain.permissions import PERMISSION_HELP, PERMISSIONS
from gpufleet.domain.secrets import open_secret, seal_secret
from gpufleet.domain.states import TERMINAL_JOB
from gpufleet.domain.webhooks import DeliveryStatus, Event, PayloadFormat, Subscription
from gpufleet.errors import InvalidInput


@pytest.mark.parametrize(
    "url", ["http://127.0.0.1:8080/hook", "https://hooks.example.com/a?b=c", "HTTPS://X.Y/"]
)
def test_http_and_https_urls_with_a_host_are_accepted(url: str) -> None:
    assert rules.check_url(f"  {url} ") == url


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "gopher://x", "//x.y/", "http:/x", "https://", "http://a b/", ""],
)
def test_other_urls_are_refused(url: str) -> None:
    with pytest.raises(InvalidInput):
        rules.check_url(url)


def test_every_job_end_state_has_an_event_and_job_ended_hears_them_all() -> None:
    assert set(rules.JOB_END_EVENTS) == set(TERMINAL_JOB)
    for event in rules.JOB_END_EVENTS.values():
        assert Subscription.JOB_ENDED in rules.HEARD_BY[event]
    assert rules.HEARD_BY[Event.JOB_FAILED] == {Subscription.JOB_ENDED, Subscription.JOB_FAILED}
    assert rules.HEARD_BY[Event.TEST] == frozenset()  # sent only to the webhook tested


def test_subscriptions_are_checked_and_each_is_explained() -> None:
    assert rules.check_subscriptions(["worker.lost", "worker.lost"]) == [Subscription.WORKER_LOST]
    with pytest.raises(InvalidInput, match="choose from"):
        rules.check_subscriptions(["job.started"])
    with pytest.raises(InvalidInput, match="at least one"):
        rules.check_subscriptions([])
    assert set(rules.SUBSCRIPTION_HELP) == set(Subscription)
    assert set(PERMISSION_HELP) == PERMISSIONS


@given(st.text(min_size=1, max_size=64), st.binary(max_size=512))
def test_the_signature_is_the_hmac_sha256_of_the_raw_body(secret: str, body: bytes) -> None:
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert rules.sign(secret, body) == f"sha256={expected}"


def test_a_delivery_is_retried_with_growing_waits_then_given_up() -> None:
    waits = []
    for attempt in range(1, rules.MAX_ATTEMPTS + 1):
        status, wait = rules.after_try(attempt, 500)
        waits.append(wait)
        assert status is (
            DeliveryStatus.PENDING if attempt < rules.MAX_ATTEMPTS else DeliveryStatus.FAILED
        )
    assert waits[:-1] == sorted(waits[:-1]) and waits[0] == rules.FIRST_RETRY_S
    assert max(w for w in waits if w) <= rules.LONGEST_WAIT_S and waits[-1] is None
    assert rules.after_try(1, 204) == (DeliveryStatus.DELIVERED, None)
    assert rules.after_try(1, None)[0] is DeliveryStatus.PENDING  # no answer at all
    assert rules.after_try(1, 301)[0] is DeliveryStatus.PENDING  # redirects are not followed


@given(st.text(max_size=300))
def test_a_sealed_secret_opens_only_with_the_same_key_and_owner(secret: str) -> None:
    key, other = b"k" * 32, b"o" * 32
    sealed = seal_secret(key, "webhook secret", "wh_1", secret)
    assert len(secret) < 8 or secret not in sealed
    assert open_secret(key, "webhook secret", "wh_1", sealed) == secret
    assert open_secret(other, "webhook secret", "wh_1", sealed) is None
    assert open_secret(key, "webhook secret", "wh_2", sealed) is None  # not movable to a row
    assert open_secret(key, "webhook secret", "wh_1", "garbage") is None


@pytest.mark.parametrize(("secret", "ok"), [("s" * 15, False), ("s" * 16, True), ("", True)])
def test_a_secret_has_at_least_16_characters_or_none(secret: str, ok: bool) -> None:
    if ok:
        assert rules.check_secret(secret) == (secret or None)
    else:
        with pytest.raises(InvalidInput, match="at least 16"):
            rules.check_secret(secret)


# ---- payload formats (domain/webhook_formats.py) ----------------------------------------

_PAYLOADS = {
    "job.failed": {"job": {"id": "j_1", "status": "failed", "exit_code": 3, "error": "x"}},
    "worker.lost": {"worker": {"name": "gpu-1", "job_id": "j_1"}, "reason": "silent"},
    "job.approved": {"job": {"id": "j_1", "user_name": "rita"}, "by": "lena", "reason": None},
    "job.rejected": {"job": {"id": "j_1", "user_name": "rita"}, "by": "lena", "reason": "no"},
    "test": {"webhook_id": "wh_1"},
}


def _body(event: str, **more: object) -> str:
    return orjson.dumps({"id": "d_1", "event": event, "occurred_at": "now", **more}).decode()


def test_formats_are_checked_and_each_is_explained() -> None:
    assert rules.check_format(None) is PayloadFormat.GPUFLEET
    assert rules.check_format(" Slack") is PayloadFormat.SLACK
    assert set(rules.FORMAT_HELP) == set(PayloadFormat)
    for wrong in ("", "teams", "slack,discord", "x" * 500):
        with pytest.raises(InvalidInput, match="choose one of gpufleet, slack, discord") as exc:
            rules.check_format(wrong)
        assert len(exc.value.message) < 120  # a long value is not echoed back whole


@pytest.mark.parametrize("event", [*_PAYLOADS, "job.completed", "job.cancelled"])
def test_every_event_reads_as_a_sentence_in_slack_and_discord_and_ours_is_unchanged(
    event: str,
) -> None:
    body = _body(event, **_PAYLOADS.get(event, {"job": {"id": "j_1", "status": "x"}}))
    assert webhook_formats.render(PayloadFormat.GPUFLEET, body) == body.encode()
    slack = orjson.loads(webhook_formats.render(PayloadFormat.SLACK, body))
    discord = orjson.loads(webhook_formats.render(PayloadFormat.DISCORD, body))
    named = {"worker.lost": "gpu-1", "test": "wh_1"}.get(event, "j_1")  # what it is about
    assert slack["text"].startswith("gpufleet: ") and named in slack["text"]
    assert slack["blocks"][0]["text"]["text"] == slack["text"]
    assert discord["content"] == webhook_formats.summary(orjson.loads(body))


@given(st.text(max_size=5000), st.text(max_size=200))
def test_what_people_write_never_pings_nor_overflows_a_message(error: str, name: str) -> None:
    body = _body("job.rejected", job={"id": "j_1", "user_name": name}, by=name, reason=error)
    slack = orjson.loads(webhook_formats.render(PayloadFormat.SLACK, body))
    discord = orjson.loads(webhook_formats.render(PayloadFormat.DISCORD, body))
    assert "<" not in slack["text"] and ">" not in slack["text"]  # no <!channel>, no <url|x>
    assert len(slack["text"]) <= webhook_formats.SLACK_TEXT_MAX
    assert len(discord["content"]) <= webhook_formats.DISCORD_CONTENT_MAX
    assert discord["allowed_mentions"] == {"parse": []}
