"""Alembic environment: runs on the connection the store hands in (see engine.migrate)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from gpufleet.store.tables import metadata

connection = context.config.attributes.get("connection")
if connection is None:  # `alembic revision --autogenerate` from the command line
    url = context.config.get_main_option("sqlalchemy.url") or "sqlite://"
    with create_engine(url).connect() as conn:
        context.configure(connection=conn, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
else:
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
