"""Scenario 9: a job that brings its code, from `gpufleet run` to the job's first log line.

A real `gpufleet worker` (its own process and work folder, persistent) takes jobs that
`gpufleet run --wait` submits; the time is from starting the command to the job's first
line on its output (the job prints one line at once). Three kinds of run:

- empty: `gpufleet run` on an empty folder (after one untimed run, so that its tiny
  snapshot is stored and cached, as for any job that brings nothing);
- cold: a fresh folder of `s9_bytes` of random files (a new digest each run): packed,
  uploaded, downloaded by the worker, checked, extracted;
- warm: the last cold folder again: 0 bytes sent, the worker's cache hit, a fresh copy
  extracted.

The goals (#34): warm at most 1 s above empty; cold within 1.5x of copying the same bytes
with curl to and from the same store. That copy is a curl PUT of a snapshot's archive of
the same size (its own random files: the cold runs' digests must stay new) to
the orchestrator as a worker uploads a job's file (the same artifact store, the data folder
here, through the same server) and a curl GET of it back through the users' artifact
download route: the orchestrator has no route that serves a stored snapshot to a user (only
to the attempt of a job naming it), and the artifact routes move the same bytes through the
same process into and out of the same store, so the copy is the transfer's floor with
nothing of gpufleet's own work (packing, checking, extracting, dispatch) in it.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.report import Result
from bench.scenarios.artifacts import _ok, checkpoint_commit
from bench.scenarios.options import Options
from bench.scenarios.steps import admin_client, fleet_of, lane, say, submit
from bench.server import BenchServer, gpufleet_command
from bench.workers import HOLD
from gpufleet import protocol
from gpufleet.artifacts.workdir_archive import pack

WARM_GOAL_S = 1.0
COLD_GOAL = 1.5
MARK = "gpufleet-bench-first-line"
LABEL = {"bench": "workdir"}
FILE_BYTES = 1024 * 1024
RUN_WITHIN_S = 300.0


async def workdir_scenario(opts: Options) -> Result:
    size, runs = opts.size.s9_bytes, opts.size.s9_runs
    result = Result("9", "workdir: run to first log line", opts.database, {"bytes": size})
    folder = Path(tempfile.mkdtemp(prefix="s9-", dir=opts.work_dir))
    # The pool's server where there is one (the smoke tests): the curl copy's one simulated
    # worker holds this scenario's job, of a label of their own, and the real worker takes
    # only jobs of LABEL.
    async with opts.server("s9") as server:
        copy = await _curl_copy(server, opts, folder, size)
        worker = _start_worker(server, folder / "worker")
        try:
            empty_dir = folder / "empty"
            empty_dir.mkdir()
            await _run(server, empty_dir)  # its snapshot stored and cached: untimed
            empty = [await _run(server, empty_dir) for _ in range(runs)]
            cold, tree = [], empty_dir
            for n in range(runs):
                tree = await asyncio.to_thread(_tree, folder / f"tree-{n}", size)
                cold.append(await _run(server, tree))
            warm = [await _run(server, tree) for _ in range(runs)]
        finally:
            worker.terminate()
            await asyncio.to_thread(worker.wait, 20)
    med = {
        name: statistics.median(v) for name, v in (("empty", empty), ("cold", cold), ("warm", warm))
    }
    result.metrics.update(
        {
            "runs": runs,
            "empty_s": [round(v, 3) for v in empty],
            "cold_s": [round(v, 3) for v in cold],
            "warm_s": [round(v, 3) for v in warm],
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "curl_copy_s": copy,
        }
    )
    above = med["warm"] - med["empty"]
    result.check(
        "warm - empty, median (s)", round(above, 3), f"≤ {WARM_GOAL_S}", above <= WARM_GOAL_S
    )
    ratio = med["cold"] / copy["total"]
    result.check(
        "cold ÷ curl copy up and down", round(ratio, 2), f"≤ {COLD_GOAL}", ratio <= COLD_GOAL
    )
    result.notes.append(
        f"cold {med['cold']:.2f} s, warm {med['warm']:.2f} s, empty {med['empty']:.2f} s; "
        f"curl up {copy['up']:.2f} s + down {copy['down']:.2f} s"
    )
    return result


def _tree(root: Path, size: int) -> Path:
    """A folder of `size` bytes of random files (incompressible, fresh each time)."""
    root.mkdir(parents=True)
    left, n = size, 0
    while left > 0:
        chunk = min(FILE_BYTES, left)
        (root / f"data-{n:04d}.bin").write_bytes(os.urandom(chunk))
        left, n = left - chunk, n + 1
    return root


async def _run(server: BenchServer, workdir: Path) -> float:
    """Seconds from starting `gpufleet run --wait` to the job's first line on its output."""
    launch, env = gpufleet_command(server.code)  # the CLI of the server's checkout
    cmd = [*launch, "run", "--url", server.url, "--api-key", server.admin_key]
    cmd += ["--workdir", str(workdir), "--wait", "--label", "bench=workdir"]
    cmd += ["--", sys.executable, "-c", f"print({MARK!r}, flush=True)"]
    # The CLI's digests of folders it packed (cli/digests.py) kept beside the trees, not in
    # the home folder of whoever runs the benchmark.
    env["GPUFLEET_CACHE_DIR"] = str(workdir.parent / "cli-cache")
    return await asyncio.to_thread(_timed, cmd, env)


