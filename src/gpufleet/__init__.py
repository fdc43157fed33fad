"""gpufleet: a control plane that spreads GPU training jobs over a fleet of machines."""

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from gpufleet.client import Client


def __getattr__(name: str) -> Any:
    """`from gpufleet import Client`, imported only when asked for (a worker or the server
    has no use for it)."""
    if name == "Client":
        from gpufleet.client import Client

        return Client
    raise AttributeError(f"module 'gpufleet' has no attribute {name!r}")


__all__ = ["Client"]
