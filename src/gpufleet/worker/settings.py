"""The worker agent's settings: one frozen object, built by the CLI or by an embedding server."""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from urllib.parse import urlsplit

from gpufleet.errors import ConfigurationError
from gpufleet.worker.jobuser import JobUser


@dataclass(frozen=True)
class AgentSettings:
    # One URL, or several comma-separated (replicas sharing one database: the agent fails
    # over among them). Once built, `orchestrator_url` is the first.
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
    # Bytes per second for artifact and checkpoint uploads; 0: unlimited.
    upload_bandwidth: int = 0
    # On SIGTERM (a spot instance's notice): how long a job that handles the checkpoint
    # signal gets to write its checkpoint and have it uploaded, before it is stopped.
    preempt_grace: float = 30.0
    # Jobs run as this OS user (`--run-as`); None: as the worker's own. Checked when built:
    # `job_user` is the user resolved.
    run_as: str | None = None
    job_user: JobUser | None = field(default=None, init=False)
    # The agent is the whole process (`gpufleet worker`): its id labels every log line. Not
    # for the orchestrator's embedded local runner, whose process logs for the orchestrator.
    labels_process_logs: bool = False
    # Once built, every URL of `orchestrator_url`, in order, without duplicates. URLs given
    # here are appended, so `dataclasses.replace` keeps the list.
    orchestrator_urls: tuple[str, ...] = ()
    # Tunables below have no CLI flag; tests shorten them.
    log_flush_interval: float = 0.5
    log_flush_lines: int = 200
    progress_interval: float = 1.0
    reconnect_base: float = 0.5
    reconnect_cap: float = 30.0
    request_timeout: float = 15.0
    stream_read_timeout: float = 45.0  # the orchestrator pings every 15 s

    def __post_init__(self) -> None:
        urls = parse_urls(self.orchestrator_url, *self.orchestrator_urls)
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
        if self.upload_bandwidth < 0 or self.preempt_grace < 0:
            raise ConfigurationError(
                "--upload-bandwidth and --preempt-grace must not be negative (0: unlimited, none)"
            )
        object.__setattr__(self, "orchestrator_url", urls[0])
        object.__setattr__(self, "orchestrator_urls", urls)
        object.__setattr__(self, "worker_token", token)
        object.__setattr__(self, "work_dir", self.work_dir.expanduser().resolve())
        object.__setattr__(self, "labels", MappingProxyType(dict(self.labels)))
        if self.run_as:
            object.__setattr__(self, "job_user", JobUser.resolve(self.run_as.strip()))

    def tls_verify(self) -> ssl.SSLContext | bool:
        """What httpx's `verify=` gets: a context trusting --ca-cert, the defaults, or False."""
        if not self.verify_tls:
            return False
        if self.ca_cert is not None:
            return ssl.create_default_context(cafile=str(self.ca_cert))
        return True


_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b(?:/s)?)?\s*$", re.IGNORECASE)
_RATE_FACTOR = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
MAX_RATE = 1024**5  # a petabyte a second: past any link, and past a typo's reach


def parse_rate(text: str) -> int:
    """Bytes per second from `text` like 0, 500000, 800K, 50M or 1G (1024-based); 0 or empty:
    unlimited. `ConfigurationError` saying how to write it otherwise."""
    if not text.strip():
        return 0
    match = _RATE.match(text)
    if not match:
        raise ConfigurationError(
            f"--upload-bandwidth {text[:40]!r} is not a rate: write bytes per second like "
            "800K, 50M or 1G (0: unlimited)"
        )
    rate = float(match.group(1)) * _RATE_FACTOR[match.group(2).lower()]
    if rate > MAX_RATE:
        raise ConfigurationError(
            f"--upload-bandwidth {text[:40]!r} is past any link; write 0 for unlimited"
        )
    return int(rate)


def parse_urls(*texts: str) -> tuple[str, ...]:
    """The orchestrator URLs in comma-separated `texts`, tidied, checked, duplicates dropped."""
    entries = [entry.strip() for text in texts for entry in text.split(",")]
    urls: dict[str, None] = {}  # an ordered set
    for entry in [entry for entry in entries if entry] or [""]:
        url = entry.rstrip("/")
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ConfigurationError(
                f"--orchestrator-url {entry!r} is not an http(s) URL: pass one like "
                "https://orchestrator.example.com:8001 (several: comma-separated)"
            )
        urls[url] = None
    return tuple(urls)
