"""How a SimpleTuner trainer's outputs come home: the `publishing_config` entry its offer gains.

The released trainer publishes `output_dir` through its `publishing_config` providers (its S3
provider is boto3). A SimpleTuner config (a job without `command`) that publishes nowhere
else is pointed at the orchestrator's storage route, `/api/cloud/storage/gpufleet/<job id>/…`,
with the attempt's upload token as the secret; what it PUTs lands as an artifact of that
attempt at `output/<key after the job id>`. A config that names its own publishing is left
as it is: the user chose where the model goes.
"""

from __future__ import annotations

from typing import Any

from gpufleet.errors import InvalidInput

STORAGE_PATH = "/api/cloud/storage"
BUCKET = "gpufleet"
ACCESS_KEY = "local"
_KEYS = ("publishing_config", "--publishing_config")
_UNSET: tuple[object, ...] = (None, "", "None", [], {})
ARTIFACT_FOLDER = "output"


def publishes_elsewhere(config: dict[str, Any]) -> bool:
    """Whether the config names publishing of its own (any non-empty value, as the trainer
    reads it: a list, an object, JSON text or a file path)."""
    return any(config.get(key) not in _UNSET for key in _KEYS)


def storage_entry(public_url: str, job_id: str, upload_token: str) -> dict[str, Any]:
    """The S3 provider entry that sends the trainer's outputs to this orchestrator."""
    base = public_url.rstrip("/")
    return {
        "provider": "s3",
        "bucket": BUCKET,
        "endpoint_url": f"{base}{STORAGE_PATH}",
        "access_key": ACCESS_KEY,
        "secret_key": upload_token,
        "base_path": job_id,
        "use_ssl": base.startswith("https://"),
        "request_headers": {"X-SimpleTuner-Secret": upload_token},
        # One PUT a file: the orchestrator sees each object whole in one request, with no
        # multipart state to keep across replicas.
        "force_single_part": True,
        "required": True,
    }


def offered_config(
    config: dict[str, Any], *, public_url: str, job_id: str, upload_token: str
) -> dict[str, Any]:
    """The config a worker is offered: a SimpleTuner config that publishes nowhere gains the
    storage entry; any other config is returned unchanged (the same object)."""
    if config.get("command") is not None or publishes_elsewhere(config) or not upload_token:
        return config
    entry = storage_entry(public_url, job_id, upload_token)
    return {**{k: v for k, v in config.items() if k not in _KEYS}, "publishing_config": [entry]}


def artifact_path(job_id: str, key: str) -> str:
    """The artifact path a storage key `<job id>/<rest>` lands at: `output/<rest>`.
    `InvalidInput` for a key outside the job's folder (the path itself is checked by
    `artifacts.keys.checked_path` when it is stored)."""
    prefix = f"{job_id}/"
    if not key.startswith(prefix) or len(key) == len(prefix):
        raise InvalidInput(
            f"storage key {key[:120]!r} is not under {prefix!r}; the trainer's base_path "
            "must be the job id the offer named"
        )
    return f"{ARTIFACT_FOLDER}/{key[len(prefix) :]}"


def job_of_key(key: str) -> str:
    """The job a storage key names (its first segment); `InvalidInput` if it names none."""
    job_id, sep, rest = key.partition("/")
    if not job_id or not sep or not rest:
        raise InvalidInput(
            f"storage key {key[:120]!r} does not start with a job id and a file path, as in "
            "'<job id>/models/model.safetensors'"
        )
    return job_id
