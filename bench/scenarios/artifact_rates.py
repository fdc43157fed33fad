"""Scenario 7's side-by-side figures for the data folder (#39 goal 4), all on one machine in
one run: nginx (`sendfile on`) serving the file against the orchestrator's artifact route
(curl to /dev/null both), `gpufleet jobs download` (a real CLI process: hashed, written,
fsynced, renamed), and a checkpoint's resume as a worker does it (`worker/resume.py` in a
process of its own: downloaded, hashed, renamed into place) against `cp` of the same file. The
CLI and the resume run the server's checkout (`--baseline`: `gpufleet_command`).
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.nginx import nginx_serving
from bench.report import Result
from bench.server import BenchServer, gpufleet_command

MIB = 1024 * 1024
NGINX_GOAL = 0.5  # the orchestrator's download rate ÷ nginx's, at least
RESUME_GOAL = 1.5  # a resume's time ÷ `cp`'s, at most


def curl_seconds(url: str, headers: dict[str, str], runs: int) -> float:
    """The median of `runs` downloads of `url` by curl to /dev/null (its own total time)."""
    cmd = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %{time_total}"]
    for name, value in headers.items():
        cmd += ["-H", f"{name}: {value}"]
    times = []
    for _ in range(runs):
        done = subprocess.run([*cmd, url], capture_output=True, text=True, check=False)
        code, _, seconds = done.stdout.partition(" ")
        if done.returncode != 0 or code != "200":
            raise RuntimeError(f"curl {url}: {done.stdout} {done.stderr[:300]}")
        times.append(float(seconds))
    return statistics.median(times)


def nginx_seconds(source: Path, prefix: Path, runs: int) -> float:
    """curl's median time for `source` served by nginx from its folder."""
    with nginx_serving(source.parent, prefix) as url:
        return curl_seconds(f"{url}/{source.name}", {}, runs)


def cli_seconds(server: BenchServer, job_id: str, path: str, out: Path, runs: int) -> float:
    """The median wall time of `gpufleet jobs download JOB PATH -o OUT` (a fresh folder each)."""
    times = []
    for run in range(runs):
        target = out / f"cli-{run}"
        launch, env = gpufleet_command(server.code)  # the CLI of the server's checkout
        cmd = [*launch, "jobs", "download", job_id, path, "-o", str(target)]
        cmd += ["--url", server.url, "--api-key", server.admin_key]
        began = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
        times.append(time.perf_counter() - began)
        if done.returncode != 0:
            raise RuntimeError(f"gpufleet jobs download: {done.stdout[-300:]} {done.stderr[-300:]}")
        shutil.rmtree(target, ignore_errors=True)
    return statistics.median(times)


def cp_seconds(source: Path, target: Path) -> float:
    """The wall time of `cp SOURCE TARGET` (no fsync: a resume does not sync either)."""
    began = time.perf_counter()
    subprocess.run(["cp", str(source), str(target)], check=True)
    seconds = time.perf_counter() - began
    target.unlink()
    return seconds


# A worker's resume, in a process of its own running the server's checkout (`--baseline`).
_RESUME = """
import asyncio, sys, time
from pathlib import Path
from gpufleet.worker.backoff import Backoff
from gpufleet.worker.client import OrchestratorClient
from gpufleet.worker.resume import Resume, download_checkpoint
from gpufleet.worker.settings import AgentSettings

url, token, job_id, attempt_id, checkpoint_id, folder = sys.argv[1:]


async def resume() -> float:
    client = OrchestratorClient(AgentSettings(orchestrator_url=url, worker_token=token))
    wanted = Resume(checkpoint_id, "checkpoint-2", "output/checkpoint-2", 1)
    try:
        began = time.perf_counter()
        await download_checkpoint(
            client, wanted, job_id=job_id, attempt_id=attempt_id, folder=Path(folder),
            backoff=lambda: Backoff(0.2, 2.0),
        )
        return time.perf_counter() - began
    finally:
        await client.aclose()


print(asyncio.run(resume()))
"""


def resume_seconds(
    server: BenchServer, token: str, job_id: str, attempt_id: str, checkpoint_id: str, folder: Path
) -> float:
    """A worker's resume of the checkpoint into `folder`: its list fetched, each file
    downloaded, checked for size and sha256, put in place (`worker/resume.py`, timed inside
    its process: not the start of Python)."""
    _launch, env = gpufleet_command(server.code)
    args = [server.url, token, job_id, attempt_id, checkpoint_id, str(folder)]
    done = subprocess.run(
        [sys.executable, "-c", _RESUME, *args], capture_output=True, text=True, env=env, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"the resume failed: {done.stderr[-500:]}")
    return float(done.stdout.strip().splitlines()[-1])


async def download_rates(
    result: Result, server: BenchServer, job_id: str, path: str, source: Path, runs: int
) -> None:
    """nginx's rate and the orchestrator's (curl, the CLI) on `source`, stored at `path`."""
    size = (await asyncio.to_thread(source.stat)).st_size
    work = source.parent
    nginx_s = await asyncio.to_thread(nginx_seconds, source, work / "nginx", runs)
    url = f"{server.url}/api/queue/{job_id}/artifacts/{path}"
    curl_s = await asyncio.to_thread(curl_seconds, url, server.admin_headers(), runs)
    cli_s = await asyncio.to_thread(cli_seconds, server, job_id, path, work, runs)
    result.metrics.update(
        {
            "nginx_mib_s": round(size / nginx_s / MIB, 1),
            "curl_mib_s": round(size / curl_s / MIB, 1),
            "cli_mib_s": round(size / cli_s / MIB, 1),
            "nginx_s": round(nginx_s, 3),
            "curl_s": round(curl_s, 3),
            "cli_s": round(cli_s, 3),
        }
    )
    for what, seconds in (("curl", curl_s), ("gpufleet jobs download", cli_s)):
        ratio = nginx_s / seconds
        result.check(
            f"data folder: {what} ÷ nginx (sendfile)",
            round(ratio, 3),
            f"≥ {NGINX_GOAL}",
            ratio >= NGINX_GOAL,
        )


async def resume_rate(
    result: Result,
    server: BenchServer,
    token: str,
    ids: tuple[str, str, str],
    source: Path,
) -> None:
    """A worker's resume of the checkpoint `ids` (job, attempt, checkpoint) against `cp`."""
    job_id, attempt_id, checkpoint_id = ids
    folder = source.parent / "resumed"
    cp_s = await asyncio.to_thread(cp_seconds, source, source.with_suffix(".cp"))
    resume_s = await asyncio.to_thread(
        resume_seconds, server, token, job_id, attempt_id, checkpoint_id, folder
    )
    await asyncio.to_thread(shutil.rmtree, folder, ignore_errors=True)
    size = (await asyncio.to_thread(source.stat)).st_size
    ratio = resume_s / cp_s
    result.metrics.update(
        {
            "resume_bytes": size,
            "resume_s": round(resume_s, 3),
            "cp_s": round(cp_s, 3),
            "resume_mib_s": round(size / resume_s / MIB, 1),
        }
    )
    result.check(
        "data folder: checkpoint resume ÷ cp",
        round(ratio, 2),
        f"≤ {RESUME_GOAL}",
        ratio <= RESUME_GOAL,
    )
