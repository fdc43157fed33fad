"""The worker agent's settings: one frozen object, built by the CLI or by an embedding server."""

from __future__ import annotations

import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit

from gpufleet.errors import ConfigurationError


@dataclass(frozen=True)
class AgentSettings:
    orchestrator_url: str
    worker_token: str
    name: str = field(default_factory=socket.gethostname)
    persistent: bool = False
    work_dir: Path = Path(".gpufleet/worker")
    ca_cert: Path | None = None
    verify_tls: bool = True
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    gpus: tuple[int, ...] | None = None  # offer only these GPU indices; None: all
    heartbeat_interval: float = 30.0
    cancel_grace: float = 30.0
    # Tunables below have no CLI flag; tests shorten them.
    log_flush_interval: float = 0.5
    log_flush_lines: int = 200
    progress_interval: float = 1.0
    reconnect_base: float = 0.5
    reconnect_cap: float = 30.0
    request_timeout: float = 15.0
    stream_read_timeout: float = 45.0  # the orchestrator pings every 15 s

    def __post_init__(self) -> None:
        url = self.orchestrator_url.strip().rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"--orchestrator-url {self.orchestrator_url!r} is not an http(s) URL: "
                "pass one like https://orchestrator.example.com:8001"
            )
        token = self.worker_token.strip()
        if not token:
            raise ConfigurationError(
                "--worker-token is empty: pass the token printed when the worker was created"
            )
        if self.ca_cert is not None and not self.ca_cert.is_file():
            raise ConfigurationError(f"--ca-cert {self.ca_cert}: no such file")
        if self.heartbeat_interval <= 0 or self.cancel_grace < 0:
            raise ConfigurationError(
                "--heartbeat-interval must be positive and --cancel-grace not negative"
            )
        object.__setattr__(self, "orchestrator_url", url)
        object.__setattr__(self, "worker_token", token)
        object.__setattr__(self, "work_dir", self.work_dir.expanduser().resolve())
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))

    def tls_verify(self) -> ssl.SSLContext | bool:
        """What httpx's `verify=` gets: a context trusting --ca-cert, the defaults, or False."""
        if not self.verify_tls:
            return False
        if self.ca_cert is not None:
            return ssl.create_default_context(cafile=str(self.ca_cert))
        return True
