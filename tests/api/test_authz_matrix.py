"""Every route of the OpenAPI document against every kind of wrong credential.

Each must answer 401 or 403 as documented and change nothing. A route that appears in the
document without a row in PERMISSIONS fails the test: new routes must be classified.
"""

from __future__ import annotations

from typing import Any

from gpufleet.server.ratelimit import FailureLimiter
from gpufleet.store.tables import audit_events
from tests.api.conftest import Fleet

WORKER = "worker token"
UPLOAD = "upload token"  # SimpleTuner's storage route: the attempt's upload token only
OPEN = "open"  # liveness and readiness for load balancers
ANY_KEY = "any valid API key"  # the caller's own user
# (method, path) -> the API key permission it needs, or WORKER for the worker protocol.
PERMISSIONS: dict[tuple[str, str], str] = {
    ("get", "/api/admin/workers"): "admin.workers",
    ("get", "/api/admin/orchestrator"): "admin.workers",
    ("post", "/api/admin/workers"): "admin.workers",
    ("get", "/api/admin/workers/{worker_id}"): "admin.workers",
    ("delete", "/api/admin/workers/{worker_id}"): "admin.workers",
    ("post", "/api/admin/workers/{worker_id}/drain"): "admin.workers",
    ("post", "/api/admin/workers/{worker_id}/undrain"): "admin.workers",
    ("post", "/api/admin/workers/{worker_id}/token"): "admin.workers",
    ("put", "/api/admin/workers/{worker_id}/labels"): "admin.workers",
    ("get", "/api/admin/api-keys"): "*",
    ("post", "/api/admin/api-keys"): "*",
    ("delete", "/api/admin/api-keys/{key_id}"): "*",
    ("get", "/api/admin/webhooks"): "*",
    ("post", "/api/admin/webhooks"): "*",
    ("patch", "/api/admin/webhooks/{webhook_id}"): "*",
    ("delete", "/api/admin/webhooks/{webhook_id}"): "*",
    ("post", "/api/admin/webhooks/{webhook_id}/test"): "*",
    ("get", "/api/admin/webhooks/{webhook_id}/deliveries"): "*",
    ("get", "/api/admin/pools"): "*",
    ("post", "/api/admin/pools"): "*",
    ("get", "/api/admin/pools/{name}"): "*",
    ("patch", "/api/admin/pools/{name}"): "*",
    ("delete", "/api/admin/pools/{name}"): "*",
    ("get", "/api/capacity"): "queue.read",  # the pools, read-only, and what they cost
    ("post", "/api/workers/register"): WORKER,
    ("get", "/api/workers/stream"): WORKER,
    ("post", "/api/workers/heartbeat"): WORKER,
    ("post", "/api/workers/job/{job_id}/status"): WORKER,
    ("post", "/api/workers/job/{job_id}/logs"): WORKER,
    ("post", "/api/workers/job/{job_id}/upload"): WORKER,
    ("put", "/api/workers/job/{job_id}/upload/{upload_id}"): WORKER,
    ("post", "/api/workers/job/{job_id}/upload/{upload_id}/complete"): WORKER,
    ("post", "/api/workers/job/{job_id}/checkpoints"): WORKER,
    ("get", "/api/workers/job/{job_id}/checkpoints/{checkpoint_id}"): WORKER,
    ("get", "/api/workers/job/{job_id}/artifacts/{artifact_id}"): WORKER,
    ("get", "/api/workers/job/{job_id}/workdir"): WORKER,
    ("put", "/api/workdirs/{digest}"): "queue.submit",
    ("head", "/api/workdirs/{digest}"): "queue.read",
    ("get", "/api/workdirs/{digest}"): "queue.read",
    ("get", "/api/queue/{job_id}/workdir"): "queue.read",
    ("get", "/api/queue/{job_id}/workdir/file"): "queue.read",
    ("get", "/api/workers/queue"): WORKER,
    ("post", "/api/workers/disconnect"): WORKER,
    ("post", "/api/queue/submit"): "queue.submit",
    ("get", "/api/queue"): "queue.read",
    ("get", "/api/queue/{job_id}"): "queue.read",
    ("post", "/api/queue/{job_id}/cancel"): "queue.submit",
    ("post", "/api/queue/{job_id}/rerun"): "queue.submit",
    ("post", "/api/queue/rerun"): "queue.submit",
    ("post", "/api/queue/cancel"): "queue.submit",
    ("get", "/api/queue/{job_id}/logs"): "queue.read",
    ("get", "/api/queue/{job_id}/progress"): "queue.read",
    ("get", "/api/queue/{job_id}/logs/download"): "queue.read",
    ("get", "/api/queue/{job_id}/artifacts"): "queue.read",
    ("get", "/api/queue/{job_id}/checkpoints/{checkpoint_id}"): "queue.read",
    ("get", "/api/queue/{job_id}/artifacts/{path}"): "queue.read",
    ("put", "/api/queue/{job_id}/artifacts/pin"): "queue.submit",
    ("delete", "/api/queue/{job_id}/artifacts"): "queue.submit",
    ("delete", "/api/queue/{job_id}/artifacts/{path}"): "queue.submit",
    ("put", "/api/cloud/storage/{bucket}/{key}"): UPLOAD,
    ("get", "/api/cloud/storage/{bucket}/{key}"): UPLOAD,
    ("head", "/api/cloud/storage/{bucket}/{key}"): UPLOAD,
    ("get", "/api/configs"): "queue.read",
    ("get", "/api/configs/{name}"): "queue.read",
    ("get", "/api/configs/{name}/versions"): "queue.read",
    ("get", "/api/configs/{name}/versions/{version}"): "queue.read",
    ("put", "/api/configs/{name}"): "queue.submit",
    ("delete", "/api/configs/{name}"): "queue.submit",
    ("get", "/api/audit"): "admin.audit",
    ("get", "/api/audit/verify"): "admin.audit",
    ("get", "/api/events"): "queue.read",
    ("get", "/api/queue/stats"): "queue.read",
    ("get", "/api/queue/me"): "queue.read",
    ("get", "/api/queue/position/{job_id}"): "queue.read",
    ("post", "/api/queue/{job_id}/approve"): "queue.approve",
    ("post", "/api/queue/{job_id}/reject"): "queue.approve",
    ("get", "/api/queue/concurrency"): "queue.read",
    ("post", "/api/queue/concurrency"): "*",
    ("get", "/api/queue/policy"): "queue.read",
    ("patch", "/api/queue/policy"): "*",
    ("post", "/api/queue/cleanup"): "*",
    ("post", "/api/queue/process"): "*",
    ("get", "/api/users"): "*",
    ("post", "/api/users"): "*",
    ("get", "/api/users/me"): ANY_KEY,
    ("get", "/api/fleet/workers"): ANY_KEY,  # the fleet, read-only, for every signed-in key
    ("get", "/api/fleet/history"): ANY_KEY,
    ("get", "/api/users/{user}"): "*",
    ("patch", "/api/users/{user}"): "*",
    ("delete", "/api/users/{user}"): "*",
    ("get", "/api/sweeps"): "queue.read",
    ("get", "/api/sweeps/{sweep_id}"): "queue.read",
    ("get", "/api/sweeps/{sweep_id}/progress"): "queue.read",
    ("post", "/api/sweeps/{sweep_id}/cancel"): "queue.submit",
    ("post", "/api/sweeps/{sweep_id}/rerun"): "queue.submit",
    ("get", "/api/teams"): "queue.read",
    ("post", "/api/teams"): "*",
    ("get", "/api/teams/{team}"): "queue.read",
    ("patch", "/api/teams/{team}"): "*",
    ("delete", "/api/teams/{team}"): "*",
    ("put", "/api/teams/{team}/members/{user}"): "*",
    ("delete", "/api/teams/{team}/members/{user}"): "*",
    ("get", "/api/teams/{team}/usage"): "queue.read",
    ("get", "/api/secrets"): "queue.read",
    ("put", "/api/secrets/{name}"): "queue.submit",
    ("delete", "/api/secrets/{name}"): "queue.submit",
    ("put", "/api/teams/{team}/secrets/{name}"): "queue.submit",
    ("delete", "/api/teams/{team}/secrets/{name}"): "queue.submit",
    ("get", "/api/workers/job/{job_id}/secrets"): WORKER,
    ("get", "/api/sso"): OPEN,  # where `gpufleet login` signs in
    ("post", "/api/sso/token"): OPEN,  # its body is the credential (tests/api/test_sso_tokens.py)
    ("post", "/api/sso/refresh"): OPEN,  # likewise
    ("post", "/api/sso/device"): OPEN,  # a device code to poll with: no credential yet
    ("post", "/api/sso/device/token"): OPEN,  # its body is the credential
    ("delete", "/api/sso/session"): ANY_KEY,
    ("get", "/healthz"): OPEN,
    ("get", "/readyz"): OPEN,
    ("get", "/metrics"): "metrics.read",
}
BODIES: dict[str, Any] = {
    "/api/admin/workers": {"name": "intruder"},
    "/api/admin/api-keys": {"name": "intruder", "permissions": ["*"]},
    "/api/admin/workers/{worker_id}/labels": {"labels": {"pool": "intruder"}},
    "/api/admin/webhooks": {"url": "https://attacker.example/", "events": ["job.ended"]},
    "/api/admin/webhooks/{webhook_id}": {"url": "https://attacker.example/"},
    "/api/admin/pools": {
        "name": "intruder",
        "provider": {"type": "command", "launch": ["/bin/sh"], "terminate": ["true"]},
        "max_workers": 1000,
    },
    "/api/admin/pools/{name}": {"max_workers": 1000},
    "/api/queue/submit": {"config": {"command": ["true"]}, "target": "worker"},
    "/api/queue/rerun": {"job_ids": ["j_any"]},
    "/api/queue/cancel": {"job_ids": ["j_any"]},
    "/api/queue/{job_id}/artifacts/pin": {"pinned": True},
    "/api/queue/concurrency": {"max_concurrent": 0},
    "/api/queue/policy": {"max_gpus": 0},
    "/api/users": {"name": "intruder", "level": "admin"},
    "/api/users/{user}": {"level": "viewer"},
    "/api/teams": {"name": "intruders"},
    "/api/teams/{team}": {"weight": 1000},
    "/api/configs/{name}": {"command": ["rm", "-rf", "/"]},
    "/api/secrets/{name}": {"value": "planted"},
    "/api/teams/{team}/secrets/{name}": {"value": "planted"},
    "/api/workers/register": {"name": "intruder", "gpu_count": 8},
    "/api/workers/heartbeat": {"status": "idle"},
    "/api/workers/job/{job_id}/status": {"status": "completed"},
    "/api/workers/job/{job_id}/logs": {"lines": [{"text": "forged"}]},
    "/api/workers/disconnect": {},
    "/api/workers/job/{job_id}/upload": {
        "attempt_id": "a_any",
        "path": "output/forged.bin",
        "size": 1,
        "sha256": "0" * 64,
    },
    "/api/workers/job/{job_id}/checkpoints": {
        "attempt_id": "a_any",
        "name": "checkpoint-1",
        "path": "output/checkpoint-1",
        "files": [{"path": "output/checkpoint-1/w.bin", "size": 1, "sha256": "0" * 64}],
    },
}
OTHER_PERMISSION = {
    "admin.workers": "queue.read",
    "admin.audit": "queue.submit",
    "queue.read": "admin.audit",
    "queue.submit": "queue.read",
    "queue.approve": "queue.submit",
    "*": "admin.workers",
    "metrics.read": "queue.read",
}


