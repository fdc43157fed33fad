"""On PYTHONPATH for a local pool's workers (tests/e2e/test_pools_local.py): a worker started
with its token in its environment leaves it in its work folder (`worker.token`) before it
hides it (worker/keys.py), so a test can show the token refused once the launch has ended.
Every other process (the server, jobs, the worker started again without it) does nothing.

A worker of a pool named `unreachable-…` is told to trust a CA file that is not one
(GPUFLEET_CA_CERT), so it exits before it registers: a launch that never calls home."""

import os
from pathlib import Path

if (token := os.environ.get("GPUFLEET_WORKER_TOKEN")) and (
    folder := os.environ.get("GPUFLEET_WORK_DIR")
):
    Path(folder, "worker.token").write_text(token)
if os.environ.get("GPUFLEET_POOL", "").startswith("unreachable-") and (
    folder := os.environ.get("GPUFLEET_WORK_DIR")
):
    bad_ca = Path(folder, "not-a-ca.pem")
    bad_ca.write_text("not a certificate\n")
    os.environ["GPUFLEET_CA_CERT"] = str(bad_ca)
