"""Valkey: redis-py clients of a Valkey server work (the ``valkey`` backend of the table runs the
strategy, ORM and lock tests, ``servers_of_each_kind`` the basic fault tests); client objects of
the ``valkey`` package (valkey-py) are refused in words, before anything reaches the server."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis
import valkey
import valkey.asyncio
import valkey.cluster

from sa_redis_ids import ConfigError, RedisIds, RedisUnavailable
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.lock import Redlock
from tests.support.servers import RedisServer


def _valkey_clients(port: int) -> list[Any]:
    return [
        valkey.Valkey(port=port, socket_timeout=1),
        valkey.StrictValkey(port=port, socket_timeout=1),
        valkey.asyncio.Valkey(port=port, socket_timeout=1),
    ]


@pytest.mark.parametrize("index", range(3), ids=["Valkey", "StrictValkey", "asyncio.Valkey"])
def test_a_valkey_py_client_is_refused_by_both_front_ends_and_the_lock(
    valkey_process: RedisServer, index: int
) -> None:
    client = _valkey_clients(valkey_process.port)[index]
    for build in (RedisIds, AsyncRedisIds, lambda c: Redlock(c, "report")):
        with pytest.raises(ConfigError, match="redis-py") as caught:
            build(client)
        message = str(caught.value)
        assert "client" in message and "valkey" in message and "from_url" in message


def test_a_valkey_py_cluster_client_is_refused() -> None:
    # a ValkeyCluster connects at construction: build one without a server, as a user's would be
    client = valkey.cluster.ValkeyCluster.__new__(valkey.cluster.ValkeyCluster)
    with pytest.raises(ConfigError, match="redis-py"):
        RedisIds(client)
    with pytest.raises(ConfigError, match="redis-py"):
        RedisIds([redis.Redis(socket_timeout=1), client])


def test_why_valkey_py_is_refused_its_errors_are_not_redis_pys() -> None:
    """The failover recognises a dead node by redis-py's exception classes; valkey-py's own ones
    are not among them, so a down node would reach callers as a raw valkey error."""
    assert not issubclass(valkey.exceptions.ConnectionError, redis.exceptions.ConnectionError)
    assert not issubclass(valkey.exceptions.TimeoutError, redis.exceptions.TimeoutError)


def test_redis_py_on_a_valkey_server_fails_over_like_on_redis(valkey_process: RedisServer) -> None:
    """Two nodes, one of them a Valkey server that is down: calls go to the other, and with both
    down the error is RedisUnavailable."""
    down = RedisServer(binary=valkey_process.binary)  # never started: connection refused
    prefix = f"vk{uuid.uuid4().hex[:10]}"
    ids = RedisIds.from_urls(
        [down.url, valkey_process.url], prefix=prefix, socket_timeout=1, connect_timeout=1
    )
    try:
        assert len({ids.sequence("failover").next_id() for _ in range(4)}) == 4
        assert ids.nodes.nodes[0].down_until > 0, "the down node was marked down"
        alone = RedisIds.from_url(down.url, socket_timeout=1, connect_timeout=1)
        with pytest.raises(RedisUnavailable):
            alone.sequence("failover").next_id()
    finally:
        client = valkey_process.client()
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)


def test_the_valkey_backend_is_a_valkey_server(valkey_redis_client: redis.Redis) -> None:
    """The table's ``valkey`` entry really runs Valkey (its INFO names the server)."""
    info = valkey_redis_client.info("server")
    assert "valkey_version" in info or info.get("server_name") == "valkey", info


def test_a_valkey_scheme_url_is_refused_in_words() -> None:
    """valkey-py's ``valkey://`` spelling: redis-py does not read it (the docs say redis://)."""
    with pytest.raises(ConfigError, match="redis://"):
        RedisIds.from_url("valkey://127.0.0.1:6379/0")
