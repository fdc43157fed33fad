"""Every setting of `gpufleet server` and `gpufleet worker`, declared once (docs/configuration.md).

`setting.py` says what a setting is; `server.py` and `worker.py` hold each process kind's table;
`reference.py` writes docs/configuration.md from them.
"""
