"""`gpufleet jobs artifacts` and `gpufleet jobs download` (#17), the real command against a real
orchestrator whose job got its files through the worker upload API, as an agent sends them.

Two faults are injected: a stored file overwritten on the orchestrator's disk after it was
verified (the download must notice and keep nothing), and a stand-in orchestrator on a real
socket that lists a path climbing out of the folder and redirects a download elsewhere (the
real one validates paths, so only a liar can test that the CLI does not trust it).
"""

from __future__ import annotations

import http.server
import json
import secrets
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.artifact_uploads import Attempt, s3_serving, sha
from tests.e2e.commands import as_json, environment, gf, gpufleet, ok
from tests.e2e.conftest import ServerProcess, serving, unique

MODEL = secrets.token_bytes(300_000)
FILES = {
    "output/model.bin": MODEL,
    "output/notes/a b?#%.txt": b"odd names travel too\n",
    "output/result.json": json.dumps({"loss": 0.125}).encode(),
}
WEIGHTS = secrets.token_bytes(70_000)
CHECKPOINT = {"output/checkpoint-10/weights.npz": WEIGHTS}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from serving(tmp_path_factory.mktemp("artifacts-cli"), None, **{"heartbeat-timeout": 120})


def job_with_files(server: ServerProcess) -> Attempt:
    attempt = Attempt(server)
    attempt.checkpoint("checkpoint-10", 10, {"weights.npz": WEIGHTS})
    for path, data in FILES.items():
        attempt.upload(path, data)
    attempt.finish()
    return attempt


@pytest.fixture(scope="module")
def done(server: ServerProcess) -> Attempt:
    """A completed job with three files and a one-file checkpoint, shared by the read-only
    tests."""
    return job_with_files(server)


