"""Small jobs that show what a gpufleet job looks like; installed with gpufleet so that every
worker can run them with `python -m gpufleet.examples.<name>`."""
