"""One writer of a status, read from the source: only `services/lifecycle.py` writes the status
of a job, an attempt or a worker, through the store's queries named for it (docs/architecture.md).

A second writer is how a rejected job once sent no webhook: `approve` and `reject` wrote
`status` with the generic `update_job` beside lifecycle, which owns a move's consequences.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpufleet.domain.states import AttemptStatus, JobStatus, WorkerStatus
from tests.unit.test_layers import PACKAGE, module_name

LIFECYCLE = "gpufleet.server.services.lifecycle"
# store/queries/<name>.py: the rows with a status
AGGREGATES = ("jobs", "attempts", "workers", "gangs")
# The store's queries that write a status: lifecycle alone calls them (and one another).
STATUS_QUERIES = frozenset(
    {
        "set_job_status",
        "claim_job",
        "insert_job",
        "queue_job",
        "queue_jobs",
        "set_attempt_status",
        "insert_attempt",
        "set_worker_status",
        "claim_worker",
        "claim_node",
        "insert_worker",
    }
)
STATUS_ENUMS = frozenset({JobStatus.__name__, AttemptStatus.__name__, WorkerStatus.__name__})


def _aggregate_methods() -> frozenset[str]:
    """Every query of the aggregates with a status: a `status` passed to one is a write."""
    found: set[str] = set()
    for name in AGGREGATES:
        tree = ast.parse((PACKAGE / "store" / "queries" / f"{name}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name.endswith("Queries"):
                found.update(
                    f.name
                    for f in node.body
                    if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
                )
    return frozenset(found)


STORE_METHODS = _aggregate_methods()


def _called(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return node.func.id if isinstance(node.func, ast.Name) else None


def _status_key(node: ast.AST) -> bool:
    return isinstance(node, ast.Dict) and any(
        isinstance(k, ast.Constant) and k.value == "status" for k in node.keys
    )


def _names_a_status(node: ast.AST) -> bool:
    """An expression built from a status enum's member (`JobStatus.QUEUED.value`)."""
    return any(isinstance(n, ast.Name) and n.id in STATUS_ENUMS for n in ast.walk(node))


def _writes(node: ast.AST) -> Iterator[tuple[int, str]]:
    for found in ast.walk(node):
        if isinstance(found, ast.Dict):
            for key, value in zip(found.keys, found.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and key.value == "status"
                    and _names_a_status(value)
                ):
                    yield found.lineno, "a row's status set to a status enum's member"
        if not isinstance(found, ast.Call):
            continue
        name = _called(found)
        if name in STATUS_QUERIES:
            yield found.lineno, f"calls the store's {name}"
        if name in STORE_METHODS or name == "values":
            if any(kw.arg == "status" or _status_key(kw.value) for kw in found.keywords):
                yield found.lineno, f"passes a status to {name}"
            if any(_status_key(arg) for arg in found.args):
                yield found.lineno, f"passes a row with a status to {name}"


def status_writers(source: str, module: str) -> list[str]:
    """Where the module writes a status, other than where it may: lifecycle, and the status
    queries themselves (`STATUS_QUERIES`, and `NewJob.row`, the row `queue_job` inserts)."""
    if module == LIFECYCLE:
        return []
    store_query = module in {f"gpufleet.store.queries.{name}" for name in AGGREGATES}
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if store_query and child.name in STATUS_QUERIES | {"row", "no_status"}:
                    continue
                visit(child)
            else:
                found.extend(f"{module}:{line}: {what}" for line, what in _writes(child))

    visit(ast.parse(source))
    return sorted(set(found))


def every_writer() -> list[str]:
    found: list[str] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" not in path.parts:
            found += status_writers(path.read_text(), module_name(path))
    return found


def test_only_lifecycle_writes_the_status_of_a_job_an_attempt_or_a_worker() -> None:
    assert every_writer() == []


def test_the_status_queries_are_the_aggregates_own_and_lifecycle_calls_them() -> None:
    # The positive control: the names judged are real queries, and lifecycle is where
    # they are called (an empty scan, or a renamed query, would pass the test above).
    assert STATUS_QUERIES <= STORE_METHODS
    assert {"update_job", "get_job", "get_worker"} <= STORE_METHODS
    lifecycle = (PACKAGE / "server" / "services" / "lifecycle.py").read_text()
    called = {
        _called(n)
        for n in ast.walk(ast.parse(lifecycle))
        if isinstance(n, ast.Call) and _called(n) in STATUS_QUERIES
    }
    assert called == STATUS_QUERIES - {"insert_job", "queue_jobs"}  # queue_job inserts


# What it catches: the writers it found before lifecycle was the one (approve, reject, the
# claim of dispatch, a new worker), and writers it must catch in new code.
CAUGHT = {
    "approve": """
async def approve(ctx, job_id, actor):
    async with transaction(ctx) as tx:
        await tx.q.update_job(job.id, status=JobStatus.QUEUED.value, approved_by=actor)
""",
    "reject": """
async def reject(ctx, job_id):
    async with transaction(ctx) as tx:
        await tx.q.update_job(
            job.id, status=JobStatus.CANCELLED.value, error=error, ended_at=tx.now
        )
""",
    "claim": """
async def claim(tx, job, worker):
    took = await tx.q.claim_worker(worker.id, {"status": WorkerStatus.BUSY.value})
""",
    "new worker": """
async def create_worker(tx, wid):
    await tx.q.insert_worker({"id": wid, "status": WorkerStatus.CONNECTING.value})
""",
    "spread": """
async def f(tx, job):
    await tx.q.update_job(job.id, **{"status": "failed"})
""",
    "a row built first": """
async def f(tx, job):
    row = {"id": job.id, "status": JobStatus.FAILED.value}
""",
    "a statement": """
async def f(self, job_id):
    await self.conn.execute(sa.update(jobs).where(jobs.c.id == job_id).values(status="failed"))
""",
    "an attempt": """
async def f(tx, attempt):
    await tx.q.set_attempt_status(attempt.id, AttemptStatus.LOST)
""",
}


@pytest.mark.parametrize("name", list(CAUGHT))
def test_a_status_written_outside_lifecycle_is_found(name: str) -> None:
    assert status_writers(CAUGHT[name], "gpufleet.server.services.policy") != []
    assert status_writers(CAUGHT[name], LIFECYCLE) == []


def test_what_is_not_a_write_of_a_status_is_not_found() -> None:
    reads = """
async def f(tx, q, job, w):
    await tx.q.update_job(job.id, progress=job.progress)
    await tx.q.update_delivery(d.id, status=status.value)
    jobs = await q.user_jobs(user.id, {JobStatus.QUEUED})
    return {"status": w.status.value, "ok": True}
"""
    assert status_writers(reads, "gpufleet.server.services.queue") == []


def test_the_scan_reads_the_package() -> None:
    assert len(list(Path(PACKAGE).rglob("*.py"))) > 50
