"""Data migration: raise every Redis counter above what its table already holds.

Needed whenever the tables may be ahead of Redis: rows imported or restored from a backup, a Redis
that lost its data, a new Redis behind an old database. Uses the generators' set-if-greater
``ensure_at_least`` (per day for date-keyed ones; ``reserve`` for the short-number pool), so it
never lowers a counter and can run again at any time. Offline (``--sql``) it prints that it skipped.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

from __future__ import annotations

import example_models
import redis_counters

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    redis_counters.reseed(example_models.RESEED)


def downgrade() -> None:
    """Nothing to undo: counters only move forward, and a higher counter only leaves a gap."""
