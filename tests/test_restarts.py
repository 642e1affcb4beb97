"""A server that restarts with its data (AOF or RDB) is not a loss: nothing healed, logged or skipped.

A restart gives the server a new replication ID, as a promoted replica has one; the scripts tell
the two apart from ``INFO replication`` (see ``node_identity_since`` in ``common.lua``), so a
clean restart costs nothing while a failover to a lagging replica still heals
(``tests/test_faults.py::test_a_failover_to_a_lagging_replica_is_caught_by_a_process_that_saw_none_of_the_lost_writes``).
Every test starts its own ``redis-server`` processes and stops them by process id.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sa_redis_ids import RedisIds, RedisUnavailable
from tests.support.servers import HOST, RedisServer
from tests.support.services import valkey_server_binary
from tests.support.topologies import ReplicatedPair

PERSISTENCE = {
    "aof": ["--appendonly", "yes", "--appendfsync", "always"],
    "rdb": ["--save", "3600 1", "--dbfilename", "master.rdb"],
}
"""Server options: every write in the append-only file, or a snapshot saved at shutdown."""

STRATEGIES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("sequence", {}),
    ("date_prefixed", {}),
    ("daily_code", {"digits": 8, "tz": "UTC"}),
    ("snowflake", {}),
    ("short_id", {"pool_size": 1_000_000, "offset": 1_000_000}),
)


@pytest.fixture
def started() -> Iterator[Callable[[RedisServer], RedisServer]]:
    """Start a server and stop it (by process id) after the test."""
    servers: list[RedisServer] = []

    def start(server: RedisServer) -> RedisServer:
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


def first_after_restart(call: Callable[[], Any]) -> Any:
    """The first value after a restart: the pooled connection died with the old process."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return call()
        except RedisUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def binary_of(kind: str) -> str:
    return "redis-server" if kind == "redis" else valkey_server_binary()


@pytest.mark.parametrize("kind", ["redis", "valkey"])
@pytest.mark.parametrize("replica", [False, True], ids=["alone", "with a replica"])
@pytest.mark.parametrize("persistence", sorted(PERSISTENCE))
def test_a_restart_that_kept_its_data_heals_nothing_logs_nothing_skips_nothing(
    started: Callable[[RedisServer], RedisServer],
    caplog: pytest.LogCaptureFixture,
    persistence: str,
    replica: bool,
    kind: str,
) -> None:
    binary = binary_of(kind)
    master = started(RedisServer(binary=binary, args=PERSISTENCE[persistence]))
    if replica:  # a restart from RDB then keeps the old replication ID as its previous one
        started(RedisServer(binary=binary, args=["--replicaof", HOST, str(master.port)]))
        deadline = time.monotonic() + 20
        while master.client().info("replication")["connected_slaves"] < 1:
            assert time.monotonic() < deadline, "the replica did not connect"
            time.sleep(0.05)
    prefix = f"r{uuid.uuid4().hex[:10]}"
    ids = RedisIds.from_url(master.url, prefix=prefix)
    generators = {name: getattr(ids, name)(name, **options) for name, options in STRATEGIES}
    last = {name: generator.next_ids(5)[-1] for name, generator in generators.items()}
    before = master.client().info("replication")["master_replid"]

    master.stop()  # SIGTERM: a clean shutdown (the RDB is saved, the AOF is complete)
    master.start()
    client = master.client()
    assert client.info("replication")["master_replid"] != before
    # As a second later: the cached identity is gone, every script reads INFO replication.
    for key in client.scan_iter(match=f"{prefix}:*:identity"):
        client.delete(key)

    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        after = {
            name: first_after_restart(generator.next_id) for name, generator in generators.items()
        }
        seconds, micros = client.time()  # one reading: two could straddle a second
        redis_ms = int(seconds) * 1000 + int(micros) // 1000

    assert [record.getMessage() for record in caplog.records] == []
    assert {name: generator.rewinds for name, generator in generators.items()} == dict.fromkeys(
        generators, 0
    )
    assert after["sequence"] == last["sequence"] + 1
    for name in ("date_prefixed", "daily_code"):
        was, now = generators[name].parse(last[name]), generators[name].parse(after[name])
        assert now.counter == (was.counter + 1 if now.day == was.day else 1), name
    snowflake = generators["snowflake"]
    assert after["snowflake"] > last["snowflake"]
    assert snowflake.parse(after["snowflake"]).ms <= redis_ms  # not stamped headroom ahead
    assert after["short_id"] != last["short_id"]


def test_the_cached_identity_never_reaches_a_replica_so_a_promoted_one_reads_its_own() -> None:
    pair = ReplicatedPair(replicas=1).start()
    try:
        prefix = f"r{uuid.uuid4().hex[:10]}"
        RedisIds.from_url(pair.master.url, prefix=prefix).sequence("orders").next_ids(3)
        master, replica = pair.master.client(), pair.replicas[0].client()
        assert master.wait(1, 5000) == 1
        assert master.exists(f"{prefix}:{{orders}}:identity")
        assert replica.exists(f"{prefix}:{{orders}}:seq")  # the counter is replicated …
        assert not replica.exists(f"{prefix}:{{orders}}:identity")  # … the identity is not
    finally:
        pair.stop()