def saved(directory: Path) -> dict[str, str]:
    """Every file under `directory` (hidden ones too): its path and sha256."""
    return {
        p.relative_to(directory).as_posix(): sha(p.read_bytes())
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def failed(result: Any) -> str:
    assert result.returncode == 1, f"rc {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr
    return str(result.stderr)


# ---- list -------------------------------------------------------------------------------


def test_artifacts_lists_files_and_checkpoints_by_the_start_of_the_job_id(
    server: ServerProcess, done: Attempt
) -> None:
    table = ok(gf(server, "jobs", "artifacts", done.job_id[:-2]))
    rows = {line.split()[2]: line.split() for line in table.splitlines() if "output/" in line}
    assert rows["output/model.bin"][:6] == [
        "1",
        "artifact",
        "output/model.bin",
        "293.0",
        "KiB",
        sha(MODEL)[:12],
    ]
    assert rows["output/checkpoint-10/weights.npz"][1:5] == [
        "checkpoint",
        "output/checkpoint-10/weights.npz",
        "68.4",
        "KiB",
    ]
    checkpoint = next(line.split() for line in table.splitlines() if "checkpoint-10 " in line)
    assert checkpoint[:7] == [
        "1",
        "checkpoint-10",
        "10",
        "1",
        "68.4",
        "KiB",
        "output/checkpoint-10",
    ]
    assert f"gpufleet jobs download {done.job_id} -o DIR" in table


def test_artifacts_says_when_the_job_is_pinned(server: ServerProcess) -> None:
    attempt = Attempt(server)
    attempt.upload("output/result.json", b"{}")
    attempt.finish()
    assert "pinned" not in ok(gf(server, "jobs", "artifacts", attempt.job_id))
    with server.admin() as admin:
        resp = admin.put(f"/api/queue/{attempt.job_id}/artifacts/pin", json={"pinned": True})
        assert resp.status_code == 200, resp.text
    said = ok(gf(server, "jobs", "artifacts", attempt.job_id))
    assert f"Job {attempt.job_id}: 1 file, 2 B, pinned (kept past retention)" in said


def test_artifacts_json_is_the_apis_listing(server: ServerProcess, done: Attempt) -> None:
    body = as_json(gf(server, "jobs", "artifacts", done.job_id, "--json"))
    with server.admin() as admin:
        assert body == admin.get(f"/api/queue/{done.job_id}/artifacts").json()
    listed = {a["path"]: a["sha256"] for a in body["artifacts"]}
    assert listed == {p: sha(d) for p, d in {**FILES, **CHECKPOINT}.items()}


def test_a_job_without_files_says_so(server: ServerProcess) -> None:
    attempt = Attempt(server)
    attempt.finish()
    assert "has no stored files yet" in ok(gf(server, "jobs", "artifacts", attempt.job_id))
    error = failed(gf(server, "jobs", "download", attempt.job_id, "-o", "x"))
    assert f"gpufleet jobs artifacts {attempt.job_id}" in error


# ---- download ---------------------------------------------------------------------------


def test_download_brings_every_file_home_with_its_path_and_sha256(
    server: ServerProcess, done: Attempt, tmp_path: Path
) -> None:
    into = tmp_path / "home"
    said = ok(gf(server, "jobs", "download", done.job_id, "-o", str(into)))
    assert saved(into) == {p: sha(d) for p, d in {**FILES, **CHECKPOINT}.items()}
    assert f"Downloaded 4 files (361.4 KiB) of job {done.job_id} into {into}" in said
    # Again: every file is there with its sha256 already, and nothing is fetched.
    again = ok(gf(server, "jobs", "download", done.job_id, "-o", str(into)))
    assert "Downloaded 0 files (0 B)" in again and "4 already there" in again


def test_download_takes_named_paths_folders_and_globs_only(
    server: ServerProcess, done: Attempt, tmp_path: Path
) -> None:
    one = tmp_path / "one"
    ok(gf(server, "jobs", "download", done.job_id, "output/model.bin", "-o", str(one)))
    assert saved(one) == {"output/model.bin": sha(MODEL)}
    some = tmp_path / "some"
    ok(gf(server, "jobs", "download", done.job_id, "**/*.npz", "output/notes", "-o", str(some)))
    assert set(saved(some)) == {"output/checkpoint-10/weights.npz", "output/notes/a b?#%.txt"}
    light = tmp_path / "light"
    ok(gf(server, "jobs", "download", done.job_id, "--no-checkpoints", "-o", str(light)))
    assert set(saved(light)) == set(FILES)
    first = tmp_path / "first"
    body = as_json(
        gf(server, "jobs", "download", done.job_id, "--attempt", "1", "--json", "-o", str(first))
    )
    assert sorted(f["path"] for f in body["files"]) == sorted({**FILES, **CHECKPOINT})
    assert {f["status"] for f in body["files"]} == {"downloaded"}
    error = failed(gf(server, "jobs", "download", done.job_id, "--attempt", "2", "-o", "x"))
    assert f"job {done.job_id} has no stored files from attempt 2 to download" in error


def test_each_path_comes_from_the_newest_attempt_and_show_names_the_resume(
    server: ServerProcess, tmp_path: Path
) -> None:
    attempt = Attempt(server)
    first = attempt.checkpoint("checkpoint-10", 10, {"weights.npz": WEIGHTS})
    attempt.upload("output/model.bin", b"first attempt's")
    assert attempt.preempt()["checkpoint_id"] == first
    attempt.upload("output/model.bin", MODEL)
    attempt.finish()
    shown = ok(gf(server, "jobs", "show", attempt.job_id))
    resumed = next(line for line in shown.splitlines() if line.startswith("2 "))
    assert resumed.rstrip().endswith("checkpoint-10 (attempt 1)")
    first_row = next(line for line in shown.splitlines() if line.startswith("1 "))
    assert first_row.rstrip().endswith("-")
    newest = tmp_path / "newest"
    ok(gf(server, "jobs", "download", attempt.job_id, "-o", str(newest)))
    assert saved(newest) == {
        "output/model.bin": sha(MODEL),
        **{p: sha(WEIGHTS) for p in CHECKPOINT},
    }
    older = tmp_path / "older"
    ok(gf(server, "jobs", "download", attempt.job_id, "--attempt", "1", "-o", str(older)))
    assert saved(older)["output/model.bin"] == sha(b"first attempt's")


def test_a_path_no_file_has_is_one_line_and_nothing_is_written(
    server: ServerProcess, done: Attempt, tmp_path: Path
) -> None:
    into = tmp_path / "into"
    error = failed(
        gf(server, "jobs", "download", done.job_id, "output/result.json", "nope/*", "-o", str(into))
    )
    assert error.strip().splitlines() == [
        "Error: no stored file of this job matches 'nope/*'; list them with "
        "`gpufleet jobs artifacts JOB` and give a path, a folder or a glob from it"
    ]
    assert not into.exists()


def test_a_file_whose_stored_bytes_changed_is_not_kept_and_the_command_says_which(
    server: ServerProcess, tmp_path: Path
) -> None:
    attempt = job_with_files(server)
    blob = server.data_dir / "artifacts" / "jobs" / attempt.job_id / attempt.attempt_id
    stored = blob / "output" / "model.bin"
    assert stored.read_bytes() == MODEL  # the fault goes where the store keeps the file
    stored.write_bytes(bytes(len(MODEL)))  # same size, other bytes: bit rot, or tampering
    into = tmp_path / "into"
    error = failed(gf(server, "jobs", "download", attempt.job_id, "-o", str(into)))
    assert "1 of 4 files did not download and were not kept: output/model.bin (" in error
    assert f"gpufleet jobs download {attempt.job_id} -o {into}" in error
    # The others are in place; of the damaged one, nothing, not even a partial file.
    assert saved(into) == {
        p: sha(d) for p, d in {**FILES, **CHECKPOINT}.items() if p != "output/model.bin"
    }


def test_a_folder_inside_the_target_that_links_elsewhere_is_refused(
    server: ServerProcess, done: Attempt, tmp_path: Path
) -> None:
    into, elsewhere = tmp_path / "into", tmp_path / "elsewhere"
    into.mkdir()
    elsewhere.mkdir()
    (into / "output").symlink_to(elsewhere, target_is_directory=True)
    error = failed(gf(server, "jobs", "download", done.job_id, "-o", str(into)))
    assert "a folder on its way is a link to elsewhere; nothing was downloaded" in error
    assert list(elsewhere.iterdir()) == []
    assert saved(into) == {}


def test_a_key_that_may_only_read_the_queue_downloads_too(
    server: ServerProcess, done: Attempt, tmp_path: Path
) -> None:
    with server.admin() as admin:
        minted = admin.post(
            "/api/admin/api-keys", json={"name": unique("reader"), "permissions": ["queue.read"]}
        )
        assert minted.status_code == 201, minted.text
    key = minted.json()["key"]
    into = tmp_path / "into"
    ok(gf(server, "jobs", "download", done.job_id, "*/result.json", "-o", str(into), key=key))
    assert saved(into) == {"output/result.json": sha(FILES["output/result.json"])}


# ---- object storage: the bytes come from the bucket --------------------------------------


@pytest.fixture(scope="module")
def s3_server(
    tmp_path_factory: pytest.TempPathFactory, s3_endpoint: str
) -> Iterator[ServerProcess]:
    yield from s3_serving(tmp_path_factory.mktemp("artifacts-s3"), s3_endpoint)


def test_with_object_storage_download_follows_the_presigned_link_and_checks_each_file(
    s3_server: ServerProcess, tmp_path: Path
) -> None:
    attempt = Attempt(s3_server)
    attempt.checkpoint("checkpoint-10", 10, {"weights.npz": WEIGHTS})
    for path, data in FILES.items():
        attempt.upload(path, data)
    attempt.finish()
    with s3_server.admin() as admin:  # the orchestrator hands out a link, not the bytes
        answer = admin.get(f"/api/queue/{attempt.job_id}/artifacts/output/model.bin")
    assert answer.status_code == 307, answer.text
    assert "X-Amz-Signature=" in answer.headers["location"]
    into = tmp_path / "into"
    ok(gf(s3_server, "jobs", "download", attempt.job_id, "-o", str(into)))
    assert saved(into) == {p: sha(d) for p, d in {**FILES, **CHECKPOINT}.items()}


# ---- a stand-in orchestrator that lies ----------------------------------------------------


class StandIn:
    """An HTTP server on a real socket that answers from `routes` (path → handler) and keeps
    the headers of every request it got."""

    def __init__(self, routes: dict[str, Callable[[http.server.BaseHTTPRequestHandler], None]]):
        self.requests: list[tuple[str, dict[str, str]]] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.requests.append((self.path, dict(self.headers)))
                route = routes.get(self.path.split("?")[0])
                if route is None:
                    self.send_error(404)
                else:
                    route(self)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def send_json(body: Any) -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    def answer(handler: http.server.BaseHTTPRequestHandler) -> None:
        data = json.dumps(body).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    return answer


def listing(job_id: str, *files: tuple[str, bytes]) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "pinned": False,
        "total_bytes": sum(len(d) for _, d in files),
        "checkpoints": [],
        "artifacts": [
            {
                "id": f"r_{n}",
                "job_id": job_id,
                "attempt_id": "a_1",
                "attempt_number": 1,
                "path": path,
                "kind": "artifact",
                "checkpoint": None,
                "size": len(data),
                "sha256": sha(data),
                "created_at": "2026-01-01T00:00:00+00:00",
            }
            for n, (path, data) in enumerate(files)
        ],
    }


