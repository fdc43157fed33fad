"""A stand-in for SimpleTuner's trainer, launched by the released worker agent as
`python -m simpletuner.train` in tests/e2e/test_simpletuner_agent.py.

It reads the config the agent wrote (`CONFIG_PATH`), prints one line a step (the agent reads
the trainer's output line by line, blocking its event loop until each line comes, so a quiet
trainer would stall the agent), and honours these config keys and nothing else:

- `stub_steps` (default 3) and `stub_sleep` (seconds a step, default 0.05);
- `stub_exit_code` (default 0): the process's exit code;
- `stub_record`: a file to write what the trainer was given (the agent's environment
  variables for it, and the config), as JSON.

A namespace package (no `__init__.py`): the released agent's own `simpletuner/worker_agent.py`
sits in another folder on the same PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import sys
import time

SEEN_ENV = (
    "CONFIG_PATH",
    "SIMPLETUNER_CONFIG_BACKEND",
    "SIMPLETUNER_UPLOAD_ENDPOINT",
    "SIMPLETUNER_UPLOAD_TOKEN",
)


def main() -> int:
    with open(os.environ["CONFIG_PATH"], encoding="utf-8") as handle:
        config = json.load(handle)
    record = config.get("stub_record")
    if record:
        seen = {"env": {k: os.environ.get(k) for k in SEEN_ENV}, "config": config}
        with open(record, "w", encoding="utf-8") as handle:
            json.dump(seen, handle)
    steps = int(config.get("stub_steps", 3))
    pause = float(config.get("stub_sleep", 0.05))
    for step in range(1, steps + 1):
        print(f"step {step}/{steps}", flush=True)
        time.sleep(pause)
    return int(config.get("stub_exit_code", 0))


if __name__ == "__main__":
    sys.exit(main())
