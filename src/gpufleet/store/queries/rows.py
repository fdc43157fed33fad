"""Rows as records: a record is read off a row by its dataclass fields.

Each field reads the column of its name, converted as its type says (`_converter`: an enum
from its value, a frozenset of enum values, a tuple of records from JSON objects, a fresh
dict, a bool, a float; an optional field keeps None). What a type cannot say is declared
beside the record's reader, in `Read`: a column of another name, a value made of the whole
row, a column only some queries select. A record's field without a column, or a column no
field reads and none declared unread, stops the import (tests/unit/test_rows.py), so a new
column is read by adding its field to the record: nothing here changes.

JSON columns arrive repaired already: the engine's deserializer (`jsonpolicy.loads_stored`)
reads what an older version stored as a value today's policy takes.

A reader is planned once per record type, at import, into a function of the row whose
source names each column, as `dataclasses` builds `__init__`: reading a row costs what the
hand-written mapping did (10,000 job or worker rows, about 12 ms either way), where a loop
over the fields at each row cost 10-18 % more on the hot path's reads. The source holds only
field names (identifiers) and column names (as `repr` writes them), never a value.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any, Generic, TypeVar

import sqlalchemy as sa

from gpufleet.domain.fleet_history import FleetSample
from gpufleet.domain.job_secrets import JobSecret
from gpufleet.domain.pools import Launch, Pool, check_provider
from gpufleet.domain.records import (
    ApiKey,
    Artifact,
    Attempt,
    AttemptNode,
    AuditEvent,
    Checkpoint,
    ConfigVersion,
    Job,
    Member,
    StoredConfig,
    Team,
    UsageSample,
    User,
    Worker,
    effective_labels,
)
from gpufleet.domain.sweeps import Sweep
from gpufleet.domain.webhooks import Delivery, Webhook
from gpufleet.store import tables

# A row by column name: SQLAlchemy's `RowMapping` (its keys may also be the Column objects),
# or a dict of the same names.
Columns = Mapping[Any, Any]
R = TypeVar("R")
Convert = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Read:
    """How one field is read when not from the column of its name, as its type says.

    `column`: the column it reads; `convert`: what makes the field of that column's value
    (in place of its type's conversion); `row`: the field made of the whole row (it reads
    `columns`); `optional`: the column only some queries select (None when absent)."""

    column: str | None = None
    convert: Convert | None = None
    row: Callable[[Columns], Any] | None = None
    columns: tuple[str, ...] = ()
    optional: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Reader(Generic[R]):
    """How `record`s are read off rows of `table`: `read` declares the fields not read as
    their column and type say, `unread` the columns no field reads."""

    record: type[R]
    table: sa.Table
    read: Mapping[str, Read]
    unread: frozenset[str]


# Every record read by a reader of this module, for tests/unit/test_rows.py.
READERS: list[Reader[Any]] = []


def reader(
    record: type[R],
    table: sa.Table,
    read: Mapping[str, Read] | None = None,
    unread: Collection[str] = (),
) -> Callable[[Columns], R]:
    """The function that reads a `record` off a row of `table`; refused (TypeError) if a
    field has no column or a column no field, unless declared."""
    plan = Reader(record, table, dict(read or {}), frozenset(unread))
    function = _plan(plan.record, plan.table, plan.read, plan.unread)
    READERS.append(plan)
    return function


def _plan(
    record: type[Any], table: sa.Table, read: Mapping[str, Read], unread: frozenset[str]
) -> Callable[[Columns], Any]:
    """The reader's function: one call of `record` naming each field's value."""
    hints = typing.get_type_hints(record)
    fields = [f.name for f in dataclasses.fields(record)]
    columns = set(table.c.keys())
    if set(read) - set(fields) or unread - columns:
        raise TypeError(f"{record.__name__}'s reader names a field or column that is not there")
    scope: dict[str, Any] = {"record": record}
    args: list[str] = []
    used: set[str] = set()
    for i, name in enumerate(fields):
        how = read.get(name, Read())
        if how.row is not None:
            scope[f"r{i}"] = how.row
            args.append(f"{name}=r{i}(m)")
            used.update(how.columns)
            continue
        column = how.column or name
        if column not in columns and not how.optional:
            raise TypeError(
                f"{record.__name__}.{name} has no column in {table.name}: add it to "
                "store/tables.py (and a migration), or declare how it is read (rows.Read)"
            )
        used.add(column)
        value = f"m.get({column!r})" if how.optional else f"m[{column!r}]"
        convert = how.convert or _converter(hints[name])
        if convert is not None:
            scope[f"c{i}"] = convert
            value = f"c{i}({value})"
        args.append(f"{name}={value}")
    left = columns - used - unread
    if left:
        raise TypeError(
            f"{table.name} has columns {sorted(left)} that no field of {record.__name__} "
            "reads: add the field to the record, or declare the column unread"
        )
    source = f"def read(m):\n    return record({', '.join(args)})\n"
    exec(source, scope)  # built of field and column names only, as dataclasses builds __init__
    function: Callable[[Columns], Any] = scope["read"]
    function.__qualname__ = function.__name__ = f"read_{record.__name__}"
    return function


def _converter(hint: Any) -> Convert | None:
    """What makes a field of this type of a column's value; None: the value as it is."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        convert = _converter(inner)
        return None if convert is None else _or_none(convert)
    origin = typing.get_origin(hint) or hint
    if isinstance(origin, type) and issubclass(origin, enum.Enum):
        return origin
    if origin is frozenset:
        item = args[0] if args else Any
        if isinstance(item, type) and issubclass(item, enum.Enum):
            return lambda v: frozenset(map(item, v))
        return frozenset
    if origin is tuple and args and dataclasses.is_dataclass(args[0]):
        nested: Any = args[0]
        return lambda v: tuple(nested(**x) for x in v or ())
    if origin is dict:
        return dict
    if origin in (bool, float):
        return typing.cast(Convert, origin)
    return None


