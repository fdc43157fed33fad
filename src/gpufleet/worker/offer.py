"""The `job_submit` event an agent is sent, as it is first read: the job and attempt it names
(what the job runs is read from it by `worker/job.py` `JobSpec.from_offer`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpufleet.errors import AgentError

# An id the worker can put in a report's URL as it is: the orchestrator's ids are such.
_WIRE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.~-]{0,199}")


class BadOffer(AgentError):
    """A `job_submit` event this agent cannot make sense of."""


@dataclass(frozen=True)
class Offer:
    """A `job_submit` event whose job and attempt can be reported on, however odd the rest."""

    job_id: str
    attempt_id: str | None
    event: Mapping[str, Any]

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> Offer:
        """Raises `BadOffer` for an offer that names no job (or attempt) a report could name."""
        job_id, attempt_id = event.get("job_id"), event.get("attempt_id")
        if not isinstance(job_id, str) or not _WIRE_ID.fullmatch(job_id):
            raise BadOffer(f"job_submit without a usable job_id: {_excerpt(event)}")
        if attempt_id is not None and (
            not isinstance(attempt_id, str) or not _WIRE_ID.fullmatch(attempt_id)
        ):
            raise BadOffer(
                f"job_submit for {job_id} without a usable attempt_id: {_excerpt(event)}"
            )
        return cls(job_id, attempt_id, event)

    @property
    def label(self) -> str:
        return f"{self.job_id}/{self.attempt_id}" if self.attempt_id else self.job_id


def _excerpt(event: Mapping[str, Any]) -> str:
    try:
        return f"{dict(event)!r:.200}"
    except Exception:  # a repr too deep to write
        return "(unprintable)"
