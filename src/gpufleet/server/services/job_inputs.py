"""What a job takes from its dependencies (docs/jobs.md, Dependencies, Outputs flow): the
artifacts of each upstream its `inputs` globs select, as its offer carries them (where each
goes in the job folder, `inputs/<job id>/<path>`, its size, sha256 and where it downloads
from), and whether an attempt of the job may download an upstream's artifact."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from gpufleet import protocol
from gpufleet.domain.dependencies import selected
from gpufleet.domain.records import Artifact, Job
from gpufleet.store import Queries

INPUTS_FOLDER = "inputs"


async def files(q: Queries, job: Job, attempt_id: str) -> list[dict[str, Any]] | None:
    """The offer's `inputs`; None for a job that takes none (its offer says nothing)."""
    if not job.inputs:
        return None
    out = []
    for upstream, patterns in job.inputs.items():
        newest: dict[str, Artifact] = {}
        for artifact in await q.artifacts_for_job(upstream):  # newest attempt first
            newest.setdefault(artifact.path, artifact)
        for path in selected(patterns, sorted(newest)):
            artifact = newest[path]
            url = protocol.job_artifact_path(job.id, artifact.id)
            out.append(
                {
                    "job_id": upstream,
                    "path": f"{INPUTS_FOLDER}/{upstream}/{path}",
                    "size": artifact.size,
                    "sha256": artifact.sha256,
                    "url": f"{url}?{urlencode({'attempt_id': attempt_id})}",
                    "headers": {},
                }
            )
    return out


def may_take(job: Job, artifact: Artifact) -> bool:
    """Whether `job`'s attempts may download `artifact`: its own, or one its inputs select."""
    if artifact.job_id == job.id:
        return True
    patterns = (job.inputs or {}).get(artifact.job_id) or []
    return bool(selected(patterns, [artifact.path]))
