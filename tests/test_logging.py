"""Log lines on the ``sa_redis_ids.*`` loggers, against real transitions: a redis-server this test
started is stopped (by its pid) and started again; a counter is lost; the Redis clock steps back."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import pytest
import redis

from sa_redis_ids import ClockMovedBackwards, RedisIds, RedisUnavailable
from sa_redis_ids.testing import shift_time
from tests.support.servers import RedisServer

StartServers = Callable[[int], list[RedisServer]]


def _records(caplog: pytest.LogCaptureFixture, name: str, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == name and r.levelno == level]


def test_a_node_going_down_and_back_logs_one_line_each(
    redis_servers: StartServers, caplog: pytest.LogCaptureFixture
) -> None:
    servers = redis_servers(2)
    # retry_after=0: the stopped node is tried again on every call that turns to it
    ids = RedisIds.from_urls([s.url for s in servers], retry_after=0)
    users = ids.sequence("users")
    victim = ids.nodes.nodes[1]
    with caplog.at_level(logging.INFO, logger="sa_redis_ids.nodes"):
        users.next_ids(4)
        servers[1].stop()
        drawn = [users.next_id() for _ in range(8)]  # half of them try the stopped node first
        assert len(set(drawn)) == 8
        assert victim.down_until != 0.0
        assert not _records(caplog, "sa_redis_ids.nodes", logging.INFO)
        servers[1].start()
        for _ in range(20):
            users.next_id()
            if victim.down_until == 0.0:
                break
        assert victim.down_until == 0.0, "the restarted node answers again"
        users.next_ids(4)

    (down,) = _records(caplog, "sa_redis_ids.nodes", logging.WARNING)
    (up,) = _records(caplog, "sa_redis_ids.nodes", logging.INFO)
    assert victim.name in down.getMessage() and "is down" in down.getMessage()
    assert "ConnectionError" in down.getMessage()
    assert victim.name in up.getMessage() and "answers again" in up.getMessage()


def test_a_single_node_failing_calls_logs_the_transition_once(
    redis_servers: StartServers, caplog: pytest.LogCaptureFixture
) -> None:
    (server,) = redis_servers(1)
    users = RedisIds.from_url(server.url).sequence("users")
    with caplog.at_level(logging.INFO, logger="sa_redis_ids.nodes"):
        assert users.next_id() == 1
        server.stop()
        for _ in range(3):
            with pytest.raises(RedisUnavailable):
                users.next_id()
        server.start()
        users.next_id()
        users.next_id()
    assert len(_records(caplog, "sa_redis_ids.nodes", logging.WARNING)) == 1
    assert len(_records(caplog, "sa_redis_ids.nodes", logging.INFO)) == 1


def test_a_healed_rewind_is_logged_on_the_rewinds_logger(
    real_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ids = RedisIds(real_redis, prefix=f"log{uuid.uuid4().hex[:8]}")
    users = ids.sequence("users", headroom=10)
    users.next_ids(5)
    real_redis.delete(users.counter_key)  # the node forgot the counter
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        assert users.next_id() == 16
    (record,) = _records(caplog, "sa_redis_ids.rewinds", logging.WARNING)
    assert "namespace users" in record.getMessage() and "missing" in record.getMessage()


def test_the_redis_clock_going_back_is_logged_with_namespace_and_ms(
    real_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ids = RedisIds(real_redis, prefix=f"log{uuid.uuid4().hex[:8]}")
    orders = ids.snowflake("orders", tolerance_ms=100)
    orders.next_id()
    with (
        caplog.at_level(logging.WARNING, logger="sa_redis_ids"),
        shift_time(orders, -10_000),
        pytest.raises(ClockMovedBackwards) as caught,
    ):
        orders.next_id()
    (record,) = _records(caplog, "sa_redis_ids.clock", logging.WARNING)
    message = record.getMessage()
    assert "namespace orders" in message
    assert f"{caught.value.behind_ms} ms behind" in message
    assert caught.value.behind_ms >= 9_000


def test_a_pool_past_its_warning_fill_is_logged_by_maintenance(
    real_redis: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    ids = RedisIds(real_redis, prefix=f"log{uuid.uuid4().hex[:8]}")
    codes = ids.short_id("codes", pool_size=100, offset=100)
    codes.next_ids(90)
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids.maintenance"):
        ids.maintenance(fill_warning=0.8).run_once()
    (record,) = _records(caplog, "sa_redis_ids.maintenance", logging.WARNING)
    assert "codes" in record.getMessage() and "90.0% full" in record.getMessage()
