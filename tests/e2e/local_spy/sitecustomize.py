"""On PYTHONPATH for a local pool's workers in the crash and replica tests (#36), with the
folder $GF_TEST_MACHINES: a worker started with its token in its environment (by the `local`
provider) notes its start in `starts` (its pid, its parent's pid, its name), calls the
orchestrators listed in `urls` if there is one, and the start numbered in `hold` waits for
the file `up` before it goes on (a machine slow to come up). Every other process (the server,
jobs, the worker started again without its token: worker/keys.py) does nothing."""

import os
import time
from pathlib import Path

if (folder := os.environ.get("GF_TEST_MACHINES")) and os.environ.get("GPUFLEET_WORKER_TOKEN"):
    state = Path(folder)
    line = f"{os.getpid()} {os.getppid()} {os.environ.get('GPUFLEET_WORKER_NAME', '')}"
    with (state / "starts").open("a") as starts:
        starts.write(f"{line}\n")
    number = (state / "starts").read_text().splitlines().index(line) + 1
    if (state / "urls").exists():
        os.environ["GPUFLEET_ORCHESTRATOR_URL"] = (state / "urls").read_text().strip()
    hold = state / "hold"
    if hold.exists() and int(hold.read_text()) == number:
        while not (state / "up").exists():
            time.sleep(0.05)
