"""The benchmark harness: a real `gpufleet server`, simulated workers, scenarios, a report.

`python -m bench --help`; `make bench` runs every scenario at full size.
"""
