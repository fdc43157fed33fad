"""Artifacts and checkpoints: a job's files in the artifact store (docs/artifacts.md)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import sqlalchemy as sa

from gpufleet.domain.records import Artifact, Checkpoint
from gpufleet.store.queries import rows
from gpufleet.store.queries.base import QueryBase
from gpufleet.store.tables import artifacts, checkpoint_nodes, checkpoints, job_attempts, jobs


class ArtifactQueries(QueryBase):
    async def insert_artifact(self, values: Mapping[str, Any]) -> None:
        """Insert an artifact, replacing the attempt's row of the same path (an overwrite)."""
        a = artifacts.c
        await self.conn.execute(
            sa.delete(artifacts).where(
                a.attempt_id == values["attempt_id"], a.path == values["path"]
            )
        )
        await self.conn.execute(sa.insert(artifacts).values(**values))

    async def get_artifact(self, artifact_id: str) -> Artifact | None:
        stmt = _with_attempt(artifacts).where(artifacts.c.id == artifact_id)
        row = await self._first(stmt)
        return rows.artifact(row) if row else None

    async def artifact_at(self, attempt_id: str, path: str) -> Artifact | None:
        """The attempt's artifact at `path`, if one is stored."""
        a = artifacts.c
        stmt = _with_attempt(artifacts).where(a.attempt_id == attempt_id, a.path == path)
        row = await self._first(stmt)
        return rows.artifact(row) if row else None

    async def artifacts_for_job(self, job_id: str) -> list[Artifact]:
        """The job's artifacts, newest attempt first, then by path."""
        stmt = (
            _with_attempt(artifacts)
            .where(artifacts.c.job_id == job_id)
            .order_by(job_attempts.c.number.desc(), artifacts.c.path)
        )
        return [rows.artifact(m) for m in await self._mapped(stmt)]

    async def checkpoint_files(self, attempt_id: str, name: str) -> list[Artifact]:
        """The files stored for the attempt's checkpoint `name`, by path."""
        a = artifacts.c
        stmt = (
            _with_attempt(artifacts)
            .where(a.attempt_id == attempt_id, a.checkpoint == name)
            .order_by(a.path)
        )
        return [rows.artifact(m) for m in await self._mapped(stmt)]

    async def job_artifact_bytes(self, job_id: str) -> int:
        """What the job's stored artifacts take, every attempt together."""
        stmt = sa.select(sa.func.coalesce(sa.func.sum(artifacts.c.size), 0)).where(
            artifacts.c.job_id == job_id
        )
        return int((await self.conn.execute(stmt)).scalar_one())

    async def insert_checkpoint(self, values: Mapping[str, Any]) -> None:
        """Insert a checkpoint, replacing the attempt's one of the same name (a re-commit)."""
        c = checkpoints.c
        await self.conn.execute(
            sa.delete(checkpoints).where(
                c.attempt_id == values["attempt_id"], c.name == values["name"]
            )
        )
        await self.conn.execute(sa.insert(checkpoints).values(**values))

    async def get_checkpoint(self, checkpoint_id: str) -> Checkpoint | None:
        stmt = _with_attempt(checkpoints).where(checkpoints.c.id == checkpoint_id)
        row = await self._first(stmt)
        return rows.checkpoint(row) if row else None

    async def checkpoints_for_job(self, job_id: str) -> list[Checkpoint]:
        """The job's committed checkpoints, newest first."""
        c = checkpoints.c
        stmt = (
            _with_attempt(checkpoints)
            .where(c.job_id == job_id)
            .order_by(c.created_at.desc(), job_attempts.c.number.desc(), c.id.desc())
        )
        return [rows.checkpoint(m) for m in await self._mapped(stmt)]

    async def latest_checkpoint(
        self, job_id: str, attempt_ids: Collection[str]
    ) -> Checkpoint | None:
        """The newest checkpoint the job committed in one of `attempt_ids` (those a resume may
        draw on: `outcomes.resume_sources`) while that attempt was still live: one written
        after its attempt ended (fenced out) is never a resume's source, whatever wrote it."""
        found = await self.resume_candidates(job_id, attempt_ids, limit=1)
        return found[0] if found else None

    async def resume_candidates(
        self, job_id: str, attempt_ids: Collection[str], *, limit: int | None = None
    ) -> list[Checkpoint]:
        """The checkpoints a resume may start from, newest first (`latest_checkpoint`'s
        order); a gang's are chosen among them by `node_checkpoints.resume_choice`."""
        if not attempt_ids:
            return []
        c = checkpoints.c
        stmt = (
            _with_attempt(checkpoints)
            .where(
                c.job_id == job_id,
                c.attempt_id.in_(list(attempt_ids)),
                sa.or_(job_attempts.c.ended_at.is_(None), c.created_at <= job_attempts.c.ended_at),
            )
            .order_by(
                job_attempts.c.number.desc(),
                sa.func.coalesce(c.step, -1).desc(),
                c.created_at.desc(),
                c.id.desc(),
            )
            .limit(limit)
        )
        return [rows.checkpoint(m) for m in await self._mapped(stmt)]

    async def checkpoint_named(self, attempt_id: str, name: str) -> Checkpoint | None:
        """The attempt's checkpoint `name`, if one was committed (by any node)."""
        c = checkpoints.c
        stmt = _with_attempt(checkpoints).where(c.attempt_id == attempt_id, c.name == name)
        row = await self._first(stmt)
        return rows.checkpoint(row) if row else None

    async def insert_checkpoint_node(self, values: Mapping[str, Any]) -> None:
        """Record a node's part of a gang's checkpoint (replacing its earlier commit of it),
        and make the checkpoint's files and size those of its parts together."""
        n = checkpoint_nodes.c
        checkpoint_id = values["checkpoint_id"]
        await self.conn.execute(
            sa.delete(checkpoint_nodes).where(
                n.checkpoint_id == checkpoint_id, n.rank == values["rank"]
            )
        )
        await self.conn.execute(sa.insert(checkpoint_nodes).values(**values))
        await self.conn.execute(
            sa.update(checkpoints)
            .where(checkpoints.c.id == checkpoint_id)
            .values(
                files=_of_parts(sa.func.sum(n.files), checkpoint_id),
                size=_of_parts(sa.func.sum(n.size), checkpoint_id),
            )
        )

    async def checkpoint_node_ranks(self, checkpoint_ids: Collection[str]) -> dict[str, set[int]]:
        """The ranks that committed their part of each checkpoint while its attempt was live."""
        if not checkpoint_ids:
            return {}
        n = checkpoint_nodes.c
        stmt = (
            sa.select(n.checkpoint_id, n.rank)
            .join(checkpoints, checkpoints.c.id == n.checkpoint_id)
            .join(job_attempts, job_attempts.c.id == checkpoints.c.attempt_id)
            .where(
                n.checkpoint_id.in_(list(checkpoint_ids)),
                sa.or_(job_attempts.c.ended_at.is_(None), n.created_at <= job_attempts.c.ended_at),
            )
        )
        found: dict[str, set[int]] = {}
        for checkpoint_id, rank in (await self.conn.execute(stmt)).all():
            found.setdefault(checkpoint_id, set()).add(rank)
        return found

    async def delete_artifacts(self, artifact_ids: Collection[str]) -> int:
        if not artifact_ids:
            return 0
        stmt = sa.delete(artifacts).where(artifacts.c.id.in_(list(artifact_ids)))
        return await self._rowcount(stmt)

    async def delete_checkpoints(self, checkpoint_ids: Collection[str]) -> int:
        if not checkpoint_ids:
            return 0
        stmt = sa.delete(checkpoints).where(checkpoints.c.id.in_(list(checkpoint_ids)))
        return await self._rowcount(stmt)

    async def set_artifacts_pinned(self, job_id: str, pinned: bool) -> None:
        await self.conn.execute(
            sa.update(jobs).where(jobs.c.id == job_id).values(artifacts_pinned=pinned)
        )


def _with_attempt(table: sa.Table) -> sa.Select[Any]:
    """Rows of `table` with their attempt's number (`attempt_number`)."""
    return sa.select(table, job_attempts.c.number.label("attempt_number")).join(
        job_attempts, job_attempts.c.id == table.c.attempt_id
    )


def _of_parts(total: Any, checkpoint_id: str) -> Any:
    """`total` over the parts of one gang checkpoint, as a value an update can set."""
    of_it = checkpoint_nodes.c.checkpoint_id == checkpoint_id
    return sa.select(total).where(of_it).scalar_subquery()
