"""Command-line interface: `gpufleet server`, `gpufleet worker` and the operator commands."""
