"""The orchestrator's typed settings, built by the CLI from flags and environment, their
defaults and bounds declared once in gpufleet/settings/server.py."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gpufleet.address import check_public_url, default_public_url
from gpufleet.artifacts.backends import ArtifactSettings, default_artifact_url
from gpufleet.domain.sso import check_issuer, parse_group_map
from gpufleet.domain.webhook_targets import AllowList
from gpufleet.errors import ConfigurationError
from gpufleet.logs import Format
from gpufleet.settings.server import SERVER
from gpufleet.settings.setting import check_annotations

# A worker may miss one heartbeat (a slow request, a busy machine) without being marked
# offline: the timeout must span this many of the intervals the server tells workers.
HEARTBEATS_PER_TIMEOUT = 2
# The released SimpleTuner agent heartbeats every 30 s whatever it is told at registration
# (gpufleet's own agent follows `heartbeat_interval`).
SIMPLETUNER_AGENT_HEARTBEAT = 30.0


def _declared(name: str) -> Any:
    """A field's default and bounds, as the table declares them."""
    found = SERVER.named(name)
    return Field(found.default, gt=found.above, ge=found.least, le=found.most)


class ServerSettings(BaseModel):
    """The orchestrator's settings: those of the table in gpufleet/settings/server.py (each
    annotated here for the type checker, its default and bounds the table's), then the ones
    the command or a test sets in code."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = _declared("host")
    port: int = _declared("port")
    public_url: str | None = _declared("public_url")  # None: `default_public_url`
    data_dir: Path = _declared("data_dir")
    database_url: str | None = _declared("database_url")  # None: SQLite in the data folder
    heartbeat_timeout: float = _declared("heartbeat_timeout")
    health_interval: float = _declared("health_interval")
    usage_interval: float = _declared("usage_interval")
    pool_interval: float = _declared("pool_interval")
    pool_call_timeout: float = _declared("pool_call_timeout")
    fleet_sample_interval: float = _declared("fleet_sample_interval")
    ack_timeout: float = _declared("ack_timeout")
    gang_hold: float = _declared("gang_hold")
    ephemeral_cleanup_after: float = _declared("ephemeral_cleanup_after")
    heartbeat_interval: float = _declared("heartbeat_interval")
    stream_ping_interval: float = _declared("stream_ping_interval")
    local_gpus: str = _declared("local_gpus")
    use_ssl: bool = _declared("use_ssl")
    ssl_cert: Path | None = _declared("ssl_cert")
    ssl_key: Path | None = _declared("ssl_key")
    audit_key_file: Path | None = _declared("audit_key_file")  # None: <data-dir>/audit.key
    auth_failure_limit: int = _declared("auth_failure_limit")
    poison_after_workers: int = _declared("poison_after_workers")
    drain_after_infra_failures: int = _declared("drain_after_infra_failures")
    artifacts: str | None = _declared("artifacts")  # None: <data-dir>/artifacts
    artifact_max_job_bytes: int = _declared("artifact_max_job_bytes")
    workdir_max_bytes: int = _declared("workdir_max_bytes")
    artifact_retention_days: float = _declared("artifact_retention_days")
    keep_checkpoints: int = _declared("keep_checkpoints")
    webhook_timeout: float = _declared("webhook_timeout")
    webhook_allow_hosts: tuple[str, ...] = _declared("webhook_allow_hosts")
    forwarded_allow_ips: str = _declared("forwarded_allow_ips")
    oidc_issuer: str | None = _declared("oidc_issuer")  # None: single sign-on off
    oidc_client_id: str | None = _declared("oidc_client_id")
    oidc_client_secret_file: Path | None = _declared("oidc_client_secret_file")
    oidc_provider_name: str | None = _declared("oidc_provider_name")  # None: the issuer's host
    oidc_scopes: tuple[str, ...] = _declared("oidc_scopes")
    oidc_groups_claim: str = _declared("oidc_groups_claim")
    oidc_group_map: tuple[str, ...] = _declared("oidc_group_map")
    oidc_default_level: str = _declared("oidc_default_level")
    oidc_only: bool = _declared("oidc_only")
    log_level: str = _declared("log_level")
    log_format: Format = _declared("log_format")

    # Set in code, not on the command line.
    tls_cert: Path | None = None  # set when serving HTTPS: the certificate served
    auth_failure_window: float = Field(60.0, gt=0)
    print_admin_key: bool = True
    retention_interval: float = Field(3600.0, gt=0)  # how often the retention sweep runs

    @classmethod
    def from_options(cls, values: Mapping[str, Any], **in_code: Any) -> ServerSettings:
        """The settings of `gpufleet server`'s options; a mistake a `ConfigurationError`
        naming its flag."""
        try:
            return cls(**values, **in_code)
        except ValidationError as exc:
            first = exc.errors()[0]
            flag = SERVER.flag_of(str(first["loc"][0])) if first["loc"] else "--?"
            raise ConfigurationError(f"{flag}: {first['msg']}") from exc

    @model_validator(mode="after")
    def _ssl_files_need_ssl(self) -> ServerSettings:
        if (self.ssl_cert or self.ssl_key) and not self.use_ssl:
            raise ConfigurationError("--ssl-cert and --ssl-key need --ssl")
        return self

    @model_validator(mode="after")
    def _choices_are_the_tables(self) -> ServerSettings:
        for declared in SERVER.fields():
            value = getattr(self, declared.name)
            if declared.choices and value not in declared.choices:
                raise ConfigurationError(
                    f"{declared.option} {value!r} is not one of {', '.join(declared.choices)}"
                )
        return self

    @field_validator("public_url")
    @classmethod
    def _public_url_is_callable(cls, url: str | None) -> str | None:
        return check_public_url(url) if url else None

    @model_validator(mode="after")
    def _oidc_is_whole(self) -> ServerSettings:
        if self.oidc_issuer and not (self.oidc_client_id and self.oidc_client_secret_file):
            raise ConfigurationError(
                "--oidc-issuer needs --oidc-client-id and --oidc-client-secret-file: the "
                "client gpufleet is registered as at the provider (docs/deploy.md)"
            )
        if self.oidc_only and not self.oidc_issuer:
            raise ConfigurationError("--oidc-only needs --oidc-issuer: a provider to sign in at")
        if self.oidc_issuer and not check_issuer(self.oidc_issuer):
            raise ConfigurationError(
                f"--oidc-issuer {self.oidc_issuer!r} is not an https:// URL (http:// only "
                "on this machine's loopback)"
            )
        return self

    @field_validator("oidc_group_map")
    @classmethod
    def _group_map_reads(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        parse_group_map(entries)  # its ValueError names the entry
        return entries

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

    def silence(self) -> timedelta:
        """How long a worker may go unheard before it is lost (`--heartbeat-timeout`)."""
        return timedelta(seconds=self.heartbeat_timeout)

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


check_annotations(SERVER, ServerSettings.__annotations__, "ServerSettings")
