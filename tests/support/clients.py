"""Clients for tests: one that proves nothing reaches Redis, and asyncio ones on a backend."""

from __future__ import annotations

from typing import Any, Protocol

import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from sa_redis_ids.asyncio import AsyncRedisIds
from tests.support.services import REDIS_URL


class Untouchable(redis.Redis):
    """A redis-py client (with a socket timeout, so no warning) that fails the test if any
    command is sent through it."""

    def __init__(self) -> None:
        super().__init__(host="127.0.0.1", port=1, socket_timeout=1, socket_connect_timeout=1)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        raise AssertionError(f"Redis was touched: {args[:1]}")


class BackendLike(Protocol):
    """What :func:`async_ids_for` needs of a test backend (``tests.conftest.Backend``)."""

    name: str
    prefix: str
    target: dict[str, Any] | None


def async_ids_for(backend: BackendLike) -> AsyncRedisIds:
    """An ``AsyncRedisIds`` on the same server (and key prefix) as ``backend``."""
    if backend.name == "fake":
        return AsyncRedisIds.embedded(prefix=backend.prefix)
    if backend.name == "redis":
        return AsyncRedisIds.from_url(REDIS_URL, prefix=backend.prefix)
    assert backend.target is not None
    return AsyncRedisIds(
        AsyncRedisCluster.from_url(backend.target["cluster"], socket_timeout=5),
        prefix=backend.prefix,
    )
