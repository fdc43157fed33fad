"""A delivery's body in the shape its webhook asks (`PayloadFormat`): gpufleet's own JSON as
written to the outbox, or a Slack or Discord incoming webhook's message made from it at send
time (so a webhook's format changed before a send applies to it, as a URL change does).

What a job or worker says (a job's error, a config name, a reason) is written by people and
programs that an admin does not vouch for: Slack's control characters are escaped, so an
error cannot ping `<!channel>` or forge a link, and Discord is told to parse no mentions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from gpufleet.domain.webhooks import PayloadFormat

SLACK_TEXT_MAX = 3000  # a Slack section block's text
DISCORD_CONTENT_MAX = 2000  # a Discord message's content
FIELD_MAX = 500  # one value quoted in a message (an error, a reason)


def _clip(value: Any, limit: int = FIELD_MAX) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _job_name(job: dict[str, Any], word: str = "Job") -> str:
    config = job.get("config_name")
    return f"{word} {job.get('id')}" + (f" ({_clip(config, 128)})" if config else "")


def _ended(p: dict[str, Any]) -> str:
    job = p.get("job") or {}
    status = job.get("status", "ended")
    said = f"{_job_name(job)} {status}"
    if job.get("worker_name"):
        said += f" on {_clip(job['worker_name'], 128)}"
    if job.get("exit_code") is not None:
        said += f" (exit code {job['exit_code']})"
    return said + (f": {_clip(job['error'])}" if job.get("error") else ".")


def _lost(p: dict[str, Any]) -> str:
    worker = p.get("worker") or {}
    said = f"Worker {_clip(worker.get('name'), 128)} went offline: {_clip(p.get('reason'))}"
    return said + (f" (its job {worker['job_id']})" if worker.get("job_id") else "")


def _gpu_fault(p: dict[str, Any]) -> str:
    worker = p.get("worker") or {}
    said = (
        f"Worker {_clip(worker.get('name'), 128)} took GPU {_clip(p.get('gpu_index'), 8)} out: "
        f"{_clip(p.get('reason'))}"
    )
    return said + (f" (its job {p['job_id']} was requeued)" if p.get("job_id") else "")


def _judged(p: dict[str, Any]) -> str:
    job = p.get("job") or {}
    # "rita's job j_1 …": the submitter named as they are, never re-cased
    name = _job_name(job, f"{_clip(job['user_name'], 64)}'s job" if job.get("user_name") else "Job")
    if p.get("event") == "job.approved":
        return f"{name} was approved by {_clip(p.get('by'), 64)}; it is queued."
    reason = f": {_clip(p['reason'])}" if p.get("reason") else "."
    return f"{name} was rejected by {_clip(p.get('by'), 64)}{reason}"


def _test(p: dict[str, Any]) -> str:
    return f"A test event sent from gpufleet to webhook {p.get('webhook_id')}"


_SAYS: dict[str, Callable[[dict[str, Any]], str]] = {
    "job.completed": _ended,
    "job.failed": _ended,
    "job.cancelled": _ended,
    "worker.lost": _lost,
    "gpu.fault": _gpu_fault,
    "job.approved": _judged,
    "job.rejected": _judged,
    "test": _test,
}


def summary(payload: dict[str, Any]) -> str:
    """One sentence a person reads: what happened, to what."""
    says = _SAYS.get(str(payload.get("event")))
    text = says(payload) if says else f"An event, {_clip(payload.get('event'), 64)}"
    return "gpufleet: " + text


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack(payload: dict[str, Any]) -> dict[str, Any]:
    text = _clip(_slack_escape(summary(payload)), SLACK_TEXT_MAX)
    context = _slack_escape(f"{payload.get('event')} · {payload.get('occurred_at')}")
    return {
        "text": text,  # the notification's words, and the whole message where blocks are off
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": text}},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": context}]},
        ],
    }


def _discord(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": _clip(summary(payload), DISCORD_CONTENT_MAX),
        "allowed_mentions": {"parse": []},  # no @everyone, @here, user or role pings
    }


def render(fmt: PayloadFormat, body: str) -> bytes:
    """The bytes sent for the outbox's `body` (gpufleet's JSON) to a webhook of `fmt`."""
    if fmt is PayloadFormat.GPUFLEET:
        return body.encode()
    payload = orjson.loads(body)
    shaped = _slack(payload) if fmt is PayloadFormat.SLACK else _discord(payload)
    return orjson.dumps(shaped)
