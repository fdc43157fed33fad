"""Artifacts and checkpoints (docs/artifacts.md)."""

from __future__ import annotations

import sqlalchemy as sa

from gpufleet.store.tables.base import UTCDateTime, metadata

# A job's files in the artifact store (gpufleet.artifacts). A row is written only once its
# bytes are in place and verified: a partial or corrupt upload is never listed.
artifacts = sa.Table(
    "artifacts",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("attempt_id", sa.String(32), nullable=False),
    sa.Column("path", sa.String(1024), nullable=False),  # relative to the job folder
    sa.Column("kind", sa.String(16), nullable=False),  # domain.records.ArtifactKind
    sa.Column("checkpoint", sa.String(255)),  # the checkpoint's name, for a checkpoint file
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("sha256", sa.String(64), nullable=False),
    sa.Column("key", sa.String(1200), nullable=False),  # artifacts.keys.artifact_key
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("attempt_id", "path", name="uq_artifact_attempt_path"),
    sa.Index("ix_artifacts_job", "job_id", "created_at"),
)

# A checkpoint the worker committed once its every file was stored: what a later attempt of
# the job resumes from.
checkpoints = sa.Table(
    "checkpoints",
    metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column(
        "job_id", sa.String(32), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False
    ),
    sa.Column("attempt_id", sa.String(32), nullable=False),
    sa.Column("name", sa.String(255), nullable=False),  # the folder's name, checkpoint-1200
    sa.Column("path", sa.String(1024), nullable=False),  # the folder, relative to the job's
    sa.Column("step", sa.BigInteger),
    sa.Column("files", sa.Integer, nullable=False),  # how many files it holds
    sa.Column("size", sa.BigInteger, nullable=False),  # their bytes together
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.UniqueConstraint("attempt_id", "name", name="uq_checkpoint_attempt_name"),
    sa.Index("ix_checkpoints_job", "job_id", "created_at"),
)

# A multi-node job's checkpoint, one row a node that committed its part (its files stored
# under `node-K/`, domain/node_checkpoints.py); the checkpoint is complete once every node's is.
checkpoint_nodes = sa.Table(
    "checkpoint_nodes",
    metadata,
    sa.Column(
        "checkpoint_id",
        sa.String(32),
        sa.ForeignKey("checkpoints.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("rank", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("files", sa.Integer, nullable=False),
    sa.Column("size", sa.BigInteger, nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
)

# Who holds a workdir snapshot (domain/workdir_access.py): a row without a team is a user who
# uploaded its bytes, checked against the digest; a row with one is that user's sharing of it
# with the team (a job of theirs naming it is for the team). Written by services/workdirs.py.
workdir_holders = sa.Table(
    "workdir_holders",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("digest", sa.String(64), nullable=False),  # the sha256's hex digits
    sa.Column("user_id", sa.String(32), nullable=False),
    sa.Column("team_id", sa.String(32)),
    sa.Column("held_at", UTCDateTime, nullable=False),
    sa.Index("ix_workdir_holders_digest", "digest", "user_id"),
)
