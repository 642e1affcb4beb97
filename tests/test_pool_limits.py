"""A connection pool's limit is the process's own, not a node failure.

``RedisIds.from_url(..., max_connections=N)`` builds a blocking pool: a caller that finds every
connection in use waits for one (within the socket timeout) instead of failing, so 16 threads on 4
connections all get their values. An asyncio client without a limit has none (300 tasks at once
just work). A client built by hand with a plain bounded pool raises :class:`ConnectionPoolFull`
when its pool is empty. In no case is the node marked down or logged down and up.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from sa_redis_ids import ConnectionPoolFull, RedisIds, RedisUnavailable
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.redis.connect import fail_fast_options
from tests.support.servers import RedisServer
from tests.support.services import REDIS_URL

PATIENT = {"socket_timeout": 5.0, "connect_timeout": 5.0}
"""Timeouts with room for a loaded machine: a blocking pool waits up to the socket timeout, and
300 tasks open their connections at once."""


@pytest.fixture
def prefix(real_redis: redis.Redis) -> Iterator[str]:
    found = f"pl{uuid.uuid4().hex[:12]}"
    yield found
    for key in list(real_redis.scan_iter(match=f"{found}:*")):
        real_redis.delete(key)


@pytest.fixture
def node_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="sa_redis_ids.nodes")
    return caplog


def _never_down(ids: Any, log: pytest.LogCaptureFixture) -> None:
    assert [node.down_until for node in ids.nodes.nodes] == [0.0] * len(ids.nodes.nodes)
    assert [r.getMessage() for r in log.records if r.name == "sa_redis_ids.nodes"] == []


def _threads(make: Any, threads: int, calls: int) -> tuple[list[Any], list[BaseException]]:
    values: list[Any] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def work() -> None:
        for _ in range(calls):
            try:
                value = make()
            except Exception as exc:
                with lock:
                    failures.append(exc)
            else:
                with lock:
                    values.append(value)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return values, failures


@pytest.mark.parametrize("factory", ["sequence", "snowflake", "date_prefixed"])
def test_sixteen_threads_share_four_connections_without_a_failure(
    prefix: str, node_log: pytest.LogCaptureFixture, factory: str
) -> None:
    ids = RedisIds.from_url(REDIS_URL, prefix=prefix, max_connections=4, **PATIENT)
    generator = getattr(ids, factory)("pooled")
    values, failures = _threads(generator.next_id, threads=16, calls=100)
    assert failures == []
    assert len(values) == len(set(values)) == 1600
    _never_down(ids, node_log)
    ids.close()


def test_two_nodes_with_four_connections_each_never_mark_each_other_down(
    redis_servers: Callable[[int], list[RedisServer]], node_log: pytest.LogCaptureFixture
) -> None:
    first, second = redis_servers(2)
    ids = RedisIds.from_urls([first.url, second.url], max_connections=4, **PATIENT)
    values, failures = _threads(ids.sequence("pooled").next_id, threads=16, calls=50)
    assert failures == []
    assert len(values) == len(set(values)) == 800
    _never_down(ids, node_log)
    ids.close()


@pytest.mark.parametrize("max_connections", [None, 4])
def test_three_hundred_asyncio_tasks_on_one_client_never_fail(
    prefix: str, node_log: pytest.LogCaptureFixture, max_connections: int | None
) -> None:
    options: dict[str, Any] = dict(PATIENT)
    if max_connections is not None:
        options["max_connections"] = max_connections

    async def run() -> tuple[list[int], list[BaseException]]:
        ids = AsyncRedisIds.from_url(REDIS_URL, prefix=prefix, **options)
        users = ids.sequence("pooled")
        outcomes = await asyncio.gather(
            *(users.next_id() for _ in range(300)), return_exceptions=True
        )
        outcomes += await asyncio.gather(
            *(users.next_id() for _ in range(300)), return_exceptions=True
        )
        _never_down(ids, node_log)
        await ids.aclose()
        values = [o for o in outcomes if isinstance(o, int)]
        return values, [o for o in outcomes if isinstance(o, BaseException)]

    values, failures = asyncio.run(run())
    assert failures == []
    assert len(values) == len(set(values)) == 600


@pytest.mark.parametrize("kind", ["plain", "blocking"])
def test_a_pool_that_is_used_up_raises_connection_pool_full_and_the_node_stays_up(
    prefix: str, node_log: pytest.LogCaptureFixture, kind: str
) -> None:
    """A client built by hand: a plain pool refuses at once, a blocking one after its wait."""
    if kind == "plain":
        pool: Any = redis.ConnectionPool.from_url(
            REDIS_URL, max_connections=2, **fail_fast_options()
        )
    else:
        pool = redis.BlockingConnectionPool.from_url(
            REDIS_URL, max_connections=2, timeout=0.05, **fail_fast_options()
        )
    ids = RedisIds(redis.Redis(connection_pool=pool), prefix=prefix)
    users = ids.sequence("pooled")
    assert users.next_id() == 1
    held = []
    try:
        for _ in range(2):  # what the pool has left (the first call's thread may keep one)
            held.append(pool.get_connection())
    except redis.ConnectionError:
        pass
    try:  # from another thread: this one's fast lane may keep a connection of its own
        (failure,) = _threads(users.next_id, threads=1, calls=1)[1]
        assert isinstance(failure, ConnectionPoolFull) and isinstance(failure, RedisUnavailable)
        assert "in use" in str(failure)
        _never_down(ids, node_log)
    finally:
        for connection in held:
            pool.release(connection)
    assert users.next_id() == 2
    _never_down(ids, node_log)
    ids.close()
