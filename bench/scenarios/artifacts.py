"""Scenario 7: a checkpoint through each artifact backend.

One file of `s7_bytes` (1 GiB at full size) is uploaded as a worker uploads a checkpoint
(announce, PUT, and for object storage the finish), committed, and downloaded as a user
downloads it (the API, following a presigned redirect). Each transfer's throughput is given
as a ratio of copying the same file on the same disk, measured in the same run; the server's
resident memory is sampled throughout, and its growth over the idle server is the second
figure. The data-folder backend streams the bytes through the orchestrator; the object-storage
backend (moto's S3 server here, a stand-in for a cloud bucket) sends them past it.

For the data folder, the same run also times (bench/scenarios/artifact_rates.py, #39 goal 4)
nginx serving the file against the artifact route and `gpufleet jobs download`, and a worker's
resume of a checkpoint of `s7_resume_bytes` (5 GiB at full size) against `cp` of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import shutil
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx

from bench.report import Result
from bench.s3 import S3Unavailable, environment, moto_s3, new_bucket, s3_environment
from bench.scenarios.artifact_rates import download_rates, resume_rate
from bench.scenarios.options import Options
from bench.scenarios.steps import admin_client, fleet_of, lane, say, submit
from bench.server import BenchServer
from bench.workers import HOLD
from gpufleet import protocol

CHUNK = 1024 * 1024
RATIO_GOAL = 0.7
MEMORY_GOAL = 64 * 1024 * 1024
PATH = "output/checkpoint-1/model.bin"


async def artifact_transfer(opts: Options) -> list[Result]:
    """Scenario 7, once per backend: the data folder, then object storage."""
    size = opts.size.s7_bytes
    folder = opts.work_dir / f"s7-{os.getpid()}"
    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "checkpoint.bin"
    digest = await asyncio.to_thread(_make_file, source, size)
    copy_rate = await asyncio.to_thread(_copy_rate, source, folder / "copy.bin")
    results = [await _one_backend(opts, "data folder", {}, source, digest, copy_rate)]
    source.with_suffix(".resume").unlink(missing_ok=True)
    try:
        with moto_s3() as endpoint:
            url = f"s3://{new_bucket(endpoint)}/fleet"
            with environment(s3_environment(endpoint)):
                results.append(
                    await _one_backend(
                        opts, "object storage (moto)", {"artifacts": url}, source, digest, copy_rate
                    )
                )
    except S3Unavailable as exc:
        failed = Result("7", "artifact transfer", opts.database, {"backend": "object storage"})
        failed.notes.append(str(exc))
        failed.check("moto's S3 server", "did not start", "starts", False)
        results.append(failed)
    shutil.rmtree(folder, ignore_errors=True)
    return results


async def _one_backend(
    opts: Options,
    backend: str,
    flags: dict[str, Any],
    source: Path,
    digest: str,
    copy_rate: float,
) -> Result:
    size = opts.size.s7_bytes
    result = Result("7", "artifact transfer", opts.database, {"backend": backend, "bytes": size})
    # The data folder on the pool's server where there is one (the smoke tests): the fleet's
    # one worker holds this scenario's job, of a label of their own.
    labels = lane()
    async with (
        opts.server("s7", **flags) as server,
        fleet_of(server, 1, opts, mode=HOLD, labels=labels) as (fleet, _startup),
        admin_client(server) as admin,
    ):
        job_id = (await submit(admin, labels))[0]
        await fleet.wait_for("running", 1, 60)
        [(worker_id, _job, attempt_id)] = await fleet.busy()
        token = next(c.token for c in fleet.creds if c.id == worker_id)
        worker = httpx.AsyncClient(
            base_url=server.url, headers={"X-Worker-Token": token}, timeout=300
        )
        async with worker, _rss(server) as memory:
            say(f"{backend}: uploading {size / CHUNK:.0f} MiB")
            began = time.perf_counter()
            await _upload(worker, job_id, attempt_id, source, digest)
            upload_s = time.perf_counter() - began
            say(f"{backend}: downloading")
            began = time.perf_counter()
            got = await _download(admin, job_id, source.with_suffix(".down"))
            download_s = time.perf_counter() - began
            source.with_suffix(".down").unlink(missing_ok=True)
            if not flags:  # the data folder: #39 goal 4's figures, side by side
                await download_rates(result, server, job_id, PATH, source, opts.size.s7_runs)
                await _resume(opts, result, server, (worker, token), (job_id, attempt_id), source)
    up, down = size / upload_s / copy_rate, size / download_s / copy_rate
    growth = memory["peak"] - memory["before"]
    result.metrics.update(
        {
            "copy_mib_s": round(copy_rate / CHUNK, 1),
            "upload_mib_s": round(size / upload_s / CHUNK, 1),
            "download_mib_s": round(size / download_s / CHUNK, 1),
            "server_rss_before_mib": round(memory["before"] / CHUNK, 1),
            "server_rss_peak_mib": round(memory["peak"] / CHUNK, 1),
        }
    )
    result.check(
        f"{backend}: upload ÷ disk copy", round(up, 2), f"≥ {RATIO_GOAL}", up >= RATIO_GOAL
    )
    result.check(
        f"{backend}: download ÷ disk copy", round(down, 2), f"≥ {RATIO_GOAL}", down >= RATIO_GOAL
    )
    result.check(
        f"{backend}: server memory growth (MiB)",
        round(growth / CHUNK, 1),
        f"< {MEMORY_GOAL // CHUNK}",
        growth < MEMORY_GOAL,
    )
    result.check(f"{backend}: sha256 of the download", got == digest, "matches", got == digest)
    return result


async def _resume(
    opts: Options,
    result: Result,
    server: BenchServer,
    worker: tuple[httpx.AsyncClient, str],
    ids: tuple[str, str],
    source: Path,
) -> None:
    """A checkpoint of `s7_resume_bytes` uploaded (timed), then resumed as a worker does."""
    size = opts.size.s7_resume_bytes
    big = source.with_suffix(".resume")
    say(f"data folder: a {size / CHUNK:.0f} MiB checkpoint, uploaded and resumed")
    digest = await asyncio.to_thread(_make_file, big, size)
    began = time.perf_counter()
    checkpoint_id = await _upload(worker[0], ids[0], ids[1], big, digest, name="checkpoint-2")
    result.metrics["resume_upload_mib_s"] = round(size / (time.perf_counter() - began) / CHUNK, 1)
    await resume_rate(result, server, worker[1], (*ids, checkpoint_id), big)
    big.unlink(missing_ok=True)


async def _upload(
    worker: httpx.AsyncClient,
    job_id: str,
    attempt_id: str,
    source: Path,
    digest: str,
    name: str = "checkpoint-1",
) -> str:
    """Announce, send and (object storage) finish one checkpoint file, then commit it; the
    checkpoint's id."""
    size = await asyncio.to_thread(lambda: source.stat().st_size)
    file = {"path": f"output/{name}/model.bin", "size": size, "sha256": digest}
    announced = await worker.post(
        protocol.job_upload_path(job_id),
        json={"attempt_id": attempt_id, **file, "kind": "checkpoint", "checkpoint": name},
    )
    _ok(announced, "announce")
    plan = announced.json()
    headers = {"Content-Length": str(size), **plan.get("headers", {})}
    if plan["via"] == "store":  # a presigned URL: no worker token goes there
        async with httpx.AsyncClient(timeout=300) as direct:
            _ok(await direct.put(plan["url"], content=_read(source), headers=headers), "PUT")
        done = f"{protocol.job_upload_path(job_id)}/{plan['upload_id']}/complete"
        _ok(await worker.post(done), "complete")
    else:
        _ok(await worker.put(plan["url"], content=_read(source), headers=headers), "PUT")
    commit = checkpoint_commit(attempt_id, file, name)
    committed = await worker.post(f"{protocol.WORKER_API}/job/{job_id}/checkpoints", json=commit)
    _ok(committed, "commit")
    return str(committed.json()["id"])


