"""A stand-in for SimpleTuner's trainer, launched by the released worker agent as
`python -m simpletuner.train` in tests/e2e/test_simpletuner_agent.py.

It reads the config the agent wrote (`CONFIG_PATH`), prints one line a step (the agent reads
the trainer's output line by line, blocking its event loop until each line comes, so a quiet
trainer would stall the agent), and honours these config keys and nothing else:

- `stub_steps` (default 3) and `stub_sleep` (seconds a step, default 0.05);
- `stub_until`: a file; once it exists the trainer ends after the step it is on (at the
  latest after `stub_steps`), so a test waits for no longer than it needs;
- `stub_exit_code` (default 0): the process's exit code;
- `stub_record`: a file to write what the trainer was given (the agent's environment
  variables for it, and the config), as JSON;
- `stub_outputs` (`{"relative path": size in bytes}`): files of random bytes written into
  `output_dir` at the end, then published through the config's `publishing_config` as the
  released trainer's `_publish_final_artifacts` does, with its own `PublishingManager` (put
  on PYTHONPATH from the wheel by the test); `stub_outputs_sha256` names a file to write
  each file's sha256 to, as JSON;
- `stub_join`: a file (relative to the job's folder) to write, as JSON, what the trainer met
  after joining the process group that its launcher set up, as SimpleTuner does, through
  `accelerate.Accelerator` (PyTorch and Accelerate installed): its rank, the world's size, the
  sum of every rank + 1 (an all_reduce over gloo) and accelerate's distributed type.

A namespace package (no `__init__.py`): the released agent's own `simpletuner/worker_agent.py`
sits in another folder on the same PYTHONPATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

SEEN_ENV = (
    "CONFIG_PATH",
    "SIMPLETUNER_CONFIG_BACKEND",
    "SIMPLETUNER_UPLOAD_ENDPOINT",
    "SIMPLETUNER_UPLOAD_TOKEN",
)

JOIN_ENV = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "ACCELERATE_USE_CPU")


def main() -> int:
    with open(os.environ["CONFIG_PATH"], encoding="utf-8") as handle:
        config = json.load(handle)
    record = config.get("stub_record")
    if record:
        seen = {"env": {k: os.environ.get(k) for k in SEEN_ENV}, "config": config}
        with open(record, "w", encoding="utf-8") as handle:
            json.dump(seen, handle)
    if config.get("stub_join"):
        join(config["stub_join"])
    steps = int(config.get("stub_steps", 3))
    pause = float(config.get("stub_sleep", 0.05))
    until = config.get("stub_until")
    for step in range(1, steps + 1):
        print(f"step {step}/{steps}", flush=True)
        if until and os.path.exists(until):
            break
        time.sleep(pause)
    if config.get("stub_outputs"):
        publish(config)
    return int(config.get("stub_exit_code", 0))


def join(path: str) -> None:
    import torch
    import torch.distributed as dist
    from accelerate import Accelerator

    state = Accelerator().state
    total = torch.tensor([state.process_index + 1])
    dist.all_reduce(total)
    met = {
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "sum": int(total.item()),
        "backend": dist.get_backend(),
        "distributed_type": str(state.distributed_type),
        "env": {k: os.environ.get(k) for k in JOIN_ENV},
    }
    Path(path).write_text(json.dumps(met))
    print(f"rank {met['rank']} of {met['world_size']} met: sum {met['sum']}", flush=True)
    dist.destroy_process_group()


def publish(config: dict[str, Any]) -> None:
    from simpletuner.helpers.publishing import PublishingManager

    output_dir = Path(config["output_dir"])
    digests = {}
    for rel, size in config["stub_outputs"].items():
        data = os.urandom(int(size))
        (output_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (output_dir / rel).write_bytes(data)
        digests[rel] = hashlib.sha256(data).hexdigest()
    Path(config["stub_outputs_sha256"]).write_text(json.dumps(digests))
    manager = PublishingManager(config.get("publishing_config"))
    results = manager.publish(output_dir, artifact_name=output_dir.name)
    required = any(p.config.get("required", False) for p in manager.providers)
    if required and not results:
        raise RuntimeError("Required final artifact publishing did not succeed")
    print(f"published {len(digests)} file(s) to {manager.latest_uri()}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