async def _snapshot(fleet: Fleet) -> str:
    """Every stored row but the audit log (refusals are audited on purpose)."""
    text = await fleet.all_stored_text()
    return "\n".join(
        line for line in text.splitlines() if not line.startswith(f"{audit_events.name}:")
    )


async def _setup(fleet: Fleet) -> dict[str, Any]:
    owner = await fleet.online_worker("owner", labels={"slot": "owner"})
    other = await fleet.online_worker("other")
    job = await fleet.submit(worker_labels={"slot": "owner"})  # else either may get it
    offer = await owner.next_offer()
    assert offer["job_id"] == job["id"]
    rotated = await fleet.create_worker("rotated")
    old_token = rotated.token
    await fleet.rotate_token(rotated)
    gone = await fleet.create_worker("gone")
    await gone.register()
    assert (await gone.disconnect()).status_code == 200  # only an offline worker is deleted
    assert (await fleet.admin.delete(f"/api/admin/workers/{gone.id}")).status_code == 200
    await fleet.admin.put("/api/configs/cfg", json={"command": ["true"]})
    sweep = await fleet.admin.post(
        "/api/queue/submit",
        json={
            "config": {"command": ["t", "{a}"]},
            "sweep": {"a": [1]},
            "worker_labels": {"x": "y"},
        },
    )
    assert sweep.status_code == 201, sweep.text
    assert (await fleet.admin.post("/api/teams", json={"name": "nlp"})).status_code == 201
    assert (await fleet.admin.put("/api/teams/nlp/members/admin")).status_code == 200
    hook = await fleet.admin.post(
        "/api/admin/webhooks", json={"url": "https://hooks.example/", "events": ["job.ended"]}
    )
    assert hook.status_code == 201, hook.text
    pool = {"name": "cfg", "provider": {"type": "local"}, "max_workers": 1}  # {name}: "cfg"
    assert (await fleet.admin.post("/api/admin/pools", json=pool)).status_code == 201
    revoked = await fleet.mint_key("*", name="revoked")
    assert (await fleet.admin.delete(f"/api/admin/api-keys/{revoked['id']}")).status_code == 200
    keys = {
        perm: (await fleet.mint_key(perm, name=f"only-{perm}"))["key"]
        for perm in set(OTHER_PERMISSION.values())
    }
    return {
        "params": {
            "worker_id": owner.id,
            "job_id": job["id"],
            "name": "cfg",
            "key_id": revoked["id"],
            "webhook_id": hook.json()["id"],
            "path": "output/model.bin",
            "bucket": "gpufleet",
            "key": f"{job['id']}/models/model.bin",
            "upload_id": "forged",
            "checkpoint_id": "k_any",
            "artifact_id": "r_any",
            "digest": "sha256:" + "d" * 64,
            "version": "1",
            "user": "admin",
            "team": "nlp",
            "sweep_id": sweep.json()["id"],
        },
        "owner": owner,
        "other_token": other.token,
        "rotated_token": old_token,
        "deleted_token": gone.token,
        "revoked_key": revoked["key"],
        "keys": keys,
    }


