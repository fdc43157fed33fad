"""`gpufleet jobs watch`'s lines, as pure functions of the job the API returns."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from gpufleet.cli.follow import _moment


def job(status: str, ended_at: str | None = None) -> dict[str, Any]:
    return {
        "status": status,
        "ended_at": ended_at,
        "waiting": None,
        "worker_id": "w_1",
        "attempts": 1,
    }


def test_a_job_that_ended_earlier_is_stamped_with_when_it_ended_not_now():
    """#15.10: watching a job that ended an hour ago printed the current time."""
    ended = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1, minutes=7)
    line = _moment(job("completed", ended.isoformat()))
    assert line == f"{ended.astimezone().strftime('%H:%M:%S')} completed"


def test_a_running_job_is_stamped_with_the_time_the_move_was_seen():
    before = datetime.now().replace(microsecond=0)
    stamp, rest = _moment(job("running")).split(" ", 1)
    seen = datetime.combine(before.date(), datetime.strptime(stamp, "%H:%M:%S").time())
    assert abs((seen - before).total_seconds()) <= 2 or before.hour == 23  # midnight wraps
    assert rest == "running on w_1 (attempt 1)"
