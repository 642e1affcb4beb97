"""A Redlock's majority is of independent servers: one server listed under several names (a URL
with and without ``/0``, ``localhost`` for ``127.0.0.1``, another database of it, a second client of
the same embedded server) is refused with :class:`ConfigError` before anything is locked, instead
of granting "a majority" of one server. Servers are told apart by the ``run_id`` of ``INFO server``,
or by their resolved address where ``INFO`` is refused.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis
from redis.cluster import RedisCluster

from sa_redis_ids import ConfigError, RedisIds, Redlock
from sa_redis_ids.asyncio import AsyncRedisIds
from tests.conftest import Backend
from tests.support.servers import RedisServer
from tests.support.services import REDIS_URL

NAME = "reports"


def _alias(backend: Backend) -> Any:
    """A second client of ``backend``'s server, reached under another name where there is one."""
    if backend.name == "fake":
        server = backend.client.connection_pool.connection_kwargs["server"]
        return fakeredis.FakeRedis(server=server)
    if backend.name != "cluster":  # one server: redis, valkey
        kwargs = backend.client.connection_pool.connection_kwargs
        host = "localhost" if kwargs["host"] == "127.0.0.1" else kwargs["host"]
        return redis.Redis(host=host, port=kwargs["port"], db=1, socket_timeout=5)
    url = backend.target["cluster"] if backend.target else ""
    return RedisCluster.from_url(url, socket_timeout=5)


def test_one_server_under_two_names_is_refused_on_every_backend(backend: Backend) -> None:
    alias = _alias(backend)
    lock = Redlock([backend.client, alias], NAME, prefix=backend.prefix, timeout=0)
    with pytest.raises(ConfigError, match=r"same Redis server .*independent servers"):
        lock.acquire()
    assert not lock.held
    assert backend.keys() == [], "nothing was locked"
    alias.close()


def _aliases(url: str) -> list[str]:
    """``url``, the same without its ``/0``, and the same with ``localhost`` for ``127.0.0.1``."""
    assert url.endswith("/0") and "127.0.0.1" in url, url
    return [url, url.removesuffix("/0"), url.replace("127.0.0.1", "localhost")]


def test_a_lock_over_one_server_listed_three_times_is_refused(real_redis: redis.Redis) -> None:
    ids = RedisIds.from_urls(_aliases(REDIS_URL), prefix="aliases")
    with pytest.raises(ConfigError, match="are the same Redis server"):
        ids.lock(NAME, timeout=0).acquire()
    assert list(real_redis.scan_iter(match="aliases:*")) == []
    ids.close()


def test_the_asyncio_front_end_refuses_it_too(real_redis: redis.Redis) -> None:
    async def run() -> None:
        ids = AsyncRedisIds.from_urls(_aliases(REDIS_URL), prefix="aliases")
        try:
            with pytest.raises(ConfigError, match="are the same Redis server"):
                async with ids.lock(NAME, timeout=0):
                    pass
        finally:
            await ids.aclose()

    asyncio.run(run())
    assert list(real_redis.scan_iter(match="aliases:*")) == []


def test_where_info_is_refused_the_resolved_address_tells(
    redis_servers: Callable[[int], list[RedisServer]],
) -> None:
    (server,) = redis_servers(1)
    server.stop()
    server.args = ["--rename-command", "INFO", ""]
    server.start()
    clients = [
        redis.Redis(host=host, port=server.port, socket_timeout=5)
        for host in ("127.0.0.1", "localhost")
    ]
    with pytest.raises(ConfigError, match=rf"address 127\.0\.0\.1:{server.port}"):
        Redlock(clients, NAME, timeout=0).acquire()


def test_independent_servers_still_lock_and_release(
    redis_servers: Callable[[int], list[RedisServer]],
) -> None:
    servers = redis_servers(3)
    clients = [server.client() for server in servers]
    with Redlock(clients, NAME, timeout=1) as lease:
        assert lease.fencing_token == 1
        assert all(client.exists(lease.key) for client in clients)
    embedded = [fakeredis.FakeRedis(server=fakeredis.FakeServer()) for _ in range(3)]
    with Redlock(embedded, NAME, timeout=1) as lease:
        assert lease.held
