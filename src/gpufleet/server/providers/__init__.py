"""What starts and stops a pool's machines (docs/capacity.md): one small interface.

A provider launches a worker with the settings it is given (an instance id back), terminates
an instance, and lists the instances it knows of. Its calls may block (a process started, a
cloud's command line); the reconcile loop runs them off the event loop, under a timeout.
Failures are `ProviderError`s carrying what the provider printed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpufleet.domain import pools


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


class Provider(Protocol):
    def launch(self, worker: WorkerLaunch) -> str:
        """Start a machine running the worker; its instance id."""
        ...

    def terminate(self, instance_id: str) -> None:
        """Stop the instance (one already gone is no error)."""
        ...

    def list(self) -> list[str]:
        """The instances it knows of that are up (a slurm provider's: of every pool, or of
        the pool it is given)."""
        ...


class Providers:
    """The providers of the pools, one a kind of configuration, made when first needed."""

    def __init__(self, local: Provider | None = None) -> None:
        from gpufleet.server.providers.local import LocalProvider

        self._local = local or LocalProvider()

    def of(self, config: pools.Provider) -> Provider | None:
        """The provider for a pool's configuration; None for a kind not built yet."""
        if isinstance(config, pools.LocalProvider):
            return self._local
        if isinstance(config, pools.SlurmProvider):
            from gpufleet.server.providers.slurm import SlurmProvider

            return SlurmProvider(config)  # stateless: Slurm knows its jobs
        return None