def _timed(cmd: list[str], env: dict[str, str]) -> float:
    began = time.monotonic()
    with subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    ) as proc:
        watchdog = threading.Timer(RUN_WITHIN_S, proc.kill)  # a job no worker takes
        watchdog.start()
        seen: list[str] = []
        first = None
        for line in proc.stdout or ():
            seen.append(line)
            if first is None and MARK in line and "python" not in line:
                first = time.monotonic() - began
        code = proc.wait()
        watchdog.cancel()
    if code != 0 or first is None:
        raise RuntimeError(
            f"gpufleet run exited {code} without the job's line:\n{''.join(seen)[-2000:]}"
        )
    return first


def _start_worker(server: BenchServer, work_dir: Path) -> subprocess.Popen[bytes]:
    made = httpx.post(
        f"{server.url}/api/admin/workers",
        headers=server.admin_headers(),
        json={"name": "bench-workdir", "labels": LABEL, "worker_type": "persistent"},
        timeout=30,
    )
    _ok(made, "create the worker")
    launch, env = gpufleet_command(server.code)  # the worker of the server's checkout
    cmd = [*launch, "worker", "--orchestrator-url", server.url, "--worker-token"]
    cmd += [made.json()["token"], "--name", "bench-workdir", "--persistent"]
    cmd += ["--work-dir", str(work_dir), "--label", "bench=workdir"]
    work_dir.mkdir(parents=True)
    with (work_dir.parent / "worker.log").open("ab") as log:  # the child keeps its own copy
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


async def _curl_copy(
    server: BenchServer, opts: Options, folder: Path, size: int
) -> dict[str, float]:
    """curl's seconds to PUT an archive of `size` bytes into the store as a job's file and
    GET it back as a user does: the floor the cold run is held to."""
    tree = await asyncio.to_thread(_tree, folder / "copy-tree", size)
    archive = folder / "copy.tar"
    packed = await asyncio.to_thread(_pack, tree, archive)
    path = "output/checkpoint-1/workdir.tar"
    labels = lane()
    async with (
        fleet_of(server, 1, opts, mode=HOLD, labels=labels) as (fleet, _),
        admin_client(server) as admin,
    ):
        job_id = (await submit(admin, labels))[0]
        await fleet.wait_for("running", 1, 60)
        [(worker_id, _job, attempt_id)] = await fleet.busy()
        token = next(c.token for c in fleet.creds if c.id == worker_id)
        async with httpx.AsyncClient(
            base_url=server.url, headers={"X-Worker-Token": token}, timeout=60
        ) as worker:
            file = {"path": path, "size": packed[0], "sha256": packed[1]}
            announced = await worker.post(
                protocol.job_upload_path(job_id),
                json={
                    "attempt_id": attempt_id,
                    **file,
                    "kind": "checkpoint",
                    "checkpoint": "checkpoint-1",
                },
            )
            _ok(announced, "announce")
            plan = announced.json()
            if plan["via"] == "store":
                raise RuntimeError("scenario 9 copies through the data folder, not a bucket")
            headers = [f"X-Worker-Token: {token}"]
            headers += [f"{k}: {v}" for k, v in plan.get("headers", {}).items()]
            say(f"curl: {size / FILE_BYTES:.0f} MiB up and down")
            up = await _curl(["-T", str(archive), server.url + plan["url"]], headers)
            commit = checkpoint_commit(attempt_id, file)
            committed = await worker.post(
                f"{protocol.WORKER_API}/job/{job_id}/checkpoints", json=commit
            )
            _ok(committed, "commit")
        down = await _curl(
            ["-o", str(folder / "copy.down"), f"{server.url}/api/queue/{job_id}/artifacts/{path}"],
            [f"Authorization: Bearer {server.admin_key}"],
        )
    return {"up": round(up, 3), "down": round(down, 3), "total": round(up + down, 3)}


def _pack(tree: Path, archive: Path) -> tuple[int, str]:
    with archive.open("wb") as out:
        packed = pack(tree, [p.name for p in tree.iterdir()], out)
    return packed.size, packed.sha256


async def _curl(args: list[str], headers: list[str]) -> float:
    cmd = ["curl", "-sS", "--fail", "--max-time", "300"]
    for header in headers:
        cmd += ["-H", header]
    began = time.monotonic()
    done = await asyncio.to_thread(subprocess.run, cmd + args, capture_output=True, text=True)
    took = time.monotonic() - began
    if done.returncode != 0:
        raise RuntimeError(f"curl {args[0]} failed ({done.returncode}): {done.stderr[-500:]}")
    return took
