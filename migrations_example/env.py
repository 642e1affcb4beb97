"""Alembic environment of the example: database from ``SA_REDIS_IDS_DB_URL``, models from
``example_models`` (whose ``RedisIds`` reads ``SA_REDIS_IDS_URL``, default the embedded Redis).

Online mode runs the revisions in one transaction per revision on a real connection; offline mode
(``alembic upgrade head --sql``) prints the SQL instead, and the data migrations that must talk to
Redis print a comment saying they skipped it.
"""

from __future__ import annotations

import os

import example_models
from alembic import context
from sqlalchemy import create_engine, pool

DEFAULT_DB_URL = "sqlite:///migrations_example.sqlite3"

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    from logging.config import fileConfig

    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = example_models.Base.metadata


def database_url() -> str:
    """``SA_REDIS_IDS_DB_URL``, else a SQLite file in the current directory."""
    return os.environ.get("SA_REDIS_IDS_DB_URL") or DEFAULT_DB_URL


def run_migrations_offline() -> None:
    """Emit the SQL of the revisions without a database connection (``--sql``)."""
    context.configure(
        url=database_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
        render_as_batch=database_url().startswith("sqlite"),
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    """Run the revisions on a connection to ``SA_REDIS_IDS_DB_URL``."""
    engine = create_engine(database_url(), poolclass=pool.NullPool)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=target_metadata,
            render_as_batch=connection.dialect.name == "sqlite",
            transaction_per_migration=True,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
