"""The worker agent's settings: one frozen object, built by the CLI or by an embedding server."""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from gpufleet.errors import ConfigurationError
from gpufleet.settings.setting import NUMBERS, check_annotations
from gpufleet.settings.worker import WORKER
from gpufleet.worker.jobuser import JobUser


def _declared(name: str) -> Any:
    """A field's default, as the table declares it."""
    default = WORKER.named(name).default
    if callable(default):  # computed when the settings are built: the host name
        return field(default_factory=default)
    if isinstance(default, dict):
        return field(default_factory=lambda: MappingProxyType(dict(default)))
    return default


@dataclass(frozen=True)
class AgentSettings:
    """A worker agent's settings: those of the table in gpufleet/settings/worker.py (each
    annotated here for the type checker, its default and bounds the table's), then the ones
    set in code."""

    # One URL, or several comma-separated (replicas sharing one database: the agent fails
    # over among them). Once built, `orchestrator_url` is the first.
    orchestrator_url: str
    worker_token: str
    run_as: str | None = _declared("run_as")  # None: jobs run as the worker's own user
    name: str = _declared("name")
    persistent: bool = _declared("persistent")
    # A Path is immutable: one default shared by every settings object is safe.
    work_dir: Path = _declared("work_dir")  # noqa: RUF009
    ca_cert: Path | None = _declared("ca_cert")  # noqa: RUF009
    labels: Mapping[str, str] = _declared("labels")
    gpus: tuple[int, ...] | None = _declared("gpus")  # offer only these GPU indices; None: all
    heartbeat_interval: float = _declared("heartbeat_interval")
    reconnect_cap: float = _declared("reconnect_cap")  # the reconnect backoff's longest wait
    cancel_grace: float = _declared("cancel_grace")
    upload_bandwidth: int = _declared("upload_bandwidth")  # bytes per second; 0: unlimited
    # On SIGTERM (a spot instance's notice): how long a job that handles the checkpoint
    # signal gets to write its checkpoint and have it uploaded, before it is stopped.
    cache_size: int = _declared("cache_size")  # bytes of workdir snapshots kept
    env_cache_size: int = _declared("env_cache_size")  # bytes of jobs' virtualenvs kept
    index_url: str | None = _declared("index_url")
    find_links: tuple[str, ...] = _declared("find_links")
    preempt_grace: float = _declared("preempt_grace")
    advertise_addr: str | None = _declared("advertise_addr")  # None: as the orchestrator sees it
    preflight: str | None = _declared("preflight")  # a shell command; None: no check
    preflight_interval: float = _declared("preflight_interval")

    # Set in code, not on the command line.
    verify_tls: bool = True  # `--ssl-no-verify` turns it off
    # Checked when built: the user `run_as` names, resolved.
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
        for declared in WORKER.fields():
            if declared.kind in NUMBERS:
                broken = declared.out_of_bounds(getattr(self, declared.name))
                if broken:
                    raise ConfigurationError(f"{declared.option} {broken}")
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


check_annotations(WORKER, AgentSettings.__annotations__, "AgentSettings")

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
