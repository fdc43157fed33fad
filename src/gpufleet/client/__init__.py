"""The Python client of a gpufleet orchestrator (docs/client.md): `Client`, and the records it
answers. The CLI is built on it (cli/ imports client/, never the other way).

Its names are imported when first asked for: a command that only prints (`gpufleet server
--help`) reads `client.text` without loading the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpufleet.client.client import Client
    from gpufleet.client.records import Job, LogLine, Logs
    from gpufleet.client.sweeps import Sweep, SweepJob
    from gpufleet.client.transfer import Saved

_HOMES = {
    "Client": "gpufleet.client.client",
    "Job": "gpufleet.client.records",
    "LogLine": "gpufleet.client.records",
    "Logs": "gpufleet.client.records",
    "Saved": "gpufleet.client.transfer",
    "Sweep": "gpufleet.client.sweeps",
    "SweepJob": "gpufleet.client.sweeps",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'gpufleet.client' has no attribute {name!r}")


__all__ = ["Client", "Job", "LogLine", "Logs", "Saved", "Sweep", "SweepJob"]
