"""Persistence: SQLAlchemy Core tables, Alembic migrations, and every query, by name."""

from gpufleet.store.engine import Store, open_store
from gpufleet.store.queries import Queries

__all__ = ["Queries", "Store", "open_store"]
