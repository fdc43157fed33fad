"""The offer of an attempt, as both its first sending (dispatch) and any resend (streams)
build it: the job's config as the worker runs it, and the attempt's upload token."""

from __future__ import annotations

from gpufleet import protocol
from gpufleet.domain import publishing
from gpufleet.domain.records import Job
from gpufleet.domain.secrets import upload_token
from gpufleet.protocol import Event
from gpufleet.server.settings import ServerSettings


def job_offer(settings: ServerSettings, key: bytes, job: Job, attempt_id: str) -> Event:
    token = upload_token(key, attempt_id)
    config = publishing.offered_config(
        job.config, public_url=settings.worker_url(), job_id=job.id, upload_token=token
    )
    return protocol.job_submit(job.id, attempt_id, config, job.gpu_count, upload_token=token)
