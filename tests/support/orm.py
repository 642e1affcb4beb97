"""Helpers of the ORM tests: the strategy table, a Redis round-trip counter, fresh declarative bases.

``STRATEGIES`` lists every ID strategy with options that fit the tests (a daily code of 6 digits, so
10,000 codes fit in one day). ``RoundTrips`` counts the calls a ``RedisIds`` makes to its nodes: each
``NodeSet.call``/``each`` is one Redis round trip of one generator.
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
from sqlalchemy.orm import DeclarativeBase

from sa_redis_ids import RedisIds
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
