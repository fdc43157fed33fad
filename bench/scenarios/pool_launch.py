"""Scenario 11: a pool's launch (#36), from a job's submit to its launched worker registered,
less the provider's own time.

A `command` pool whose launch script is a machine that is up at once: it registers the new
worker itself (the register call a booted machine's `gpufleet worker` makes), notes when it
began and when the worker was registered, and prints an instance id. What is left of submit →
registered once the time inside the launch call is taken away is the orchestrator's own: the
wait for the reconcile loop's next pass, its decision, and the launch recorded before the
call. Each job is submitted at a random phase of the loop; the goal: at most one reconcile
interval + 1 s, every launch.
"""

from __future__ import annotations

import asyncio
import json
import random
import secrets
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from bench.report import Result, ms_summary
from bench.scenarios.options import Options
from bench.scenarios.steps import admin_client, say
from gpufleet.settings.server import SERVER

# The machine: the worker's registration, then the stamps; the id as the last line.
LAUNCH = """#!/bin/sh
began=$(date +%s.%N)
"$GF_BENCH_PYTHON" "$(dirname "$0")/register.py" "$began" "$1"
echo "bench-$GPUFLEET_WORKER_NAME"
"""
REGISTER = """\
import json, os, sys, time, urllib.request
env = os.environ
body = {"name": env["GPUFLEET_WORKER_NAME"], "gpu_count": 0, "agent": "gpufleet-bench"}
request = urllib.request.Request(
    env["GPUFLEET_ORCHESTRATOR_URL"] + "/api/workers/register",
    data=json.dumps(body).encode(),
    headers={"X-Worker-Token": env["GPUFLEET_WORKER_TOKEN"], "Content-Type": "application/json"},
)
urllib.request.urlopen(request, timeout=60).read()
stamp = {"began": float(sys.argv[1]), "registered": time.time()}
with open(sys.argv[2], "a") as stamps:
    stamps.write(json.dumps(stamp) + "\\n")
"""


def machine_scripts(folder: Path) -> list[str]:
    """The launch argv: the scripts written to `folder`, the stamps file beside them."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "register.py").write_text(REGISTER)
    launch = folder / "launch.sh"
    launch.write_text(LAUNCH.replace('"$GF_BENCH_PYTHON"', f'"{sys.executable}"'))
    launch.chmod(0o755)
    return [str(launch), str(folder / "stamps.jsonl")]


async def pool_launch(opts: Options) -> Result:
    """Scenario 11: submit → the launched worker registered, beyond the provider's time."""
    samples = opts.size.s11_launches
    async with opts.server("s11") as server:
        interval = float(server.flags.get("pool-interval", SERVER.named("pool_interval").default))
        result = Result(
            "11",
            "pool launch",
            opts.database,
            {"launches": samples, "pool_interval_s": interval, "provider": "command"},
        )
        folder = opts.work_dir / f"s11-machines-{secrets.token_hex(3)}"
        argv = machine_scripts(folder)
        name = f"bench-{secrets.token_hex(3)}"
        async with admin_client(server) as client:
            answer = await client.post(
                "/api/admin/pools",
                json={
                    "name": name,
                    "provider": {
                        "type": "command",
                        "launch": argv,
                        "terminate": [shutil.which("true") or "/bin/true"],
                    },
                    "labels": {"pool": name},
                    "gpu_count": 0,
                    "max_workers": samples,
                },
            )
            answer.raise_for_status()
            jobs: list[float] = []  # when each was submitted
            for n in range(samples):
                await asyncio.sleep(random.uniform(0, interval))  # any phase of the loop
                sent = time.time()
                answer = await client.post(
                    "/api/queue/submit",
                    json={
                        "config": {"command": ["true"]},
                        "target": "worker",
                        "worker_labels": {"pool": name},
                        "gpu_count": 0,
                    },
                )
                answer.raise_for_status()
                jobs.append(sent)
                await _stamped(folder / "stamps.jsonl", n + 1, interval * 2 + 60)
                # Nothing left waiting: the next launch is the next job's (a worker that
                # never streams goes offline, and its job would be launched for again).
                cancel = await client.post(f"/api/queue/{answer.json()['id']}/cancel")
                cancel.raise_for_status()
                say(f"launch {n + 1} of {samples}: its worker registered")
            await client.patch(f"/api/admin/pools/{name}", json={"enabled": False})
    stamps = [json.loads(line) for line in (folder / "stamps.jsonl").read_text().splitlines()]
    result.metrics.update(_figures(jobs, stamps))
    result.check("launches, one a job", len(stamps), str(samples), len(stamps) == samples)
    worst = result.metrics["beyond_provider"]["max_ms"]
    goal = interval + 1
    result.check(
        "submit → registered, p50 (s)", _s(result.metrics["submit_to_registered"]), "-", None
    )
    result.check("provider's own time, p50 (s)", _s(result.metrics["provider"]), "-", None)
    result.check(
        "submit → registered less the provider's, worst (s)",
        worst / 1000,
        f"≤ {goal:g}",
        worst / 1000 <= goal,
    )
    return result


def _s(summary: dict[str, Any]) -> float:
    return round(float(summary["p50_ms"]) / 1000, 3)


def _figures(sent: list[float], stamps: list[dict[str, Any]]) -> dict[str, Any]:
    """Launches are made one at a time, a job each, in order: the nth stamp is the nth job's."""
    total = [s["registered"] - t for s, t in zip(stamps, sent, strict=False)]
    provider = [s["registered"] - s["began"] for s in stamps]
    return {
        "submit_to_registered": ms_summary(total),
        "provider": ms_summary(provider),
        "beyond_provider": ms_summary([t - p for t, p in zip(total, provider, strict=False)]),
    }


def _stamps(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def _stamped(path: Path, count: int, within: float) -> None:
    deadline = time.monotonic() + within
    while _stamps(path) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"launch {count} did not register its worker in {within:g} s")
        await asyncio.sleep(0.02)
