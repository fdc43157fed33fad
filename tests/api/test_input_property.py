"""Whatever any endpoint accepts, every read endpoint can return (#14), on both databases.

Hypothesis puts the values of `tests.nasty` (lone surrogates, NUL, deep nesting, huge and
non-finite numbers) into every field a client writes that gets stored: configs, progress,
GPU details, labels, errors, log lines, names. A write may refuse (4xx) or accept; it never
answers 5xx, and after it every list, job, worker and config still reads, and a job it
accepted still reaches a worker's event stream.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import httpx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.api.conftest import Agent, Fleet, post_raw, postgres_only, sqlite_only
from tests.nasty import nested, objects, texts, values

Write = Callable[["Scene", Any], Awaitable[httpx.Response]]
Property = Callable[..., Coroutine[Any, Any, None]]


class Scene:
    """A fleet with one job running on `busy` (for worker reports) and `taker` idle, so that
    a job the server accepts is offered at once."""

    def __init__(self, fleet: Fleet, busy: Agent, taker: Agent, running: dict[str, Any]):
        self.fleet, self.busy, self.taker, self.running = fleet, busy, taker, running
        self.names = 0
        self.jobs: list[str] = []  # the jobs this example's submits made

    @classmethod
    async def build(cls, fleet: Fleet) -> Scene:
        pool = {"name": "p", "provider": {"type": "local"}, "max_workers": 1}
        assert (await fleet.admin.post("/api/admin/pools", json=pool)).status_code == 201
        busy = await fleet.online_worker("busy", labels={"role": "busy"})
        await fleet.submit(worker_labels={"role": "busy"})
        offer = await busy.next_offer()
        await busy.run(offer)
        taker = await fleet.online_worker("taker", labels={"role": "taker"})
        return cls(fleet, busy, taker, offer)

    def name(self) -> str:
        self.names += 1
        return f"n{self.names}"

    async def report(self, body: dict[str, Any]) -> httpx.Response:
        path = f"/api/workers/job/{self.running['job_id']}/status"
        body = {"status": "running", "attempt_id": self.running["attempt_id"], **body}
        return await post_raw(self.fleet.http, path, body, **self.busy.headers)

    async def register(self, body: dict[str, Any]) -> httpx.Response:
        body = {"name": "busy", "current_job_id": self.running["job_id"], **body}
        return await post_raw(self.fleet.http, "/api/workers/register", body, **self.busy.headers)

    async def submit(self, body: dict[str, Any]) -> httpx.Response:
        body = {"worker_labels": {"role": "taker"}, **body}
        answer = await post_raw(self.fleet.admin, "/api/queue/submit", body)
        if answer.status_code != 201:
            return answer
        job = answer.json()
        self.jobs.append(job["id"])
        if job["status"] == "queued":  # labels or GPUs no worker has: dispatch is inline
            cancelled = await self.fleet.admin.post(f"/api/queue/{job['id']}/cancel")
            assert cancelled.status_code == 200, cancelled.text
            return answer
        offer = await self.taker.next_offer()  # accepted: it travels to a worker and back
        assert offer["job_id"] == job["id"]
        await self.taker.finish(offer, "failed", error="done with it")
        return answer


WRITES: dict[str, Write] = {
    "config value": lambda s, v: s.submit({"config": {"command": ["python"], "k": v}}),
    "whole config": lambda s, v: s.submit({"config": v}),
    "worker labels": lambda s, v: s.submit({"config": {}, "worker_labels": {"role": v}}),
    "stored config": lambda s, v: post_raw(
        s.fleet.admin, f"/api/configs/{s.name()}", {"k": v}, method="PUT"
    ),
    "progress": lambda s, v: s.report({"progress": {"k": v}}),
    "error": lambda s, v: s.report({"status": "running", "error": v}),
    "gpus": lambda s, v: s.register({"gpus": [{"name": v, "memory": v}]}),
    "gpu_info": lambda s, v: s.register({"gpu_info": {"name": v, "count": 1}}),
    "reported labels": lambda s, v: s.register({"labels": {"k": v}}),
    "agent fields": lambda s, v: s.register({"cuda_version": v, "unknown": v}),
    "log line": lambda s, v: post_raw(
        s.fleet.http,
        f"/api/workers/job/{s.running['job_id']}/logs",
        {"attempt_id": s.running["attempt_id"], "lines": [{"text": v}]},
        **s.busy.headers,
    ),
    "heartbeat": lambda s, v: post_raw(
        s.fleet.http,
        "/api/workers/heartbeat",
        {"worker_id": s.busy.id, "status": v, "current_job_id": s.running["job_id"]},
        **s.busy.headers,
    ),
    "worker name": lambda s, v: post_raw(s.fleet.admin, "/api/admin/workers", {"name": v}),
    "admin labels": lambda s, v: post_raw(
        s.fleet.admin, "/api/admin/workers", {"name": s.name(), "labels": {"k": v}}
    ),
    "pool": lambda s, v: post_raw(
        s.fleet.admin,
        "/api/admin/pools",
        {
            "name": s.name(),
            "provider": {"type": "command", "launch": [v], "terminate": ["x"], "list": v},
            "labels": {"k": v},
            "gpu_name": v,
            "max_workers": 1,
        },
    ),
    "pool change": lambda s, v: post_raw(
        s.fleet.admin, "/api/admin/pools/p", {"gpu_name": v, "provider": v}, method="PATCH"
    ),
    "api key name": lambda s, v: post_raw(
        s.fleet.admin, "/api/admin/api-keys", {"name": v, "permissions": ["queue.read"]}
    ),
}

writes = st.lists(
    st.tuples(st.sampled_from(sorted(WRITES)), st.one_of(values, objects, texts)),
    min_size=1,
    max_size=3,
)


# The breaks #14 found, always tried first, on both databases.
BREAKS: list[list[tuple[str, Any]]] = [
    [("progress", "\ud800"), ("gpus", "\udfff"), ("stored config", "\ud800")],
    [("config value", nested(300)), ("config value", 2**64)],
    [("stored config", float("nan")), ("reported labels", "a\x00b")],
    [("log line", "\x00"), ("error", "\ud800"), ("whole config", {"gpu_count": 2**63})],
]


def writes_then_reads(examples: int) -> Callable[[Property], Callable[..., None]]:
    """The property, tried on `examples` generated writes after the breaks."""

    def make(test: Property) -> Callable[..., None]:
        tried = given(steps=writes)(test)
        for steps in reversed(BREAKS):
            tried = example(steps=steps)(tried)
        return settings(
            max_examples=examples,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        )(tried)

    return make


# What a column can store is the database's to decide, so both run the property: SQLite on 30
# generated writes, PostgreSQL (the stricter about text: NUL, lone surrogates) on the breaks
# and 10 more, its examples costing more than SQLite's (#32).
@sqlite_only
@writes_then_reads(30)
async def test_whatever_any_endpoint_accepts_every_read_can_return(
    fleet: Fleet, steps: list[tuple[str, Any]]
) -> None:
    await any_write_then_every_read(fleet, steps)


@postgres_only
@writes_then_reads(10)
async def test_whatever_any_endpoint_accepts_every_read_can_return_on_postgresql(
    fleet: Fleet, steps: list[tuple[str, Any]]
) -> None:
    await any_write_then_every_read(fleet, steps)


async def any_write_then_every_read(fleet: Fleet, steps: list[tuple[str, Any]]) -> None:
    scene = getattr(fleet, "scene", None) or await Scene.build(fleet)
    fleet.scene = scene  # type: ignore[attr-defined]  # one scene for every example
    scene.jobs = [scene.running["job_id"]]
    for write, value in steps:
        answer = await WRITES[write](scene, value)
        assert answer.status_code < 500, (write, value, answer.text[:300])
        if answer.status_code == 422:
            assert answer.json()["detail"], (write, value)
    # Each job this example can have written, the running one (reports) and its submits'; and
    # every list, worker, config and pool. A job an earlier example submitted was read after
    # it, and no later write reaches it (its worker, `taker`, is never written to).
    await fleet.every_read_answers(newest=0, also=tuple(scene.jobs))
    running = await fleet.job(scene.running["job_id"])
    assert running["status"] == "running", running
