"""Hand an existing autoincrement/IDENTITY key over to Redis: the usual way teams arrive.

1. Drop what made the database generate ``customers.id`` (PostgreSQL: the IDENTITY or the SERIAL
   default and its sequence; MySQL/MariaDB: ``AUTO_INCREMENT``; SQLite: the ``INTEGER PRIMARY KEY``
   rowid alias, by recreating the table) and widen the column to ``BIGINT``.
2. Raise the Redis sequence above the current maximum, so the first Redis ID follows the last
   database one. Deploy the code that sets ``default=redis_id(...)`` with or after this revision:
   an old instance still inserting without an ID fails loudly instead of colliding.

The downgrade gives the key back to the database, continuing above the current maximum.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

from __future__ import annotations

import example_models
import redis_counters
import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

TABLE = "customers"


def customers(key_type: type[sa.Integer], *, autoincrement: bool) -> sa.Table:
    """The table as it is before the batch operation on SQLite (no reflection: works with --sql)."""
    return sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("id", key_type, autoincrement=autoincrement, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_customers"),
    )


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        # Either kind of generated key: IDENTITY (dropped with its sequence) or SERIAL (a default
        # reading a sequence the column owns, dropped after the default that uses it).
        op.execute(f"ALTER TABLE {TABLE} ALTER COLUMN id DROP IDENTITY IF EXISTS")
        op.alter_column(
            TABLE, "id", server_default=None, type_=sa.BigInteger, existing_type=sa.Integer
        )
        op.execute(f"DROP SEQUENCE IF EXISTS {TABLE}_id_seq")
    elif dialect in ("mysql", "mariadb"):
        op.alter_column(
            TABLE,
            "id",
            type_=sa.BigInteger,
            existing_type=sa.Integer,
            autoincrement=False,
            existing_nullable=False,
        )
    else:
        with op.batch_alter_table(
            TABLE, recreate="always", copy_from=customers(sa.Integer, autoincrement=True)
        ) as batch:
            batch.alter_column(
                "id", type_=sa.BigInteger, existing_type=sa.Integer, autoincrement=False
            )
    redis_counters.reseed([(TABLE, "id", example_models.customer_ids)])


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    if dialect == "postgresql":
        op.alter_column(TABLE, "id", type_=sa.Integer, existing_type=sa.BigInteger)
        op.execute(f"CREATE SEQUENCE {TABLE}_id_seq OWNED BY {TABLE}.id")
        op.execute(
            f"SELECT setval('{TABLE}_id_seq', COALESCE((SELECT MAX(id) FROM {TABLE}), 0) + 1, false)"
        )
        op.alter_column(TABLE, "id", server_default=sa.text(f"nextval('{TABLE}_id_seq')"))
    elif dialect in ("mysql", "mariadb"):
        op.alter_column(
            TABLE,
            "id",
            type_=sa.Integer,
            existing_type=sa.BigInteger,
            autoincrement=True,
            existing_nullable=False,
        )
    else:
        with op.batch_alter_table(
            TABLE, recreate="always", copy_from=customers(sa.BigInteger, autoincrement=False)
        ) as batch:
            batch.alter_column(
                "id", type_=sa.Integer, existing_type=sa.BigInteger, autoincrement=True
            )
