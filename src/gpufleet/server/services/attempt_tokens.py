"""Writes into a job are bound to its attempt: a worker that registered with
`Feature.ATTEMPT_TOKEN` (gpufleet's agent) sends the attempt's own token, the one its offer
carried (`domain.secrets.upload_token`), in `X-Attempt-Token` beside its worker token.

A job may run as the worker's OS user and reach what the worker holds; whatever it reaches,
it holds at most its own attempt's token, so it can write only into its own attempt. The
check is an HMAC of the attempt id: no query. The released SimpleTuner agent sends no such
header and never says the feature: its writes keep the worker-token-only wire
(docs/security.md says to run its jobs as another OS user)."""

from __future__ import annotations

from gpufleet.domain.matching import Feature
from gpufleet.domain.records import Worker
from gpufleet.domain.secrets import check_upload_token
from gpufleet.errors import Forbidden

HEADER = "X-Attempt-Token"


def check(key: bytes, worker: Worker, attempt_id: str | None, presented: str | None) -> None:
    """Refuse (403) a write into `attempt_id` whose attempt token is missing where the
    worker binds its writes, or is not that attempt's wherever one is sent."""
    if presented is None:
        if Feature.ATTEMPT_TOKEN in worker.features:
            raise Forbidden(
                f"worker {worker.id} sends its attempt's token on every write into a job: "
                f"send the {HEADER} its offer carried (upload_token) for this attempt"
            )
        return
    if attempt_id is None or not check_upload_token(key, attempt_id, presented):
        raise Forbidden(
            f"the {HEADER} is not attempt {str(attempt_id)[:64]}'s token; an attempt's "
            "token writes into that attempt only: send the upload_token of its own offer"
        )
