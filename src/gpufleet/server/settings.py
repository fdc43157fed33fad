"""The orchestrator's typed settings, built by the CLI from flags and environment."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class ServerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8001, ge=0, le=65535)
    data_dir: Path = Path(".gpufleet")
    database_url: str | None = None  # default: SQLite in the data folder
    heartbeat_timeout: float = Field(120.0, gt=0)
    health_interval: float = Field(60.0, gt=0)
    ack_timeout: float = Field(30.0, gt=0)
    ephemeral_cleanup_after: float = Field(3600.0, ge=0)
    heartbeat_interval: float = Field(30.0, gt=0)  # told to workers at registration
    local_gpus: str = "none"  # auto | none | 0,1 (the embedded local runner)
    tls_cert: Path | None = None  # set when serving HTTPS: the certificate served
    audit_key_file: Path | None = None  # default: <data-dir>/audit.key
    auth_failure_limit: int = Field(20, ge=0)  # failed authentications per client per window
    auth_failure_window: float = Field(60.0, gt=0)
    print_admin_key: bool = True
