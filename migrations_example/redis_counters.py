"""Reseeding Redis counters from a migration: the set-if-greater helper, offline-aware.

``reseed(entries)`` raises each generator's counters above the current values of its table column
(`sa_redis_ids.maintenance.reseed.reseed_from_table`); counters never move backwards, so a
re-run or a downgrade-upgrade cycle is harmless. In offline mode (``alembic upgrade --sql``) there is
no database to read, so it prints an SQL comment saying it skipped, with the command to run after
the SQL has been applied, instead of failing.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import example_models
from alembic import context, op

from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.maintenance.reseed import reseed_from_table

log = logging.getLogger("alembic.sa_redis_ids")


def reseed(entries: Sequence[tuple[str, str, IdGenerator[Any]]]) -> None:
    """Raise the counters of ``(table, column, generator)`` entries above the table's values."""
    if context.is_offline_mode():
        # Written into the generated SQL as comments, so whoever applies the script sees them.
        out = op.get_context().impl
        for table, column, generator in entries:
            out.static_output(
                f"-- sa_redis_ids: offline (--sql) mode, skipped reseeding {generator.namespace} "
                f"from {table}.{column}; after applying this SQL run: sa-redis-ids reseed "
                f"{generator.namespace} --app example_models:ids --db-url URL --table {table} "
                f"--column {column} (from the directory of example_models.py)"
            )
        return
    if example_models.REDIS_URL is None:
        log.warning(
            "SA_REDIS_IDS_URL is not set: reseeding the embedded in-process Redis, whose data is "
            "gone when this command exits"
        )
    bind = op.get_bind()
    for table, column, generator in entries:
        report = reseed_from_table(generator, bind, table, column)
        log.info("reseeded %s", report.describe())
        for step in report.steps:
            log.info("  %s", step.describe())
