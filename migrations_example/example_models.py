"""The example application's models, written as a user would: one per ID strategy.

The migrations in ``versions/`` create their tables; ``env.py`` uses ``Base.metadata`` for
autogenerate. Redis comes from ``SA_REDIS_IDS_URL`` (default: the embedded in-process Redis) with
the key prefix ``SA_REDIS_IDS_PREFIX`` (default ``sa_redis_ids``).

Column rules for Redis-assigned keys: ``BigInteger``, ``autoincrement=False`` (so no SERIAL,
IDENTITY or AUTO_INCREMENT is created) and no server default; the value comes from ``redis_id(...)``
on every insert path. Codes go in a unique ``String`` column sized to the generator's
``max_length``.
"""

from __future__ import annotations

import os
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, MetaData, Numeric, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sa_redis_ids import RedisIds, redis_id
from sa_redis_ids.generators.base import IdGenerator

REDIS_URL = os.environ.get("SA_REDIS_IDS_URL") or None
PREFIX = os.environ.get("SA_REDIS_IDS_PREFIX") or "sa_redis_ids"

ids = RedisIds.from_env(REDIS_URL, prefix=PREFIX)

customer_ids = ids.sequence("customers")
invoice_ids = ids.date_prefixed("invoices", fmt="YYYYMMDD", length=19, tz="UTC")
order_ids = ids.snowflake("orders")
order_codes = ids.daily_code("order_codes", code_prefix="IS", digits=4, tz="Asia/Shanghai")
member_ids = ids.sequence("members")
member_numbers = ids.short_id("member_numbers", pool_size=90_000_000, offset=10_000_000)

NAMING = {
    "pk": "pk_%(table_name)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ix": "ix_%(table_name)s_%(column_0_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


class Customer(Base):
    """An existing table whose autoincrement key revision 0003 hands over to a Redis sequence."""

    __tablename__ = "customers"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False, default=redis_id(customer_ids)
    )
    name: Mapped[str] = mapped_column(String(100))


class Invoice(Base):
    """Date-prefixed keys: ``2026112200000000042``."""

    __tablename__ = "invoices"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False, default=redis_id(invoice_ids)
    )
    amount: Mapped[Decimal] = mapped_column(Numeric(12, 2))


class Order(Base):
    """Snowflake keys, plus a human-readable daily code (``IS202611220001``) in a unique column."""

    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False, default=redis_id(order_ids)
    )
    code: Mapped[str] = mapped_column(
        String(order_codes.max_length), unique=True, default=redis_id(order_codes)
    )


class Member(Base):
    """A sequence key and a short random membership number (8 digits) in a unique column."""

    __tablename__ = "members"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True, autoincrement=False, default=redis_id(member_ids)
    )
    number: Mapped[int] = mapped_column(BigInteger, unique=True, default=redis_id(member_numbers))
    name: Mapped[str] = mapped_column(String(100))


RESEED: list[tuple[str, str, IdGenerator[Any]]] = [
    ("customers", "id", customer_ids),
    ("invoices", "id", invoice_ids),
    ("orders", "code", order_codes),
    ("members", "id", member_ids),
    ("members", "number", member_numbers),
]
"""(table, column, generator) of every counter a table's contents can get ahead of. Snowflake keys
have no counter: they are made from Redis time and never repeat after a data loss."""
