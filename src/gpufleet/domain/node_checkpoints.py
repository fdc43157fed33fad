"""Checkpoints of a multi-node (gang) job: one part a node. Pure.

In a gang every node stores its own checkpoint files (a sharded checkpoint, FSDP or ZeRO,
holds different bytes on each node; a replicated one holds its own copy), under `node-K/`
before their path in the job folder (`node_path`). A checkpoint of the gang is the set of
parts its nodes committed under one name in one attempt; it is complete once every node's
part is there (`completion`). A requeued gang resumes from the newest checkpoint every node
completed (`resume_choice`): a newer one some node never finished is passed over.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

_NODE_PREFIX = re.compile(r"node-(0|[1-9][0-9]{0,5})/(.+)", re.DOTALL)


def node_path(rank: int, path: str) -> str:
    """Where node `rank`'s file at `path` (relative to its job folder) is stored."""
    return f"node-{rank}/{path}"


def split_node_path(path: str) -> tuple[int, str] | None:
    """(rank, path in the node's job folder) of a stored `node-K/…` path; None for another."""
    match = _NODE_PREFIX.fullmatch(path)
    return (int(match.group(1)), match.group(2)) if match else None


@dataclass(frozen=True, slots=True)
class Completion:
    """Which nodes of an `nodes`-node gang committed their part of one checkpoint."""

    nodes: int
    done: tuple[int, ...]

    @property
    def missing(self) -> tuple[int, ...]:
        return tuple(rank for rank in range(self.nodes) if rank not in self.done)

    @property
    def complete(self) -> bool:
        return not self.missing


def completion(nodes: int, done: Iterable[int]) -> Completion:
    """The ranks in `done` that belong to the gang, sorted, against its node count."""
    return Completion(nodes, tuple(sorted({rank for rank in done if 0 <= rank < nodes})))


class _Identified(Protocol):
    @property
    def id(self) -> str: ...


C = TypeVar("C", bound=_Identified)


def resume_choice(
    candidates: Sequence[C], nodes: int, parts: Mapping[str, Collection[int]]
) -> C | None:
    """The checkpoint a gang of `nodes` nodes resumes from: the first of `candidates` (newest
    first, as the store orders a resume's sources) whose every node committed its part;
    `parts` maps a checkpoint's id to the ranks that did. A one-node job's newest is its own."""
    for candidate in candidates:
        if nodes <= 1 or completion(nodes, parts.get(candidate.id, ())).complete:
            return candidate
    return None
