"""A working fake of the orchestrator's artifact routes (docs/artifacts.md, "Worker API"), as
an httpx handler: it checks what a real server checks (the attempt, sizes, sha256, committed
files) and records every request, so the worker's client is tested against the contract
without a server. Both backends: `via: orchestrator` (a path on the orchestrator) and
`via: store` (an absolute presigned URL on another host, taking no worker token)."""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

STORE = "https://store.test"
_UPLOAD = re.compile(
    r"/api/workers/job/(?P<job>[^/]+)/upload(?:/(?P<id>[^/]+))?(?P<done>/complete)?$"
)
_COMMIT = re.compile(r"/api/workers/job/(?P<job>[^/]+)/checkpoints(?:/(?P<id>[^/]+))?$")
_ARTIFACT = re.compile(r"/api/workers/job/(?P<job>[^/]+)/artifacts/(?P<id>[^/]+)$")


@dataclass
class Request:
    method: str
    url: str
    token: str | None
    body: Any


@dataclass
class ArtifactFake:
    via: str = "orchestrator"  # or "store"
    live_attempt: str = "a_1"
    requests: list[Request] = field(default_factory=list)
    announced: dict[str, dict[str, Any]] = field(default_factory=dict)
    blobs: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (attempt, path) → bytes
    staged: dict[str, bytes] = field(default_factory=dict)
    checkpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_puts: int = 0  # answer this many PUTs 503 first
    refuse_paths: set[str] = field(default_factory=set)  # announce answers 422
    corrupt_download: bool = False
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def handles(self, request: httpx.Request) -> bool:
        path = request.url.path
        return request.url.host == "store.test" or bool(
            _UPLOAD.search(path) or _COMMIT.search(path) or _ARTIFACT.search(path)
        )

    async def handle(self, request: httpx.Request) -> httpx.Response:
        raw = await request.aread()
        path = request.url.path
        body: Any = raw
        if request.headers.get("content-type") == "application/json":
            body = json.loads(raw)
        self.requests.append(
            Request(request.method, str(request.url), request.headers.get("x-worker-token"), body)
        )
        if request.url.host == "store.test":
            return self._store(request, raw)
        if request.headers.get("x-worker-token") != "wt_test":
            return httpx.Response(401, json={"detail": "no worker token"})
        if match := _UPLOAD.search(path):
            if match["done"]:
                return self._complete(match["id"])
            if match["id"]:
                return self._receive(match["id"], raw)
            return self._announce(match["job"], body)
        if match := _COMMIT.search(path):
            if request.method == "GET":
                return self._fetch(match["job"], match["id"], request.url.params.get("attempt_id"))
            return self._commit(body)
        if match := _ARTIFACT.search(path):
            attempt, file_path = match["id"].split("~", 1)
            data = self.blobs[(attempt, file_path.replace("|", "/"))]
            return httpx.Response(200, content=self._maybe_corrupt(data))
        return httpx.Response(404, json={"detail": f"no route {path}"})

    # -- uploads ---------------------------------------------------------------------------

    def _announce(self, job: str, body: dict[str, Any]) -> httpx.Response:
        if body.get("attempt_id") != self.live_attempt:
            return httpx.Response(409, json={"detail": "not the live attempt"})
        if body["path"] in self.refuse_paths:
            return httpx.Response(422, json={"detail": f"path {body['path']} refused"})
        upload_id = f"u_{next(self._ids)}"
        self.announced[upload_id] = body
        if self.via == "store":
            url, via = f"{STORE}/incoming/{upload_id}?sig=x", "store"
        else:
            url, via = f"/api/workers/job/{job}/upload/{upload_id}", "orchestrator"
        return httpx.Response(
            200,
            json={
                "upload_id": upload_id,
                "method": "PUT",
                "url": url,
                "headers": {"X-Upload": upload_id},
                "via": via,
            },
        )

    def _receive(self, upload_id: str, raw: bytes) -> httpx.Response:
        if self.fail_puts > 0:
            self.fail_puts -= 1
            return httpx.Response(503, json={"detail": "busy"})
        return self._verify(upload_id, raw, 201)

    def _store(self, request: httpx.Request, raw: bytes) -> httpx.Response:
        key = request.url.path.removeprefix("/")
        if request.method == "PUT":
            if self.fail_puts > 0:
                self.fail_puts -= 1
                return httpx.Response(503)
            self.staged[key.removeprefix("incoming/")] = raw
            return httpx.Response(200)
        attempt, file_path = key.removeprefix("get/").split("~", 1)
        return httpx.Response(200, content=self._maybe_corrupt(self.blobs[(attempt, file_path)]))

    def _complete(self, upload_id: str) -> httpx.Response:
        return self._verify(upload_id, self.staged.pop(upload_id, b""), 201)

    def _verify(self, upload_id: str, raw: bytes, status: int) -> httpx.Response:
        announced = self.announced[upload_id]
        if len(raw) != announced["size"] or hashlib.sha256(raw).hexdigest() != announced["sha256"]:
            return httpx.Response(422, json={"detail": "size or sha256 is not the announced one"})
        self.blobs[(announced["attempt_id"], announced["path"])] = raw
        return httpx.Response(status, json={"id": f"r_{upload_id}", "path": announced["path"]})

    def _commit(self, body: dict[str, Any]) -> httpx.Response:
        if body.get("attempt_id") != self.live_attempt:
            return httpx.Response(409, json={"detail": "not the live attempt"})
        missing = [
            f["path"]
            for f in body["files"]
            if (data := self.blobs.get((body["attempt_id"], f["path"]))) is None
            or hashlib.sha256(data).hexdigest() != f["sha256"]
        ]
        if missing:
            return httpx.Response(422, json={"detail": f"not stored yet: {missing}"})
        checkpoint_id = f"k_{next(self._ids)}"
        self.checkpoints[checkpoint_id] = body
        return httpx.Response(201, json={"id": checkpoint_id, **body})

    # -- resume ----------------------------------------------------------------------------

    def _fetch(self, job: str, checkpoint_id: str, attempt: str | None) -> httpx.Response:
        if attempt != self.live_attempt:
            return httpx.Response(409, json={"detail": "not the live attempt"})
        if checkpoint_id not in self.checkpoints:
            return httpx.Response(404, json={"detail": "no such checkpoint"})
        body = self.checkpoints[checkpoint_id]
        files = []
        for f in body["files"]:
            if self.via == "store":
                url = f"{STORE}/get/{body['attempt_id']}~{f['path']}"
            else:
                flat = f["path"].replace("/", "|")
                artifact = f"{body['attempt_id']}~{flat}"
                url = f"/api/workers/job/{job}/artifacts/{artifact}?attempt_id={attempt}"
            files.append({**f, "url": url, "headers": {}})
        return httpx.Response(
            200,
            json={
                "id": checkpoint_id,
                "name": body["name"],
                "path": body["path"],
                "step": body["step"],
                "files": files,
            },
        )

    def _maybe_corrupt(self, data: bytes) -> bytes:
        return (b"X" + data[1:]) if self.corrupt_download and data else data

    def put_requests(self) -> list[Request]:
        return [r for r in self.requests if r.method == "PUT"]
