"""What starts and stops a pool's machines (docs/capacity.md): one small interface.

A provider launches a worker with the settings it is given (an instance id back), terminates
an instance, and lists the instances it knows of. Its calls may block (a process started, a
cloud's command line); the reconcile loop runs them off the event loop, under a timeout
(`--pool-call-timeout`, which a provider running commands enforces itself: it kills them).
Failures are `ProviderError`s carrying what the provider printed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpufleet.domain import pools
from gpufleet.settings.server import SERVER
from gpufleet.settings.worker import WORKER

DEFAULT_CALL_TIMEOUT_S: float = SERVER.named("pool_call_timeout").default


@dataclass(frozen=True, slots=True)
class WorkerLaunch:
    """What a launched worker is told: the environment `gpufleet worker` reads."""

    orchestrator_url: str
    token: str
    name: str
    persistent: bool
    pool: str
    work_dir: Path  # where a worker on this machine keeps its jobs and its log
    ca_cert: Path | None = None
    gpus: int = 0  # the pool's GPUs a worker: what a batch job asks its scheduler for

    def environment(self) -> Mapping[str, str]:
        env = {
            "GPUFLEET_ORCHESTRATOR_URL": self.orchestrator_url,
            "GPUFLEET_WORKER_TOKEN": self.token,
            "GPUFLEET_WORKER_NAME": self.name,
            "GPUFLEET_WORKER_PERSISTENT": "1" if self.persistent else "0",
            "GPUFLEET_POOL": self.pool,
        }
        if self.ca_cert is not None:
            env["GPUFLEET_CA_CERT"] = str(self.ca_cert)
        return env


@dataclass(frozen=True, slots=True)
class Launched:
    """A launch's answer with what the provider printed on the way (kept with the launch)."""

    instance_id: str
    stderr: str = ""


class Provider(Protocol):
    def launch(self, worker: WorkerLaunch) -> str | Launched:
        """Start a machine running the worker; its instance id."""
        ...

    def terminate(self, instance_id: str) -> None:
        """Stop the instance (one already gone is no error)."""
        ...

    def list(self) -> list[str]:
        """The instances it knows of that are up."""
        ...


def inherited_environment() -> dict[str, str]:
    """The orchestrator's environment less its own settings (a database URL, a bucket's key),
    which a provider's commands and its workers' jobs must not read; a worker's setting set
    there is passed on."""
    for_workers = {var for setting in WORKER for var in setting.env_vars}
    own = {var for setting in SERVER for var in setting.env_vars} - for_workers
    return {name: value for name, value in os.environ.items() if name not in own}


class Providers:
    """The providers of the pools, one a kind of configuration, made when first needed;
    `call_timeout_s` is `--pool-call-timeout`."""

    def __init__(
        self, local: Provider | None = None, *, call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S
    ) -> None:
        from gpufleet.server.providers.local import LocalProvider

        self._local = local or LocalProvider()
        self.call_timeout_s = call_timeout_s

    def of(self, pool: pools.Pool) -> Provider | None:
        """The provider for a pool's configuration; None for a kind not built yet."""
        from gpufleet.server.providers.command import CommandProvider
        from gpufleet.server.providers.slurm import SlurmProvider

        config = pool.provider
        if isinstance(config, pools.LocalProvider):
            return self._local
        if isinstance(config, pools.CommandProvider):
            return CommandProvider(config, pool.name, self.call_timeout_s)
        if isinstance(config, pools.SlurmProvider):
            return SlurmProvider(config, pool.name, self.call_timeout_s)
        return None
