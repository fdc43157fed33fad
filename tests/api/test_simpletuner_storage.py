"""SimpleTuner's own uploads: the released trainer's publisher, boto3 and all, against the
orchestrator's `/api/cloud/storage` on a real socket.

The offer of a SimpleTuner config carries a `publishing_config` entry; the trainer's own
`PublishingManager` (from the released wheel, tests/api/served.py) is built from it exactly
as the trainer builds it, publishes an `output_dir` with a small and a 9 MiB file (one PUT
each: `force_single_part`), and reads a checkpoint back as a resuming trainer does.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import boto3
import pytest
import trustme
from botocore.exceptions import ClientError

from gpufleet.artifacts.backends import open_artifact_store
from tests.api.conftest import Agent, Fleet
from tests.api.served import free_socket, serve, trainer_publishing
from tests.api.test_artifact_store import _s3_settings
from tests.api.test_simpletuner_dialect import SIMPLETUNER_JOB, simpletuner_agent

__all__ = ["trainer_publishing"]  # a fixture, used by name
MiB = 1024 * 1024
OUTPUT = {**SIMPLETUNER_JOB, "output_dir": "output/models"}


@pytest.fixture
async def served_fleet(tmp_path: Path, database_url: str) -> AsyncIterator[Fleet]:
    """The app on a real socket, its `--public-url` that socket's address."""
    sock = free_socket()
    fleet = Fleet(tmp_path, database_url)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    fleet.settings = fleet.settings.model_copy(update={"public_url": url})
    await fleet.start()
    try:
        async with serve(fleet.app, sock):
            yield fleet
    finally:
        await fleet.stop()


async def running_simpletuner_job(
    fleet: Fleet, config: dict[str, Any] = OUTPUT
) -> tuple[Agent, dict[str, Any]]:
    agent = await simpletuner_agent(fleet, f"st-{secrets.token_hex(3)}")
    await fleet.submit(config=config, max_retries=2, retry_on=["failed", "lost"])
    offer = await agent.next_offer()
    await agent.run(offer, dialect="simpletuner")
    return agent, offer


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    """boto3 clients made by a test, closed before the server stops (an open keep-alive
    connection would outlive it)."""
    made: list[Any] = []
    yield made
    for client in made:
        client.close()


def publisher(module: ModuleType, offer: dict[str, Any], clients: list[Any]) -> Any:
    """The trainer's publishing manager, from the offered config as the trainer reads it."""
    manager = module.PublishingManager(offer["config"]["publishing_config"])
    clients += [provider._client for provider in manager.providers]
    return manager


def write_output(root: Path) -> dict[str, bytes]:
    files = {
        "models/pytorch_lora_weights.safetensors": secrets.token_bytes(9 * MiB + 17),
        "models/config.json": b'{"rank": 16}',
        "models/checkpoint-20/checkpoint_manifest.json": b'{"files": ["state.bin"]}',
        "models/checkpoint-20/state.bin": secrets.token_bytes(4096),
    }
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return files


async def listed(fleet: Fleet, job_id: str) -> dict[str, dict[str, Any]]:
    answer = await fleet.admin.get(f"/api/queue/{job_id}/artifacts")
    assert answer.status_code == 200, answer.text
    return {a["path"]: a for a in answer.json()["artifacts"]}


