"""The schema you already have: a customers table with a database-generated key.

It stands for the tables most teams arrive with: ``SERIAL``/``IDENTITY`` on PostgreSQL,
``AUTO_INCREMENT`` on MySQL/MariaDB, ``INTEGER PRIMARY KEY`` on SQLite. Revision 0003 hands its key
over to Redis. In your own project this revision already exists (or your tables predate Alembic).

Revision ID: 0000
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0000"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "customers",
        sa.Column("id", sa.Integer, autoincrement=True, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_customers"),
    )


def downgrade() -> None:
    op.drop_table("customers")
