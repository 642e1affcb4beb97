"""A node's capabilities: what its server allows is probed once, and a lost guarantee is said aloud.

Each test starts its own ``redis-server`` (or ``valkey-server``) the way managed services and
cautious operators run it: ``INFO`` or ``CONFIG`` renamed away, or an ACL user without ``+info``.
A missing ``INFO`` costs the failover check (a warning naming it, a metric, ``strict=True``
refuses); a renamed ``CONFIG`` costs nothing, as ``INFO memory`` tells the eviction policy; with
neither, the eviction check is lost and said so. The backend table shows the probe finds nothing
missing on the servers the suite runs on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Callable, Iterator

import pytest
import redis

from sa_redis_ids import ConfigError, RedisIds, RedisUnavailable
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.cli import main
from sa_redis_ids.redis.capabilities import EVICTION_CHECK, FAILOVER_DETECTION, probe
from tests.conftest import Backend
from tests.support.servers import HOST, RedisServer
from tests.support.services import valkey_server_binary
from tests.test_busy_nodes import busy

Start = Callable[..., RedisServer]

NO_INFO = ["--rename-command", "INFO", ""]
NO_CONFIG = ["--rename-command", "CONFIG", ""]
LEAST_PRIVILEGE = "~* +@read +@write +@scripting +@transaction -@dangerous"
"""The ACL a cautious operator grants an application first (``INFO`` is in ``@dangerous``)."""


@pytest.fixture
def start() -> Iterator[Start]:
    """Start a server with extra options (``binary=`` for Valkey); stopped by process id."""
    servers: list[RedisServer] = []

    def run(*args: str, binary: str = "redis-server") -> RedisServer:
        server = RedisServer(binary=binary, args=list(args))
        servers.append(server)
        return server.start()

    yield run
    for server in servers:
        server.stop()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def with_user(server: RedisServer, rules: str) -> str:
    """A URL of a new ACL user of ``server`` with ``rules``."""
    server.client().execute_command("ACL", "SETUSER", "ids", "on", ">secret", *rules.split())
    return f"redis://ids:secret@{HOST}:{server.port}/0"


@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_info_renamed_warns_once_naming_it_and_what_it_costs(
    start: Start, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    binary = "redis-server" if kind == "redis" else valkey_server_binary()
    server = start(*NO_INFO, binary=binary)
    ids = RedisIds.from_url(server.url)
    users = ids.sequence("users")
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        assert users.next_ids(3) == [1, 2, 3]
        assert users.next_id() == 4
        ids.snowflake("orders").next_id()  # another namespace on the node: no second warning
    (warning,) = warnings_of(caplog)
    assert "INFO replication" in warning and "failover" in warning and "+info" in warning
    assert f"{HOST}:{server.port}" in warning
    found = ids.nodes.nodes[0].capabilities
    assert found is not None and not found.identity and found.flavour == kind
    assert [lost.guarantee for lost in found.lost] == [FAILOVER_DETECTION]


def test_strict_refuses_a_node_without_info_before_writing_anything(start: Start) -> None:
    server = start(*NO_INFO)
    users = RedisIds.from_url(server.url, strict=True).sequence("users")
    for _ in range(2):  # refused on every call, not only the first
        with pytest.raises(ConfigError, match=r"INFO replication.*\+info") as caught:
            users.next_id()
        assert caught.value.namespace == "users"
    assert server.client().dbsize() == 0


def test_an_acl_user_without_info_is_warned_and_strict_refuses(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    url = with_user(start(), LEAST_PRIVILEGE)
    ids = RedisIds.from_url(url)
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        assert ids.sequence("users").next_ids(2) == [1, 2]
    identity, eviction = warnings_of(caplog)  # INFO is in @dangerous, CONFIG too
    assert "INFO replication" in identity and "INFO memory" in eviction
    found = ids.nodes.nodes[0].capabilities
    assert found is not None
    assert "permission" in found.refused["INFO replication"]
    assert not found.script_time  # TIME is not in this grant: only sequences can run
    with pytest.raises(ConfigError, match="INFO replication"):
        RedisIds.from_url(url, strict=True).sequence("users").next_id()
    granted = with_user(start(), LEAST_PRIVILEGE + " +info +time")
    strict = RedisIds.from_url(granted, strict=True)
    assert strict.sequence("users").next_id() == 1
    assert strict.snowflake("orders").next_id() > 0


def test_volatile_lru_behind_a_renamed_config_is_read_from_info_memory(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    server = start(*NO_CONFIG, "--maxmemory-policy", "volatile-lru")
    ids = RedisIds.from_url(server.url)
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        assert ids.sequence("users").next_ids(2) == [1, 2]
    (warning,) = warnings_of(caplog)
    assert "volatile-lru" in warning and "noeviction" in warning
    with pytest.raises(ConfigError, match="volatile-lru"):
        RedisIds.from_url(server.url, strict=True).sequence("users").next_id()


def test_a_config_denied_by_acl_is_read_from_info_memory(start: Start) -> None:
    server = start("--maxmemory-policy", "allkeys-lru")
    url = with_user(server, "~* +@all -config")
    with pytest.raises(ConfigError, match="allkeys-lru"):
        RedisIds.from_url(url, strict=True).sequence("users").next_id()


def test_the_sequence_transaction_fast_path_does_not_need_config(start: Start) -> None:
    server = start(*NO_CONFIG)
    ids = RedisIds.from_url(server.url, strict=True)
    users = ids.sequence("users")
    assert [users.next_id() for _ in range(20)] == list(range(1, 21))
    assert ids.nodes.nodes[0].transactions
    stats = server.client().info("commandstats")
    assert stats["cmdstat_exec"]["calls"] >= 10, "the sound calls ran as transactions"


def test_without_config_and_info_the_eviction_check_is_lost_aloud(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    server = start(*NO_CONFIG, *NO_INFO)
    ids = RedisIds.from_url(server.url)
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        assert ids.sequence("users").next_ids(2) == [1, 2]
    warnings = warnings_of(caplog)
    assert len(warnings) == 2
    assert any("CONFIG GET maxmemory-policy or INFO memory" in w for w in warnings)
    node = ids.nodes.nodes[0]
    assert node.capabilities is not None
    assert {lost.guarantee for lost in node.capabilities.lost} == {
        FAILOVER_DETECTION,
        EVICTION_CHECK,
    }
    assert not node.transactions, "an unknown policy may evict: no transaction"
    with pytest.raises(ConfigError, match=r"INFO replication.*and.*INFO memory"):
        RedisIds.from_url(server.url, strict=True).sequence("users").next_id()


def test_replicas_without_wait_are_refused_strict_or_not(start: Start) -> None:
    url = with_user(start(), "~* +@all -wait")
    with pytest.raises(ConfigError, match=r"replicas=1 needs WAIT.*\+wait"):
        RedisIds.from_url(url, replicas=1).sequence("users").next_id()


def test_the_asyncio_front_end_probes_too(start: Start, caplog: pytest.LogCaptureFixture) -> None:
    server = start(*NO_INFO)

    async def draw(strict: bool) -> list[int]:
        ids = AsyncRedisIds.from_url(server.url, strict=strict)
        try:
            return await ids.sequence("users").next_ids(2)
        finally:
            await ids.aclose()

    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        assert asyncio.run(draw(False)) == [1, 2]
    (warning,) = warnings_of(caplog)
    assert "INFO replication" in warning
    with pytest.raises(ConfigError, match="INFO replication"):
        asyncio.run(draw(True))


def test_every_backend_allows_what_the_library_relies_on(backend: Backend) -> None:
    ids = backend.ids(strict=True)
    ids.sequence(f"n{uuid.uuid4().hex[:6]}").next_id()
    found = ids.nodes.nodes[0].capabilities
    assert found is not None and found.lost == ()
    assert found.flavour == {"fake": "embedded", "valkey": "valkey"}.get(backend.name, "redis")
    assert found.script_time
    if backend.name != "fake":
        assert found.wait and found.config_get and found.info_memory and found.version
    if backend.name == "valkey":
        assert found.waitaof


def test_status_shows_what_each_server_lacks_and_the_policy_from_info_memory(
    start: Start, capsys: pytest.CaptureFixture[str]
) -> None:
    blind = start(*NO_INFO)
    hidden = start(*NO_CONFIG, "--maxmemory-policy", "volatile-lru")
    assert main(["status", "--redis-url", blind.url, "--redis-url", hidden.url, "--json"]) == 0
    first, second = (node["servers"][0] for node in json.loads(capsys.readouterr().out)["nodes"])
    assert first["capabilities"]["identity"] is False
    assert first["capabilities"]["lost"] == [FAILOVER_DETECTION]
    assert first["lost"][0].startswith("failover_detection: without INFO replication")
    assert first["server"].split()[0] == "redis"
    assert second["maxmemory_policy"] == "volatile-lru" and second["lost"] == []
    assert second["capabilities"]["config_get"] is False
    assert main(["status", "--redis-url", blind.url]) == 0
    assert "LOST failover_detection: without INFO replication" in capsys.readouterr().out


def test_a_lost_guarantee_is_a_metric_of_its_node(start: Start) -> None:
    prometheus_client = pytest.importorskip("prometheus_client")
    from sa_redis_ids.metrics import enable_prometheus

    blind, seeing = start(*NO_INFO), start()
    ids = RedisIds.from_urls([blind.url, seeing.url])
    registry = prometheus_client.CollectorRegistry()
    enable_prometheus(ids, registry=registry)
    users = ids.sequence("users")
    users.next_id()
    users.next_id()  # each node took a turn
    assert all(node.capabilities is not None for node in ids.nodes.nodes)
    scraped = prometheus_client.generate_latest(registry).decode().splitlines()
    lost = [line for line in scraped if line.startswith("sa_redis_ids_guarantee_lost{")]
    name = ids.nodes.nodes[0].name
    assert lost == [
        f'sa_redis_ids_guarantee_lost{{guarantee="{FAILOVER_DETECTION}",redis_node="{name}"}} 1.0'
    ]


@pytest.mark.parametrize("protocol", [2, 3])
def test_the_probe_reads_resp2_and_resp3_replies_alike(start: Start, protocol: int) -> None:
    server = start(*NO_CONFIG, "--maxmemory-policy", "allkeys-lru")
    client = redis.Redis(host=HOST, port=server.port, protocol=protocol, decode_responses=True)
    try:
        found = probe(client, "node")
    finally:
        client.close()
    assert found.flavour == "redis" and found.version is not None and found.version >= (6, 2)
    assert found.identity and found.info_memory and not found.config_get
    assert found.eviction_policies == {"node": "allkeys-lru"} and found.aof is False
    assert found.wait and found.script_time
    assert "CONFIG GET maxmemory-policy" in found.refused


def test_a_node_busy_at_its_first_use_is_unavailable_and_probed_again(start: Start) -> None:
    server = start("--busy-reply-threshold", "10")
    users = RedisIds.from_url(server.url, strict=True).sequence("users")
    with busy(server), pytest.raises(RedisUnavailable, match="BUSY"):
        users.next_id()  # BUSY is no missing command: not refused, not a lost guarantee
    assert users.next_id() == 1
