"""A job's code for the job page (services/workdir_files.py): the files of the snapshot its
config names and one small text file, read from the stored tar; only for those who may read
the job's code (its owner, its team, an admin)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import httpx

from gpufleet.artifacts.backends import open_artifact_store
from gpufleet.artifacts.workdir_archive import pack
from tests.api.conftest import Fleet
from tests.api.test_artifact_store import _s3_settings
from tests.api.test_policy import add_team, add_user, client_of
from tests.api.test_workdirs import digest, put


def snapshot(tmp_path: Path) -> bytes:
    root = tmp_path / "tree"
    (root / "src").mkdir(parents=True)
    (root / "train.py").write_text("print('héllo')\n")
    (root / "src" / "model.py").write_text("W = 1\n")
    (root / "weights.bin").write_bytes(b"\x00\x01\xff" * 10)
    (root / "big.txt").write_text("x" * (256 * 1024 + 1))
    (root / "link.py").symlink_to("train.py")
    out = io.BytesIO()
    pack(root, ["train.py", "src/model.py", "weights.bin", "big.txt", "link.py"], out)
    return out.getvalue()


async def test_the_code_of_a_job_is_listed_and_a_small_text_file_read(
    fleet: Fleet, tmp_path: Path
) -> None:
    body = snapshot(tmp_path)
    assert (await put(fleet.admin, body)).status_code == 201
    job = await fleet.submit(config={"command": ["python", "train.py"], "workdir": digest(body)})
    code = (await fleet.admin.get(f"/api/queue/{job['id']}/workdir")).json()
    assert (code["digest"], code["size"], code["total"], code["truncated"]) == (
        digest(body),
        len(body),
        5,
        False,
    )
    assert [(f["path"], f["type"]) for f in code["files"]] == [
        ("big.txt", "file"),
        ("link.py", "link"),
        ("src/model.py", "file"),
        ("train.py", "file"),
        ("weights.bin", "file"),
    ]
    assert code["files"][0]["size"] == 256 * 1024 + 1

    async def read(path: str) -> httpx.Response:
        return await fleet.admin.get(f"/api/queue/{job['id']}/workdir/file", params={"path": path})

    text = (await read("train.py")).json()
    assert (text["status"], text["text"], text["size"]) == ("text", "print('héllo')\n", 16)
    assert (await read("src/model.py")).json()["text"] == "W = 1\n"
    for path, status in (("weights.bin", "binary"), ("big.txt", "too_large"), ("link.py", "link")):
        answer = (await read(path)).json()
        assert (answer["status"], answer["text"]) == (status, None), path
    assert (await read("link.py")).json()["link"] == "train.py"
    assert (await read("nope.py")).status_code == 404
    assert (await read("src")).status_code == 404


async def test_hostile_paths_are_refused_with_422(fleet: Fleet, tmp_path: Path) -> None:
    body = snapshot(tmp_path)
    await put(fleet.admin, body)
    job = await fleet.submit(config={"command": ["true"], "workdir": digest(body)})
    url = f"/api/queue/{job['id']}/workdir/file"
    for hostile in ("../etc/passwd", "/etc/passwd", "src/../train.py", "a\x00b", ""):
        answer = await fleet.admin.get(url, params={"path": hostile})
        assert answer.status_code == 422, hostile
    long = await fleet.admin.get(url, params={"path": "a" * 5000})
    assert long.status_code == 422
    surrogate = await fleet.admin.get(f"{url}?path=%ED%A0%80")  # a lone surrogate, encoded
    assert 400 <= surrogate.status_code < 500


async def test_a_job_without_a_workdir_and_an_unknown_job_answer_404(fleet: Fleet) -> None:
    job = await fleet.submit(config={"command": ["true"]})
    answer = await fleet.admin.get(f"/api/queue/{job['id']}/workdir")
    assert answer.status_code == 404 and "names no workdir" in answer.json()["detail"]
    assert (await fleet.admin.get("/api/queue/j_nope/workdir")).status_code == 404


async def test_only_the_owner_its_team_and_admins_read_a_jobs_code(
    fleet: Fleet, tmp_path: Path
) -> None:
    nlp, vision = await add_team(fleet, "nlp"), await add_team(fleet, "vision")
    alice = await client_of(fleet, await add_user(fleet, "alice", "researcher", team=nlp))
    mate = await client_of(fleet, await add_user(fleet, "nina", "viewer", team=nlp), "queue.read")
    outsider = await client_of(fleet, await add_user(fleet, "otto", "viewer", team=vision))
    lead = await client_of(fleet, await add_user(fleet, "lee", "lead", team=vision))
    body = snapshot(tmp_path)
    assert (await put(alice, body)).status_code == 201
    submitted = await alice.post(
        "/api/queue/submit", json={"config": {"command": ["true"], "workdir": digest(body)}}
    )
    job_id = submitted.json()["id"]
    paths = (f"/api/queue/{job_id}/workdir", f"/api/queue/{job_id}/workdir/file?path=train.py")
    for allowed in (alice, mate, fleet.admin):
        for path in paths:
            assert (await allowed.get(path)).status_code == 200, path
    for refused in (outsider, lead):  # another team's viewer, another team's lead
        for path in paths:
            answer = await refused.get(path)
            assert answer.status_code == 403 and "member of its team" in answer.json()["detail"]
    scraper = await fleet.mint_key("metrics.read", name="scraper")
    async with fleet.client(headers={"Authorization": f"Bearer {scraper['key']}"}) as other:
        assert (await other.get(paths[0])).status_code == 403
    assert (await fleet.http.get(paths[0])).status_code == 401


async def test_a_listing_is_read_once_from_the_store(fleet: Fleet, tmp_path: Path) -> None:
    body = snapshot(tmp_path)
    await put(fleet.admin, body)
    job = await fleet.submit(config={"command": ["true"], "workdir": digest(body)})
    opened: list[str] = []
    real_open = fleet.ctx.artifacts.open

    async def counted(key: str) -> object:
        opened.append(key)
        return await real_open(key)

    fleet.ctx.artifacts.open = counted  # type: ignore[method-assign,assignment]
    for _ in range(3):
        assert (await fleet.admin.get(f"/api/queue/{job['id']}/workdir")).status_code == 200
    assert len(opened) == 1


def test_an_archive_member_reads_back_at_its_offset(tmp_path: Path) -> None:
    body = snapshot(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        member = tar.getmember("src/model.py")
        assert body[member.offset_data : member.offset_data + member.size] == b"W = 1\n"


async def test_on_object_storage_the_code_is_listed_and_read_alike(
    fleet: Fleet, s3_endpoint: str, tmp_path: Path
) -> None:
    fleet.ctx.artifacts = open_artifact_store(_s3_settings(s3_endpoint))
    body = snapshot(tmp_path)
    assert (await put(fleet.admin, body)).status_code == 201
    job = await fleet.submit(config={"command": ["true"], "workdir": digest(body)})
    code = (await fleet.admin.get(f"/api/queue/{job['id']}/workdir")).json()
    assert code["total"] == 5 and code["size"] == len(body)
    read = await fleet.admin.get(
        f"/api/queue/{job['id']}/workdir/file", params={"path": "src/model.py"}
    )
    assert (read.json()["status"], read.json()["text"]) == ("text", "W = 1\n")
