"""The eviction check: a ``maxmemory-policy`` that can evict the library's keys is reported once."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import pytest
from redis.cluster import RedisCluster

from sa_redis_ids import ConfigError, RedisIds
from tests.conftest import Backend
from tests.support.servers import RedisServer

StartServers = Callable[[int], list[RedisServer]]


def _server(redis_servers: StartServers, policy: str) -> RedisServer:
    (server,) = redis_servers(1)
    server.client().config_set("maxmemory-policy", policy)
    return server


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
def test_an_evicting_policy_logs_one_warning_naming_node_and_policy(
    redis_servers: StartServers, caplog: pytest.LogCaptureFixture, policy: str
) -> None:
    server = _server(redis_servers, policy)
    seq = RedisIds.from_url(server.url).sequence("users")
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        assert seq.next_ids(2) == [1, 2]
        assert seq.next_id() == 3
    warnings = [r for r in caplog.records if r.name == "sa_redis_ids"]
    assert len(warnings) == 1
    assert policy in warnings[0].getMessage()
    assert f"127.0.0.1:{server.port}" in warnings[0].getMessage()


def test_strict_refuses_an_evicting_policy_before_issuing_anything(
    redis_servers: StartServers,
) -> None:
    server = _server(redis_servers, "allkeys-lru")
    seq = RedisIds.from_url(server.url, strict=True).sequence("users")
    for _ in range(2):  # refused on every call, not only the first
        with pytest.raises(ConfigError, match="allkeys-lru") as caught:
            seq.next_id()
        assert caught.value.namespace == "users"
    assert server.client().exists(seq.counter_key) == 0


def test_strict_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="strict"):
        RedisIds.embedded(strict="yes")  # type: ignore[arg-type]


def test_noeviction_is_silent(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    if backend.name == "redis":
        policy = backend.client.config_get("maxmemory-policy")["maxmemory-policy"]
        if policy != "noeviction":
            pytest.skip(f"the shared Redis runs with maxmemory-policy {policy}")
    with caplog.at_level(logging.DEBUG, logger="sa_redis_ids"):
        assert backend.ids(strict=True).sequence("users").next_ids(2) == [1, 2]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_refused_config_get_reads_the_policy_from_info_memory(
    redis_servers: StartServers,
) -> None:
    server = _server(redis_servers, "allkeys-lru")
    server.client().acl_setuser(
        "ids", enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all", "-config"]
    )
    url = f"redis://ids:secret@127.0.0.1:{server.port}/0"
    with pytest.raises(ConfigError, match="allkeys-lru"):
        RedisIds.from_url(url, strict=True).sequence("users").next_id()


def test_every_cluster_master_is_checked(
    cluster_client: RedisCluster, caplog: pytest.LogCaptureFixture
) -> None:
    master = cluster_client.get_primaries()[1]
    connection = cluster_client.get_redis_connection(master)
    connection.config_set("maxmemory-policy", "allkeys-random")
    seq = RedisIds(cluster_client, prefix=f"ev{uuid.uuid4().hex[:8]}").sequence("users")
    try:
        with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
            seq.next_id()
        (record,) = [r for r in caplog.records if r.name == "sa_redis_ids"]
        assert f"{master.name} has maxmemory-policy allkeys-random" in record.getMessage()
    finally:
        connection.config_set("maxmemory-policy", "noeviction")
        cluster_client.delete(seq.counter_key, seq.claim_key)
