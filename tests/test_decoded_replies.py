"""A client made with ``decode_responses=True`` (replies as ``str``) works with every strategy and
the lock, on every backend: nothing assumes redis-py's default ``bytes`` replies."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, time, timedelta
from typing import Any

import fakeredis
import pytest
import redis
from redis.cluster import RedisCluster

from sa_redis_ids import RedisIds
from tests.conftest import Backend
from tests.support.days import shift_to_local

DAY = date(2031, 2, 3)


@pytest.fixture
def decoding(backend: Backend, request: pytest.FixtureRequest) -> Iterator[RedisIds]:
    """A ``RedisIds`` on the current backend through a client that decodes replies to ``str``."""
    client: Any
    if backend.name == "fake":
        client = fakeredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)
    elif backend.url is not None:
        client = redis.Redis.from_url(backend.url, decode_responses=True, socket_timeout=5)
    else:
        url = request.getfixturevalue("redis_cluster").url
        client = RedisCluster.from_url(url, decode_responses=True, socket_timeout=5)
    yield RedisIds(client, prefix=backend.prefix)
    client.close()


def test_short_ids(decoding: RedisIds) -> None:
    pool = decoding.short_id("users", pool_size=1000, offset=1000, floor=lambda: [1500])
    values = [*pool.next_ids(20), pool.next_id()]
    assert len(set(values)) == 21 and all(1000 <= v < 2000 for v in values)
    assert 1500 not in values and pool.is_taken(values[0])
    assert pool.release(values[0]) is True
    assert pool.reserve([values[0]]) == 1
    assert pool.stats().issued == 22


def test_sequences(decoding: RedisIds) -> None:
    users = decoding.sequence("users", floor=lambda: 10, headroom=0)
    assert users.next_ids(2) == [11, 12]
    assert users.ensure_at_least(100)[0][2] == 100
    buffered = decoding.sequence("orders", block=10)
    assert [buffered.next_id() for _ in range(3)] == [1, 2, 3]


def test_snowflakes(decoding: RedisIds) -> None:
    flakes = decoding.snowflake("events", floor=lambda: 0)
    values = flakes.next_ids(5)
    assert values == sorted(set(values))
    assert flakes.parse(values[0]).sequence >= 0


def test_date_prefixed_with_a_floor_and_maintenance(decoding: RedisIds) -> None:
    invoices = decoding.date_prefixed("invoices", length=12, floor=lambda day: 41, headroom=0)
    shift_to_local(invoices, DAY, time(12))
    assert invoices.next_ids(2) == [20310203_0042, 20310203_0043]
    assert invoices.precreate(DAY + timedelta(days=1)) is True
    assert invoices.days_present() == [DAY, DAY + timedelta(days=1)]
    assert invoices.purge_before(DAY + timedelta(days=1)) == [DAY]
    assert invoices.purged_through() == DAY


def test_daily_codes(decoding: RedisIds) -> None:
    codes = decoding.daily_code("orders", floor=lambda day: 0, headroom=0)
    shift_to_local(codes, DAY, time(12))
    assert [codes.next_id(), *codes.next_ids(2)] == [
        "IS203102030001",
        "IS203102030002",
        "IS203102030003",
    ]
    codes.purge_before(DAY + timedelta(days=1))
    assert codes.days_present() == []


def test_the_lock(decoding: RedisIds) -> None:
    with decoding.lock("decoded") as lease:
        assert lease.fencing_token == 1
        assert lease.extend() > 0
    with decoding.lock("decoded") as again:
        assert again.fencing_token == 2


def test_the_maintenance_job(decoding: RedisIds) -> None:
    decoding.daily_code("orders").next_id()
    decoding.short_id("users", pool_size=100, offset=100).next_id()
    summary = decoding.maintenance(keep_days=2, precreate_days=1).run_once()
    assert summary.ok, summary.line()