def stand_in_queue(job_id: str) -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    return send_json({"jobs": [{"id": job_id}], "total": 1})


@pytest.fixture
def stand_ins() -> Iterator[Callable[..., StandIn]]:
    made: list[StandIn] = []

    def make(routes: dict[str, Any]) -> StandIn:
        made.append(StandIn(routes))
        return made[-1]

    yield make
    for stand_in in made:
        stand_in.close()


def run_against(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`gpufleet ARGS` pointed at a stand-in, with a key the stand-in can recognise."""
    return gpufleet(*args, env=environment(GPUFLEET_URL=url, GPUFLEET_API_KEY="gfk_standin"))


@pytest.mark.parametrize("path", ["../escape.txt", "output/../../escape.txt", "/tmp/escape.txt"])
def test_a_listed_path_that_climbs_out_of_the_folder_is_refused_before_anything_is_written(
    stand_ins: Callable[..., StandIn], tmp_path: Path, path: str
) -> None:
    job = "j_liar"
    liar = stand_ins(
        {
            "/api/queue": stand_in_queue(job),
            f"/api/queue/{job}/artifacts": send_json(
                listing(job, ("result.json", b"{}"), (path, b"owned"))
            ),
        }
    )
    into = tmp_path / "deep" / "into"
    error = failed(run_against(liar.url, "jobs", "download", job, "-o", str(into)))
    assert "nothing was downloaded" in error and "is not a plain path inside" in error
    assert not (tmp_path / "deep" / "escape.txt").exists() and not into.exists()
    assert not any("/artifacts/" in p for p, _ in liar.requests)  # no byte was even asked for


@pytest.mark.parametrize(
    "change",
    [
        {"size": -1},
        {"size": 1e300},
        {"size": "10"},
        {"sha256": "z" * 64},
        {"sha256": None},
        {"path": None},
        {"attempt_number": "1"},
    ],
    ids=str,
)
def test_a_listed_record_without_a_usable_size_sha256_or_path_is_refused(
    stand_ins: Callable[..., StandIn], tmp_path: Path, change: dict[str, Any]
) -> None:
    job = "j_garbled"
    body = listing(job, ("output/model.bin", b"weights"))
    body["artifacts"][0].update(change)
    liar = stand_ins(
        {"/api/queue": stand_in_queue(job), f"/api/queue/{job}/artifacts": send_json(body)}
    )
    error = failed(run_against(liar.url, "jobs", "download", job, "-o", str(tmp_path / "x")))
    assert "listed a file without a usable path, attempt, size or sha256" in error
    assert not (tmp_path / "x").exists()


def test_a_file_deleted_after_the_listing_is_named_and_the_others_are_kept(
    stand_ins: Callable[..., StandIn], tmp_path: Path
) -> None:
    job = "j_racing"
    body = listing(job, ("output/gone.bin", b"deleted meanwhile"), ("output/kept.txt", b"here"))

    def kept(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", "4")
        handler.end_headers()
        handler.wfile.write(b"here")

    orchestrator = stand_ins(
        {
            "/api/queue": stand_in_queue(job),
            f"/api/queue/{job}/artifacts": send_json(body),
            f"/api/queue/{job}/artifacts/output/kept.txt": kept,
        }
    )
    into = tmp_path / "into"
    error = failed(run_against(orchestrator.url, "jobs", "download", job, "-o", str(into)))
    assert (
        "1 of 2 files did not download and were not kept: output/gone.bin (deleted since" in error
    )
    assert saved(into) == {"output/kept.txt": sha(b"here")}


def test_a_redirect_to_the_store_is_followed_without_the_api_key(
    stand_ins: Callable[..., StandIn], tmp_path: Path
) -> None:
    job, data = "j_redirect", secrets.token_bytes(5000)

    def bucket_file(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    bucket = stand_ins({"/bucket/jobs/model.bin": bucket_file})

    def redirect(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(307)
        handler.send_header("Location", f"{bucket.url}/bucket/jobs/model.bin?X-Amz-Signature=x")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    orchestrator = stand_ins(
        {
            "/api/queue": stand_in_queue(job),
            f"/api/queue/{job}/artifacts": send_json(listing(job, ("output/model.bin", data))),
            f"/api/queue/{job}/artifacts/output/model.bin": redirect,
        }
    )
    into = tmp_path / "into"
    ok(run_against(orchestrator.url, "jobs", "download", job, "-o", str(into)))
    assert saved(into) == {"output/model.bin": sha(data)}
    [(path, headers)] = bucket.requests
    assert path == "/bucket/jobs/model.bin?X-Amz-Signature=x"
    assert "Authorization" not in headers and "gfk_standin" not in json.dumps(headers)
    asked = [h for p, h in orchestrator.requests if p.startswith(f"/api/queue/{job}/artifacts/")]
    assert asked and asked[0]["Authorization"] == "Bearer gfk_standin"


def test_a_store_that_refuses_the_link_is_one_line_saying_to_run_again(
    stand_ins: Callable[..., StandIn], tmp_path: Path
) -> None:
    job = "j_expired"
    bucket = stand_ins({})  # every object: 404, as an expired or foreign link gets

    def redirect(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(307)
        handler.send_header("Location", f"{bucket.url}/gone")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    orchestrator = stand_ins(
        {
            "/api/queue": stand_in_queue(job),
            f"/api/queue/{job}/artifacts": send_json(listing(job, ("result.json", b"{}"))),
            f"/api/queue/{job}/artifacts/result.json": redirect,
        }
    )
    error = failed(run_against(orchestrator.url, "jobs", "download", job, "-o", str(tmp_path)))
    assert (
        "refused the download link the orchestrator gave (HTTP 404); run the command again" in error
    )
    assert saved(tmp_path) == {}


def test_download_does_not_follow_a_redirect_to_a_scheme_other_than_http(
    stand_ins: Callable[..., StandIn], tmp_path: Path
) -> None:
    job = "j_file"

    def redirect(handler: http.server.BaseHTTPRequestHandler) -> None:
        handler.send_response(307)
        handler.send_header("Location", "file:///etc/passwd")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    orchestrator = stand_ins(
        {
            "/api/queue": stand_in_queue(job),
            f"/api/queue/{job}/artifacts": send_json(listing(job, ("result.json", b"{}"))),
            f"/api/queue/{job}/artifacts/result.json": redirect,
        }
    )
    error = failed(run_against(orchestrator.url, "jobs", "download", job, "-o", str(tmp_path)))
    assert "redirected the download to a file: URL, which is not followed" in error
    assert saved(tmp_path) == {}
