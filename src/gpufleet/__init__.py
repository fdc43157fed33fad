"""gpufleet: a control plane that spreads GPU training jobs over a fleet of machines."""

__version__ = "0.1.0"