async def test_the_trainers_publisher_stores_its_output_dir_as_artifacts_of_the_attempt(
    served_fleet: Fleet, clients: list[Any], trainer_publishing: ModuleType, tmp_path: Path
) -> None:
    fleet = served_fleet
    _agent, offer = await running_simpletuner_job(fleet)
    entry = offer["config"]["publishing_config"][0]
    assert entry["endpoint_url"] == f"{fleet.settings.public_url}/api/cloud/storage"
    assert entry["secret_key"] == offer["upload_token"] != ""
    files = write_output(tmp_path / "out")
    manager = publisher(trainer_publishing, offer, clients)
    # As `_publish_final_artifacts` calls it: the output_dir, named by its folder's name.
    results = await asyncio.to_thread(
        manager.publish, tmp_path / "out" / "models", artifact_name="models"
    )
    assert [r.provider for r in results] == ["s3"]  # a failed provider is logged, not raised
    stored = await listed(fleet, offer["job_id"])
    assert set(stored) == {f"output/{name}" for name in files}
    for name, data in files.items():
        art = stored[f"output/{name}"]
        assert (art["size"], art["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
        assert art["attempt_id"] == offer["attempt_id"] and art["kind"] == "artifact"
        got = await fleet.admin.get(f"/api/queue/{offer['job_id']}/artifacts/output/{name}")
        assert got.content == data


async def test_a_resuming_trainer_reads_a_checkpoint_back_with_boto3(
    served_fleet: Fleet, clients: list[Any], trainer_publishing: ModuleType, tmp_path: Path
) -> None:
    """`download_checkpoint` as the trainer calls it: GET the manifest, then `download_file`
    each entry (HEAD, then ranged GETs for a file over boto3's 8 MiB threshold)."""
    fleet = served_fleet
    _agent, offer = await running_simpletuner_job(fleet)
    out = tmp_path / "out"
    files = write_output(out)
    big = secrets.token_bytes(9 * MiB + 5)  # over boto3's multipart threshold: ranged GETs
    (out / "models/checkpoint-20/big.bin").write_bytes(big)
    (out / "models/checkpoint-20/checkpoint_manifest.json").write_text(
        '{"files": ["state.bin", "big.bin"]}'
    )
    manager = publisher(trainer_publishing, offer, clients)
    await asyncio.to_thread(manager.publish, out / "models", artifact_name="models")
    provider = manager.providers[0]
    prefix = provider.resolve_key_prefix(f"{offer['job_id']}/models/checkpoint-20")
    restored = tmp_path / "restored"
    manifest = await asyncio.to_thread(
        provider.download_checkpoint,
        key_prefix=prefix,
        local_dir=restored,
        manifest_filename="checkpoint_manifest.json",
    )
    assert manifest == {"files": ["state.bin", "big.bin"]}
    assert (restored / "state.bin").read_bytes() == files["models/checkpoint-20/state.bin"]
    assert (restored / "big.bin").read_bytes() == big


@functools.cache
def boto_session() -> Any:
    """One session for the module's clients (a new one reads botocore's files again)."""
    return boto3.session.Session()


def s3_client(fleet: Fleet, clients: list[Any], token: str, **headers: str) -> Any:
    """A boto3 client configured as the trainer's S3 provider configures it."""
    client = boto_session().client(
        "s3",
        endpoint_url=f"{fleet.settings.public_url}/api/cloud/storage",
        use_ssl=False,
        aws_access_key_id="local",
        aws_secret_access_key=token,
    )

    def inject(request: Any, **_: Any) -> None:
        for name, value in headers.items():
            request.headers[name] = value

    client.meta.events.register("before-sign.s3", inject)
    clients.append(client)
    return client


async def test_a_wrong_token_is_refused_and_stores_nothing(
    served_fleet: Fleet, clients: list[Any]
) -> None:
    fleet = served_fleet
    _agent, offer = await running_simpletuner_job(fleet)
    _other_agent, other = await running_simpletuner_job(fleet)
    key = f"{offer['job_id']}/models/model.bin"
    attempts = [
        {},  # no token header at all
        {"X-SimpleTuner-Secret": "not-a-token"},
        {"X-Upload-Token": other["upload_token"]},  # another job's token
        {"X-SimpleTuner-Secret": ""},
    ]
    for headers in attempts:
        client = s3_client(fleet, clients, offer["upload_token"], **headers)
        with pytest.raises(ClientError) as refused:
            await asyncio.to_thread(client.put_object, Bucket="gpufleet", Key=key, Body=b"x")
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 401, headers
    assert await listed(fleet, offer["job_id"]) == {}
    assert await fleet.ctx.artifacts.list("jobs") == []
    # The X-Upload-Token form is as good as the trainer's header.
    client = s3_client(fleet, clients, "-", **{"X-Upload-Token": offer["upload_token"]})
    await asyncio.to_thread(client.put_object, Bucket="gpufleet", Key=key, Body=b"x")
    assert set(await listed(fleet, offer["job_id"])) == {"output/models/model.bin"}


async def test_a_fenced_attempts_token_is_refused_with_409_and_stores_nothing(
    served_fleet: Fleet, clients: list[Any]
) -> None:
    fleet = served_fleet
    agent, offer = await running_simpletuner_job(fleet)
    await agent.report(offer["job_id"], "failed", error="boom")  # retried: attempt 2
    again = await agent.next_offer()
    assert again["upload_token"] not in ("", offer["upload_token"])
    stale = s3_client(fleet, clients, "-", **{"X-SimpleTuner-Secret": offer["upload_token"]})
    with pytest.raises(ClientError) as refused:
        await asyncio.to_thread(
            stale.put_object, Bucket="gpufleet", Key=f"{offer['job_id']}/m/x", Body=b"late"
        )
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 409
    assert await listed(fleet, offer["job_id"]) == {}


@pytest.fixture
async def tls_fleet(
    tmp_path: Path, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Fleet]:
    """As `served_fleet`, over HTTPS (a test CA that boto3 is told to trust)."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("AWS_CA_BUNDLE", str(tmp_path / "ca.pem"))
    sock = free_socket()
    fleet = Fleet(tmp_path, database_url)
    url = f"https://127.0.0.1:{sock.getsockname()[1]}"
    fleet.settings = fleet.settings.model_copy(update={"public_url": url})
    await fleet.start()
    try:
        async with serve(fleet.app, sock, ca.issue_cert("127.0.0.1"), tmp_path):
            yield fleet
    finally:
        await fleet.stop()


async def test_boto3_over_https_sends_aws_chunked_bodies_that_are_decoded(
    tls_fleet: Fleet, clients: list[Any], trainer_publishing: ModuleType, tmp_path: Path
) -> None:
    """Over HTTPS boto3 streams `aws-chunked` with a CRC32 trailer."""
    fleet = tls_fleet
    _agent, offer = await running_simpletuner_job(fleet)
    assert offer["config"]["publishing_config"][0]["use_ssl"] is True
    files = write_output(tmp_path / "out")
    manager = publisher(trainer_publishing, offer, clients)
    encodings: list[str] = []

    def seen(request: Any, **_: Any) -> None:
        encodings.append(request.headers.get("Content-Encoding", b"") or "")

    manager.providers[0]._client.meta.events.register("before-send.s3", seen)
    await asyncio.to_thread(manager.publish, tmp_path / "out" / "models")
    assert encodings and all("aws-chunked" in str(e) for e in encodings), encodings
    stored = await listed(fleet, offer["job_id"])
    assert {p: a["sha256"] for p, a in stored.items()} == {
        f"output/{name}": hashlib.sha256(data).hexdigest() for name, data in files.items()
    }


async def test_on_object_storage_the_trainers_files_land_in_the_bucket_and_read_back(
    served_fleet: Fleet,
    clients: list[Any],
    trainer_publishing: ModuleType,
    tmp_path: Path,
    s3_endpoint: str,
) -> None:
    """With an s3:// store the trainer's bytes pass through the orchestrator into the bucket
    (boto3 follows no redirect); ranged reads come back out of it."""
    fleet = served_fleet
    fleet.ctx.artifacts = open_artifact_store(_s3_settings(s3_endpoint))
    _agent, offer = await running_simpletuner_job(fleet)
    out = tmp_path / "out"
    files = write_output(out)
    manager = publisher(trainer_publishing, offer, clients)
    await asyncio.to_thread(manager.publish, out / "models", artifact_name="models")
    stored = await listed(fleet, offer["job_id"])
    assert set(stored) == {f"output/{name}" for name in files}
    in_bucket = {found.key: found.size for found in await fleet.ctx.artifacts.list("jobs")}
    assert sorted(in_bucket.values()) == sorted(len(d) for d in files.values())
    client = manager.providers[0]._client
    target = tmp_path / "weights.safetensors"
    key = f"{offer['job_id']}/models/pytorch_lora_weights.safetensors"
    await asyncio.to_thread(client.download_file, "gpufleet", key, str(target))
    assert target.read_bytes() == files["models/pytorch_lora_weights.safetensors"]
