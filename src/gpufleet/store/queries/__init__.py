"""Every query gpufleet runs, by name, on one connection inside one transaction.

Grouped by aggregate, one module each; `Queries` is all of them on one connection, which is
what the services hold (`tx.q`, `store.read()`).
"""

from __future__ import annotations

from gpufleet.store.queries.artifacts import ArtifactQueries
from gpufleet.store.queries.attempts import AttemptQueries
from gpufleet.store.queries.audit import AuditQueries
from gpufleet.store.queries.dependencies import DependencyQueries
from gpufleet.store.queries.fleet_history import FleetHistoryQueries
from gpufleet.store.queries.gangs import GangQueries
from gpufleet.store.queries.identities import IdentityQueries
from gpufleet.store.queries.jobs import JobQueries, NewJob
from gpufleet.store.queries.keys import KeyQueries
from gpufleet.store.queries.logs import LOG_SEQ_MAX, LogQueries
from gpufleet.store.queries.people import PeopleQueries
from gpufleet.store.queries.policy import PolicyQueries
from gpufleet.store.queries.pools import PoolQueries
from gpufleet.store.queries.retention import RetentionQueries
from gpufleet.store.queries.secrets import SecretQueries
from gpufleet.store.queries.submit_keys import SubmitKeyQueries
from gpufleet.store.queries.sweeps import SweepQueries
from gpufleet.store.queries.webhooks import WebhookQueries
from gpufleet.store.queries.workdirs import WorkdirQueries
from gpufleet.store.queries.workers import WorkerQueries


class Queries(
    WorkerQueries,
    KeyQueries,
    JobQueries,
    AttemptQueries,
    LogQueries,
    AuditQueries,
    WebhookQueries,
    ArtifactQueries,
    RetentionQueries,
    PolicyQueries,
    PeopleQueries,
    SecretQueries,
    FleetHistoryQueries,
    WorkdirQueries,
    GangQueries,
    PoolQueries,
    IdentityQueries,
    DependencyQueries,
    SubmitKeyQueries,
    SweepQueries,
):
    """Named queries bound to one connection. The caller owns the transaction."""


__all__ = ["LOG_SEQ_MAX", "NewJob", "Queries"]
