"""Which artifact store the orchestrator opens, decided once at start from its settings.

`url` is a folder (a path or `file://…`): the data-folder backend, enough for one
orchestrator. `s3://bucket/prefix` is object storage, which several replicas share; its
endpoint, region and keys come from these settings, else from the standard `AWS_*`
environment variables (read when the store is opened, never at import). `gs://` and `az://`
come with the library for free and take their credentials from the environment only.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlsplit

from obstore.exceptions import BaseError
from obstore.store import LocalStore, ObjectStore, S3Store, from_url
from pydantic import BaseModel, ConfigDict, SecretStr

from gpufleet.artifacts.store import ArtifactStore
from gpufleet.errors import ConfigurationError

OBJECT_SCHEMES = ("s3", "gs", "az")


class ArtifactSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    url: str  # a folder, file://…, s3://bucket/prefix, gs://…, az://…
    endpoint: str | None = None  # an S3-compatible server (MinIO, R2, moto); None: AWS
    region: str | None = None
    access_key_id: str | None = None
    secret_access_key: SecretStr | None = None


def default_artifact_url(data_dir: Path) -> str:
    return str(data_dir / "artifacts")


def open_artifact_store(settings: ArtifactSettings) -> ArtifactStore:
    """The store `settings.url` names; `ConfigurationError` if it cannot be one."""
    scheme = urlsplit(settings.url).scheme
    try:
        if scheme in OBJECT_SCHEMES:
            return ArtifactStore(_object_store(settings, scheme), name=f"bucket {settings.url}")
        if scheme in ("", "file"):
            folder = _folder(settings.url)
            return ArtifactStore(
                LocalStore(folder, mkdir=True), name=f"folder {folder}", folder=folder
            )
    except (BaseError, OSError, ValueError) as exc:
        raise ConfigurationError(
            f"the artifact store {settings.url!r} cannot be opened ({exc}); fix --artifacts "
            "or its credentials"
        ) from exc
    raise ConfigurationError(
        f"the artifact store {settings.url!r} has an unknown scheme {scheme!r}; give --artifacts "
        "a folder, file://, s3://, gs:// or az://"
    )


def _folder(url: str) -> Path:
    path = Path(urlsplit(url).path) if url.startswith("file:") else Path(url)
    return path.expanduser().resolve()


def _object_store(settings: ArtifactSettings, scheme: str) -> ObjectStore:
    if scheme != "s3":
        return from_url(settings.url)
    parts = urlsplit(settings.url)
    options = {
        "endpoint": settings.endpoint,
        "region": settings.region,
        "access_key_id": settings.access_key_id,
        "secret_access_key": (
            settings.secret_access_key.get_secret_value() if settings.secret_access_key else None
        ),
    }
    config = {k: v for k, v in options.items() if v is not None}
    # A plain-HTTP endpoint (MinIO or moto on a private network), named here or in
    # AWS_ENDPOINT_URL, which obstore reads itself.
    endpoint = settings.endpoint or os.environ.get("AWS_ENDPOINT_URL") or ""
    allow_http = endpoint.startswith("http://")
    return S3Store(
        parts.netloc,
        prefix=parts.path.strip("/") or None,
        config=config,  # type: ignore[arg-type]
        client_options={"allow_http": allow_http},
    )
