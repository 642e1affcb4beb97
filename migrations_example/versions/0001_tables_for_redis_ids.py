"""Tables whose keys come from Redis: one per strategy, as a user writes them.

Every Redis-assigned key is ``BIGINT`` with ``autoincrement=False`` and no server default, so the
database never makes a value of its own (no SERIAL, IDENTITY or AUTO_INCREMENT). The daily order
code is a unique ``VARCHAR`` as long as the code; the short membership number a unique ``BIGINT``.

Revision ID: 0001
Revises: 0000
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = "0000"
branch_labels: str | None = None
depends_on: str | None = None

CODE_LENGTH = 14
"""``IS`` + ``YYYYMMDD`` + 4 digits: ``example_models.order_codes.max_length``."""


def redis_key(name: str = "id") -> sa.Column[int]:
    """A key column whose values come from a Redis generator (made primary by the table)."""
    return sa.Column(name, sa.BigInteger, autoincrement=False, nullable=False)


def upgrade() -> None:
    op.create_table(
        "invoices",
        redis_key(),
        sa.Column("amount", sa.Numeric(12, 2), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_invoices"),
    )
    op.create_table(
        "orders",
        redis_key(),
        sa.Column("code", sa.String(CODE_LENGTH), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_orders"),
        sa.UniqueConstraint("code", name="uq_orders_code"),
    )
    op.create_table(
        "members",
        redis_key(),
        sa.Column("number", sa.BigInteger, nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_members"),
        sa.UniqueConstraint("number", name="uq_members_number"),
    )


def downgrade() -> None:
    op.drop_table("members")
    op.drop_table("orders")
    op.drop_table("invoices")
