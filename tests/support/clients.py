"""Clients for tests that must prove nothing reaches Redis."""

from __future__ import annotations

from typing import Any

import fakeredis
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from sa_redis_ids.asyncio import AsyncRedisIds


class Untouchable(redis.Redis):
    """A redis-py client (with a socket timeout, so no warning) that fails the test if any
    command is sent through it."""

    def __init__(self) -> None:
        super().__init__(host="127.0.0.1", port=1, socket_timeout=1, socket_connect_timeout=1)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        raise AssertionError(f"Redis was touched: {args[:1]}")


class UntouchableAsync(redis.asyncio.Redis):
    """:class:`Untouchable` for the asyncio front end."""

    def __init__(self) -> None:
        super().__init__(host="127.0.0.1", port=1, socket_timeout=1, socket_connect_timeout=1)

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        raise AssertionError(f"Redis was touched: {args[:1]}")


def async_ids_on(backend: Any) -> Any:
    """An ``AsyncRedisIds`` on the very data (and key prefix) of a test's ``backend``; make it
    inside the event loop that uses it."""
    if backend.name == "fake":
        server = backend.client.connection_pool.connection_kwargs["server"]
        return AsyncRedisIds(fakeredis.FakeAsyncRedis(server=server), prefix=backend.prefix)
    if backend.name in ("redis", "valkey"):
        return AsyncRedisIds.from_url(backend.url, prefix=backend.prefix)
    return AsyncRedisIds(
        AsyncRedisCluster.from_url(backend.target["cluster"], socket_timeout=5),
        prefix=backend.prefix,
    )