def _or_none(convert: Convert) -> Convert:
    return lambda v: None if v is None else convert(v)


def of_table(table: sa.Table, m: Columns) -> dict[str, Any]:
    """`table`'s columns of a row that joins several tables, by their names."""
    return {c.name: m[c] for c in table.c}


def _labels(m: Columns) -> dict[str, str]:
    return effective_labels(m["reported_labels"], m["admin_labels"])


# The number of the attempt that wrote it, when a query joins it (queries/artifacts.py).
_ATTEMPT_NUMBER = Read(optional=True)

worker = reader(
    Worker,
    tables.workers,
    {"labels": Read(row=_labels, columns=("reported_labels", "admin_labels"))},
)
job = reader(Job, tables.jobs, unread={"match_key"})
attempt = reader(Attempt, tables.job_attempts)
attempt_node = reader(AttemptNode, tables.attempt_nodes)
artifact = reader(Artifact, tables.artifacts, {"attempt_number": _ATTEMPT_NUMBER})
checkpoint = reader(Checkpoint, tables.checkpoints, {"attempt_number": _ATTEMPT_NUMBER})
audit_event = reader(AuditEvent, tables.audit_events, unread={"chain_seq", "mac"})
api_key = reader(
    ApiKey,
    tables.api_keys,
    {"revoked": Read(column="revoked_at", convert=lambda at: at is not None)},
    unread={"key_hash", "created_by"},
)
webhook = reader(Webhook, tables.webhooks)
delivery = reader(Delivery, tables.webhook_deliveries, unread={"claimed_until"})
user = reader(User, tables.users)
team = reader(Team, tables.teams)
member = reader(Member, tables.team_members)
usage_sample = reader(UsageSample, tables.usage_samples, unread={"id"})
stored_config = reader(StoredConfig, tables.configs)
config_version = reader(ConfigVersion, tables.config_versions)
job_secret = reader(JobSecret, tables.job_secrets)
fleet_sample = reader(FleetSample, tables.fleet_samples, unread={"id"})
pool = reader(Pool, tables.pools, {"provider": Read(convert=check_provider)})
launch = reader(Launch, tables.pool_launches)
sweep = reader(Sweep, tables.sweeps)

# `nodes` as its column's default: a job inserted without it runs on one machine
_EMPTY_JOB: dict[str, Any] = {column.name: None for column in tables.jobs.c} | {"nodes": 1}


def new_job(values: Mapping[str, Any]) -> Job:
    """The job a row of these values makes: the columns not given are empty."""
    return job({**_EMPTY_JOB, **values})
