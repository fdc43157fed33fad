"""Worker pools through the API (#36): an admin with `*` creates, lists, shows, changes and
deletes them, every change audited; bad and hostile input is refused saying what to fix, a
name taken twice is a conflict, a pool with launches up cannot be deleted, and no other key
or token may touch them."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from gpufleet.domain.pools import LaunchState
from gpufleet.server.context import transaction
from gpufleet.store.tables import pool_launches
from tests.api.conftest import Fleet, both_databases, post_raw
from tests.api.test_policy import add_user, client_of
from tests.nasty import nested

BURST: dict[str, Any] = {
    "name": "burst",
    "provider": {
        "type": "command",
        "launch": ["/opt/launch.sh", "--token", "cloud-s3cret"],
        "terminate": ["/opt/terminate.sh"],
    },
    "labels": {"pool": "burst"},
    "gpu_count": 1,
    "worker_type": "ephemeral",
    "min_workers": 0,
    "max_workers": 4,
    "launch_timeout_s": 600,
    "price_per_hour": 1.89,
}
PATHS = [
    ("GET", "/api/admin/pools", None),
    ("POST", "/api/admin/pools", {**BURST, "name": "intruder"}),
    ("GET", "/api/admin/pools/burst", None),
    ("PATCH", "/api/admin/pools/burst", {"max_workers": 1000}),
    ("DELETE", "/api/admin/pools/burst", None),
]


async def create(fleet: Fleet, **fields: Any) -> dict[str, Any]:
    answer = await fleet.admin.post("/api/admin/pools", json={**BURST, **fields})
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def add_launch(fleet: Fleet, pool_id: str, n: int, state: LaunchState) -> None:
    async with transaction(fleet.ctx) as tx:
        await tx.q.insert_launch(
            {
                "id": f"pl_{n}",
                "pool_id": pool_id,
                "state": state.value,
                "instance_id": f"i-{n}",
                "worker_id": None,
                "created_at": tx.now - timedelta(seconds=n),
                "stderr": "quota exceeded\n" if state is LaunchState.FAILED else None,
                "error": "exit 1" if state is LaunchState.FAILED else None,
            }
        )


async def test_an_admin_creates_lists_shows_changes_and_deletes_a_pool_each_change_audited(
    fleet: Fleet,
) -> None:
    made = await create(fleet)
    assert made["provider"] == BURST["provider"] and made["labels"] == {"pool": "burst"}
    assert made["idle_timeout_s"] == 300 and made["enabled"] is True  # the defaults
    assert made["live_launches"] == 0 and made["launches"] == []

    listed = (await fleet.admin.get("/api/admin/pools")).json()["pools"]
    assert [p["name"] for p in listed] == ["burst"]
    changed = await fleet.admin.patch(
        "/api/admin/pools/burst", json={"min_workers": 1, "max_cost_per_hour": 10.0}
    )
    assert changed.status_code == 200, changed.text
    assert (changed.json()["min_workers"], changed.json()["max_cost_per_hour"]) == (1, 10.0)
    cleared = await fleet.admin.patch("/api/admin/pools/burst", json={"max_cost_per_hour": None})
    assert cleared.json()["max_cost_per_hour"] is None
    shown = (await fleet.admin.get("/api/admin/pools/burst")).json()
    assert shown["min_workers"] == 1 and shown["price_per_hour"] == 1.89
    assert (await fleet.admin.delete("/api/admin/pools/burst")).json() == {"ok": True}
    assert (await fleet.admin.get("/api/admin/pools")).json() == {"pools": []}

    audit = [e for e in await fleet.audit() if e["event_type"].startswith("pool.")]
    kinds = [e["event_type"] for e in reversed(audit)]
    assert kinds == ["pool.created", "pool.updated", "pool.updated", "pool.deleted"]
    created = audit[-1]["detail"]
    assert created["provider"]["launch"] == "/opt/launch.sh"  # the program, not its arguments
    assert "cloud-s3cret" not in str(audit)
    assert audit[-2]["detail"] == {"name": "burst", "min_workers": 1, "max_cost_per_hour": 10.0}
    assert {e["target"] for e in audit} == {made["id"]}


async def test_a_change_that_changes_nothing_is_not_audited(fleet: Fleet) -> None:
    await create(fleet)
    same = await fleet.admin.patch("/api/admin/pools/burst", json={"max_workers": 4})
    assert same.status_code == 200
    assert [e["event_type"] for e in await fleet.audit()].count("pool.updated") == 0


@both_databases
async def test_two_pools_of_one_name_at_once_make_one_pool_and_one_conflict(
    fleet: Fleet,
) -> None:
    answers = await asyncio.gather(
        *(fleet.admin.post("/api/admin/pools", json=BURST) for _ in range(2))
    )
    assert sorted(a.status_code for a in answers) == [201, 409]
    refused = next(a for a in answers if a.status_code == 409).json()
    assert "a pool named 'burst' exists already" in refused["detail"]
    assert "gpufleet pools update burst" in refused["detail_for"]["cli"]
    assert len((await fleet.admin.get("/api/admin/pools")).json()["pools"]) == 1


@both_databases
async def test_every_field_and_launch_is_stored_as_given_and_goes_with_its_pool(
    fleet: Fleet,
) -> None:
    slurm = {"type": "slurm", "partition": "gpu", "time_limit": "1-00:00:00", "account": "lab"}
    body = {
        **BURST,
        "name": "hpc",
        "provider": slurm,
        "labels": {"site": "hpc", "gpu": "a100"},
        "gpu_count": 8,
        "gpu_name": "NVIDIA A100-SXM4-80GB",
        "worker_type": "persistent",
        "min_workers": 1,
        "max_workers": 1000,
        "idle_timeout_s": 30 * 86400,
        "price_per_hour": 0.1 + 0.2,
        "max_cost_per_hour": 12345.678,
        "enabled": False,
    }
    made = await create(fleet, **body)
    for state in LaunchState:
        await add_launch(fleet, made["id"], list(LaunchState).index(state), state)
    shown = (await fleet.admin.get("/api/admin/pools/hpc")).json()
    assert {k: shown[k] for k in body} == body
    assert shown["live_launches"] == 3  # launching, registered, terminating
    newest = shown["launches"][0]
    assert (newest["state"], newest["instance_id"]) == ("launching", "i-0")
    failed = next(x for x in shown["launches"] if x["state"] == "failed")
    assert (failed["stderr"], failed["error"]) == ("quota exceeded\n", "exit 1")

    refused = await fleet.admin.delete("/api/admin/pools/hpc")
    assert refused.status_code == 409
    assert "pool hpc has 3 launch(es)" in refused.json()["detail"]
    assert "gpufleet pools update hpc --disable" in refused.json()["detail_for"]["cli"]
    async with transaction(fleet.ctx) as tx:
        ended = {"state": LaunchState.TERMINATED.value}
        live = pool_launches.c.state != LaunchState.FAILED.value
        await tx.q.conn.execute(sa.update(pool_launches).where(live).values(ended))
    assert (await fleet.admin.delete("/api/admin/pools/hpc")).status_code == 200
    assert "pool_launches: " not in await fleet.all_stored_text()


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({**BURST, "min_workers": 5}, "min_workers (5) is over max_workers (4)"),
        ({**BURST, "max_workers": -1}, "max_workers must be a whole number from 0 to 1000"),
        ({**BURST, "max_workers": "4"}, "max_workers: Input should be a valid integer"),
        ({**BURST, "max_workers": 2**62}, "got a number that large"),
        ({**BURST, "price_per_hour": -0.5}, "price_per_hour must be a number from 0"),
        ({**BURST, "provider": {"type": "ec2"}}, "provider type 'ec2' is not known"),
        ({**BURST, "provider": {"type": "command", "launch": ["x"]}}, "needs terminate"),
        ({**BURST, "provider": {**BURST["provider"], "launch": [""]}}, "launch[0] must be a"),
        ({**BURST, "provider": nested(40)}, "nested more than 32 levels deep"),
        ({**BURST, "name": "no/slash"}, "pool name 'no/slash' is not valid"),
        ({**BURST, "labels": {"-bad": "x"}}, "label key '-bad' is not valid"),
        ({**BURST, "worker_type": "spot"}, "worker_type: Input should be"),
        ({**BURST, "colour": "red"}, "colour: Extra inputs are not permitted"),
        ({k: v for k, v in BURST.items() if k != "max_workers"}, "max_workers: Field required"),
    ],
)
async def test_a_bad_pool_is_refused_saying_what_to_fix(
    fleet: Fleet, change: dict[str, Any], says: str
) -> None:
    answer = await post_raw(fleet.admin, "/api/admin/pools", change)
    assert answer.status_code == 422, answer.text
    assert says in answer.json()["detail"]
    assert (await fleet.admin.get("/api/admin/pools")).json() == {"pools": []}


@pytest.mark.parametrize(
    ("where", "value", "says"),
    [
        ("launch", "a\x00b", "NUL character"),
        ("launch", "\ud800", "lone surrogate"),
        ("price", float("nan"), "not a finite number"),
        ("price", float("inf"), "not a finite number"),
        ("max", 2**64, "outside -2^63"),
        ("max", 10**400, "outside -2^63"),
    ],
)
async def test_hostile_values_are_refused_before_anything_is_stored(
    fleet: Fleet, where: str, value: Any, says: str
) -> None:
    body = {**BURST, "provider": dict(BURST["provider"])}
    if where == "launch":
        body["provider"]["launch"] = [value]
    elif where == "price":
        body["price_per_hour"] = value
    else:
        body["max_workers"] = value
    for method, path in (("POST", "/api/admin/pools"), ("PATCH", "/api/admin/pools/burst")):
        sent = body if method == "POST" else {k: v for k, v in body.items() if k != "name"}
        answer = await post_raw(fleet.admin, path, sent, method=method)
        assert answer.status_code == 422, answer.text
        assert says in answer.json()["detail"]


async def test_a_change_is_checked_with_the_pools_other_fields_and_a_name_stays(
    fleet: Fleet,
) -> None:
    await create(fleet, min_workers=2)
    lower = await fleet.admin.patch("/api/admin/pools/burst", json={"max_workers": 1})
    assert lower.status_code == 422
    assert "min_workers (2) is over max_workers (1)" in lower.json()["detail"]
    renamed = await fleet.admin.patch("/api/admin/pools/burst", json={"name": "other"})
    assert renamed.status_code == 422 and "name" in renamed.json()["detail"]
    nothing = await fleet.admin.patch("/api/admin/pools/burst", json={"provider": None})
    assert "a pool needs provider" in nothing.json()["detail"]


async def test_an_unknown_pool_is_404_saying_where_the_pools_are_listed(fleet: Fleet) -> None:
    for method in ("GET", "PATCH", "DELETE"):
        body = {"max_workers": 2} if method == "PATCH" else None
        answer = await fleet.admin.request(method, "/api/admin/pools/nope", json=body)
        assert answer.status_code == 404, (method, answer.text)
        assert "no pool 'nope'; list the pools with GET /api/admin/pools" in answer.text
        assert "gpufleet pools list" in answer.json()["detail_for"]["cli"]


async def _refused(client: httpx.AsyncClient, expected: int) -> list[str]:
    wrong = []
    for method, path, body in PATHS:
        answer = await client.request(method, path, json=body)
        if answer.status_code != expected or not answer.json().get("detail"):
            wrong.append(f"{method} {path}: {answer.status_code} {answer.text[:100]}")
    return wrong


async def test_no_key_but_a_full_admins_and_no_worker_token_may_touch_a_pool(
    fleet: Fleet,
) -> None:
    made = await create(fleet)
    before = await _pool_rows(fleet)
    viewer = await client_of(fleet, await add_user(fleet, "vic", "viewer"), "*")
    lead = await client_of(fleet, await add_user(fleet, "lee", "lead"), "*")
    workers_admin = await client_of(fleet, await add_user(fleet, "ops", "admin"), "admin.workers")
    agent = await fleet.create_worker("w1")
    async with fleet.client(headers=agent.headers) as worker:
        wrong = await _refused(viewer, 403) + await _refused(lead, 403)
        wrong += await _refused(workers_admin, 403) + await _refused(worker, 401)
    assert wrong == []
    assert await _pool_rows(fleet) == before
    pools = (await fleet.admin.get("/api/admin/pools")).json()["pools"]
    assert [(p["id"], p["max_workers"]) for p in pools] == [(made["id"], 4)]


async def _pool_rows(fleet: Fleet) -> list[str]:
    text = await fleet.all_stored_text()
    return [line for line in text.splitlines() if line.startswith(("pools:", "pool_launches:"))]
