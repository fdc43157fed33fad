"""The orchestrator's typed settings, built by the CLI from flags and environment."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpufleet.address import default_public_url
from gpufleet.artifacts import DEFAULT_MAX_JOB_BYTES
from gpufleet.artifacts.backends import ArtifactSettings, default_artifact_url
from gpufleet.domain.webhook_targets import AllowList
from gpufleet.domain.webhooks import SEND_TIMEOUT_S
from gpufleet.errors import ConfigurationError

# A worker may miss one heartbeat (a slow request, a busy machine) without being marked
# offline: the timeout must span this many of the intervals the server tells workers.
HEARTBEATS_PER_TIMEOUT = 2
# The released SimpleTuner agent heartbeats every 30 s whatever it is told at registration
# (gpufleet's own agent follows `heartbeat_interval`).
SIMPLETUNER_AGENT_HEARTBEAT = 30.0


class ServerSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(8001, ge=0, le=65535)
    data_dir: Path = Path(".gpufleet")
    database_url: str | None = None  # default: SQLite in the data folder
    heartbeat_timeout: float = Field(120.0, gt=0)
    health_interval: float = Field(60.0, gt=0)
    usage_interval: float = Field(30.0, gt=0)  # the policy loop: usage, samples, preemption
    ack_timeout: float = Field(30.0, gt=0)
    ephemeral_cleanup_after: float = Field(3600.0, ge=0)
    heartbeat_interval: float = Field(30.0, gt=0)  # told to workers at registration
    local_gpus: str = "none"  # auto | none | 0,1 (the embedded local runner)
    tls_cert: Path | None = None  # set when serving HTTPS: the certificate served
    audit_key_file: Path | None = None  # default: <data-dir>/audit.key
    auth_failure_limit: int = Field(20, ge=0)  # failed authentications per client per window
    auth_failure_window: float = Field(60.0, gt=0)
    poison_after_workers: int = Field(3, ge=1)  # see domain.states.failed_to_start
    print_admin_key: bool = True
    # The address workers elsewhere use (`--public-url`); None: `default_public_url`.
    public_url: str | None = None
    # The artifact store (docs/artifacts.md): a folder, file://… or s3://bucket/prefix;
    # None: <data-dir>/artifacts.
    artifacts: str | None = None
    artifact_max_job_bytes: int = Field(DEFAULT_MAX_JOB_BYTES, ge=0)
    # Artifacts of ended jobs are deleted this many days after the job ended (0: kept
    # forever); each job keeps its newest `keep_checkpoints` checkpoints (0: every one).
    artifact_retention_days: float = Field(30.0, ge=0, le=36500)
    keep_checkpoints: int = Field(3, ge=0, le=10000)
    retention_interval: float = Field(3600.0, gt=0)  # how often the retention sweep runs
    # One webhook send's deadline, connect to the answer's last byte (docs/webhooks.md).
    webhook_timeout: float = Field(SEND_TIMEOUT_S, gt=0, le=300)
    # Internal hosts and networks webhooks may reach anyway (`--webhook-allow-hosts`).
    webhook_allow_hosts: tuple[str, ...] = ()

    @field_validator("webhook_allow_hosts")
    @classmethod
    def _allow_list_reads(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        AllowList.parse(entries)  # its ValueError names the entry
        return entries

    def webhook_allow(self) -> AllowList:
        return AllowList.parse(self.webhook_allow_hosts)

    @model_validator(mode="after")
    def _timeout_spans_heartbeats(self) -> ServerSettings:
        least = HEARTBEATS_PER_TIMEOUT * self.heartbeat_interval
        if self.heartbeat_timeout < least:
            raise ConfigurationError(
                f"--heartbeat-timeout {self.heartbeat_timeout:g} s is less than twice "
                f"--heartbeat-interval ({self.heartbeat_interval:g} s), so workers would go "
                f"offline between two heartbeats: set --heartbeat-timeout to at least "
                f"{least:g} s or lower --heartbeat-interval"
            )
        return self

    def worker_url(self) -> str:
        """The orchestrator URL pasted into worker commands, as told or guessed."""
        if self.public_url:
            return self.public_url
        return default_public_url(self.host, self.port, tls=self.tls_cert is not None)

    def artifact_settings(self) -> ArtifactSettings:
        """The artifact store to open; object storage takes its endpoint and keys from the
        usual AWS_* variables (read when it is opened)."""
        return ArtifactSettings(url=self.artifacts or default_artifact_url(self.data_dir))

    def simpletuner_agent_warning(self) -> str | None:
        """Why released SimpleTuner agents would flap under these settings, if they would."""
        least = HEARTBEATS_PER_TIMEOUT * SIMPLETUNER_AGENT_HEARTBEAT
        if self.heartbeat_timeout >= least:
            return None
        return (
            f"--heartbeat-timeout {self.heartbeat_timeout:g} s is below {least:g} s: the "
            f"released SimpleTuner agent heartbeats every {SIMPLETUNER_AGENT_HEARTBEAT:g} s "
            "whatever --heartbeat-interval says, so such workers would go offline and back "
            f"again; if any connect, use --heartbeat-timeout {least:g}s or more"
        )
