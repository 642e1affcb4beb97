"""Helpers of the ORM tests: the strategy table, a Redis round-trip counter, fresh declarative bases.

``STRATEGIES`` lists every ID strategy with options that fit the tests (a daily code of 6 digits, so
10,000 codes fit in one day). ``RoundTrips`` counts the calls a ``RedisIds`` makes to its nodes: each
``NodeSet.call_plan``/``each`` is one Redis round trip of one generator.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from sqlalchemy import BigInteger, String, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import RedisIds, redis_id
from sa_redis_ids.generators.base import IdGenerator


@dataclass(frozen=True)
class Strategy:
    name: str
    factory: str
    options: dict[str, Any]

    def make(self, ids: RedisIds, namespace: str) -> IdGenerator[Any]:
        if not hasattr(ids, self.factory):
            pytest.skip(f"RedisIds.{self.factory} does not exist yet")
        generator: IdGenerator[Any] = getattr(ids, self.factory)(namespace, **self.options)
        return generator


STRATEGIES = [
    Strategy("sequence", "sequence", {}),
    Strategy("date_prefixed", "date_prefixed", {}),
    Strategy("snowflake", "snowflake", {}),
    # A small pool: fakeredis runs the bitmap search in Python, slowly for a big bitmap.
    Strategy("short_id", "short_id", {"pool_size": 50_000, "offset": 100_000}),
    Strategy("daily_code", "daily_code", {"digits": 6}),
]
STRATEGY_IDS = [s.name for s in STRATEGIES]


class RoundTrips:
    """Counts Redis round trips per namespace by wrapping the node set's entry points: every
    call of a generator goes through ``call_plan`` (the sync ``call`` too), and the calls on
    every node through ``each`` or ``each_plan``."""

    def __init__(self, ids: RedisIds):
        self.counts: Counter[str] = Counter()
        nodes = ids.nodes

        def counted(entry: Callable[[str, Callable[[Any], Any]], Any]) -> Any:
            def wrapper(namespace: str, action: Callable[[Any], Any]) -> Any:
                self.counts[namespace] += 1
                return entry(namespace, action)

            return wrapper

        nodes.call_plan = counted(nodes.call_plan)  # type: ignore[method-assign]
        nodes.each = counted(nodes.each)  # type: ignore[method-assign]
        nodes.each_plan = counted(nodes.each_plan)  # type: ignore[method-assign]

    def take(self) -> dict[str, int]:
        """The counts since the last ``take()``, then reset."""
        found = dict(self.counts)
        self.counts.clear()
        return found


@contextmanager
def fresh_base() -> Iterator[type[DeclarativeBase]]:
    """A new declarative base; its registry is disposed afterwards, so a mapping error made on
    purpose cannot stop later tests from configuring their mappers."""

    class Base(DeclarativeBase):
        pass

    try:
        yield Base
    finally:
        Base.registry.dispose()


def real_redis_ids(client: redis.Redis) -> Iterator[RedisIds]:
    """A ``RedisIds`` on the shared server under a private prefix; its keys are deleted after."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield RedisIds(client, prefix=prefix)
    for key in client.scan_iter(match=f"{prefix}:*"):
        client.delete(key)


def insert_orders(ids: RedisIds, database: str, prefix: str, count: int = 30) -> None:
    """Insert ``count`` orders into a new SQLite file ``database`` with a snowflake key and a daily
    code of ``ids`` (namespaces ``<prefix>_orders`` and ``<prefix>_codes``), and check every key
    and code came out once. Closes ``ids``."""
    orders = ids.snowflake(f"{prefix}_orders")
    codes = ids.daily_code(f"{prefix}_codes", code_prefix="OR", digits=6)

    class Base(DeclarativeBase):
        pass

    class Order(Base):
        __tablename__ = "orders"
        id: Mapped[int] = mapped_column(
            BigInteger, primary_key=True, autoincrement=False, default=redis_id(orders)
        )
        code: Mapped[str] = mapped_column(String(20), default=redis_id(codes))

    engine = create_engine(f"sqlite:///{database}")
    Base.metadata.create_all(engine)
    try:
        with Session(engine) as session:
            session.add_all([Order() for _ in range(count)])
            session.commit()
            rows = session.execute(select(Order.id, Order.code)).all()
        assert len({row.id for row in rows}) == len({row.code for row in rows}) == count
    finally:
        engine.dispose()
        ids.close()


def each_strategy(prefix: str, code_prefix: str) -> dict[str, Callable[[Any], Any]]:
    """A maker per strategy, by name, for namespaces ``<prefix>_…`` (sync or asyncio ``ids``)."""
    return {
        "sequence": lambda ids: ids.sequence(f"{prefix}_seq"),
        "date_prefixed": lambda ids: ids.date_prefixed(f"{prefix}_dp"),
        "snowflake": lambda ids: ids.snowflake(f"{prefix}_sf"),
        "short_id": lambda ids: ids.short_id(f"{prefix}_short", pool_size=100_000),
        "daily_code": lambda ids: ids.daily_code(f"{prefix}_dc", code_prefix=code_prefix, digits=6),
    }


def draw_lock_and_maintain(ids: RedisIds, makers: dict[str, Callable[[Any], Any]]) -> None:
    """Draw 51 values of each maker's generator (all distinct), take and free a lock, and run the
    maintenance once without an error: what a deployment does with ``ids``."""
    for name, make in makers.items():
        generator = make(ids)
        values = [generator.next_id(), *generator.next_ids(50)]
        assert len(set(values)) == 51, name
    with ids.lock(f"{ids.prefix}-lock", timeout=2) as lease:
        assert lease.fencing_token >= 1
    summary = ids.maintenance().run_once()
    assert not summary.errors, summary.errors