async def _download(admin: httpx.AsyncClient, job_id: str, target: Path) -> str:
    """Stream the file to disk through the user API; its sha256."""
    digest = hashlib.sha256()
    url = f"/api/queue/{job_id}/artifacts/{PATH}"
    async with admin.stream("GET", url) as resp:
        if resp.status_code == 307:  # presigned: the bytes come from the store, no token sent
            async with (
                httpx.AsyncClient(timeout=300) as direct,
                direct.stream("GET", resp.headers["location"]) as resp,
            ):
                return await _save(resp, target, digest)
        return await _save(resp, target, digest)


async def _save(resp: httpx.Response, target: Path, digest: Any) -> str:
    _ok(resp, "download")
    with target.open("wb") as out:
        async for chunk in resp.aiter_bytes(CHUNK):
            digest.update(chunk)
            out.write(chunk)
    return str(digest.hexdigest())


async def _read(path: Path) -> AsyncIterator[bytes]:
    with path.open("rb") as file:
        while chunk := await asyncio.to_thread(file.read, CHUNK):
            yield chunk


def checkpoint_commit(
    attempt_id: str, file: dict[str, Any], name: str = "checkpoint-1"
) -> dict[str, Any]:
    """The commit of a one-file checkpoint, `output/<name>` at step 1."""
    return {
        "attempt_id": attempt_id,
        "name": name,
        "path": f"output/{name}",
        "step": 1,
        "files": [file],
    }


def _ok(resp: httpx.Response, what: str) -> None:
    if resp.status_code >= 300:
        body = resp.text[:300] if not resp.is_stream_consumed or resp.is_closed else ""
        raise RuntimeError(f"{what}: {resp.status_code} {body}")


def _make_file(path: Path, size: int) -> str:
    """`size` random bytes (incompressible, as model weights are); their sha256."""
    digest = hashlib.sha256()
    with path.open("wb") as out:
        left = size
        while left:
            chunk = os.urandom(min(CHUNK, left))
            digest.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    return digest.hexdigest()


def _copy_rate(source: Path, target: Path) -> float:
    """Bytes per second of copying the file on the same disk (the ratios' denominator): the
    best of three, each written to disk (fsync), as the store writes are."""
    best = 0.0
    for _ in range(3):
        began = time.perf_counter()
        with source.open("rb") as src, target.open("wb") as dst:
            shutil.copyfileobj(src, dst, CHUNK)
            dst.flush()
            os.fsync(dst.fileno())
        best = max(best, source.stat().st_size / (time.perf_counter() - began))
        target.unlink()
    return best


@contextlib.asynccontextmanager
async def _rss(server: BenchServer) -> AsyncIterator[dict[str, int]]:
    """The server's resident memory before the block and its peak during it (every 20 ms)."""
    memory = {"before": server.usage().rss_bytes, "peak": 0}
    memory["peak"] = memory["before"]

    async def sample() -> None:
        while True:
            memory["peak"] = max(memory["peak"], server.usage().rss_bytes)
            await asyncio.sleep(0.02)

    task = asyncio.create_task(sample())
    try:
        yield memory
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        memory["peak"] = max(memory["peak"], server.usage().rss_bytes)