def _url(path: str, params: dict[str, str]) -> str:
    return path.format(**params)


async def test_every_route_refuses_every_wrong_credential_and_changes_nothing(
    fleet: Fleet,
) -> None:
    spec = fleet.app.openapi()
    routes = [(m, p) for p, ops in spec["paths"].items() for m in ops]
    assert sorted(routes) == sorted(PERMISSIONS), "classify every route in PERMISSIONS"
    fleet.ctx.auth_failures = FailureLimiter(0, 60.0)  # limiting has its own test
    world = await _setup(fleet)
    before = await _snapshot(fleet)
    admin_bearer = f"Bearer {fleet.admin_key}"
    failures = []
    async with fleet.client() as anon:
        for method, path in routes:
            needed = PERMISSIONS[(method, path)]
            if needed == OPEN:
                continue
            url = _url(path, world["params"])
            body = BODIES.get(path)
            cases: list[tuple[str, dict[str, str], set[int]]] = [
                ("no credentials", {}, {401}),
                ("malformed Authorization", {"Authorization": "Basic YWRtaW46YWRtaW4="}, {401}),
                ("empty Bearer", {"Authorization": "Bearer "}, {401}),
            ]
            if needed == UPLOAD:
                cases += [
                    ("an admin API key", {"Authorization": admin_bearer}, {401}),
                    ("a worker token", {"X-Worker-Token": world["owner"].token}, {401}),
                    ("a made-up upload token", {"X-SimpleTuner-Secret": "ut_forged"}, {401}),
                    ("a made-up X-Upload-Token", {"X-Upload-Token": "ut_forged"}, {401}),
                ]
            elif needed == WORKER:
                cases += [
                    ("an admin API key", {"Authorization": admin_bearer}, {401}),
                    ("a rotated token", {"X-Worker-Token": world["rotated_token"]}, {401}),
                    ("a deleted worker's token", {"X-Worker-Token": world["deleted_token"]}, {401}),
                ]
                if "{job_id}" in path:
                    cases.append(
                        (
                            "another worker's token on the job",
                            {"X-Worker-Token": world["other_token"]},
                            {403},
                        )
                    )
            else:
                cases += [
                    ("a worker token", {"X-Worker-Token": world["owner"].token}, {401}),
                    (
                        "a worker token as Bearer",
                        {"Authorization": f"Bearer {world['owner'].token}"},
                        {401},
                    ),
                    (
                        "a revoked API key",
                        {"Authorization": f"Bearer {world['revoked_key']}"},
                        {401},
                    ),
                ]
                if needed != ANY_KEY:
                    cases.append(
                        (
                            "a key without the permission",
                            {"X-API-Key": world["keys"][OTHER_PERMISSION[needed]]},
                            {403},
                        )
                    )
            for label, headers, expected in cases:
                resp = await anon.request(
                    method.upper(), url, headers=headers, json=body if method != "get" else None
                )
                answered = method == "head" or resp.json().get("detail")  # HEAD has no body
                if resp.status_code not in expected or not answered:
                    failures.append(
                        f"{method.upper()} {path} with {label}: "
                        f"{resp.status_code} {resp.text[:120]}"
                    )
    assert failures == []
    assert await _snapshot(fleet) == before
