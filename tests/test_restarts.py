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
from tests.support.model.proxy import Proxy
from tests.support.servers import HOST, RedisServer
from tests.support.services import valkey_server_binary
from tests.support.topologies import ReplicatedPair, replicas_in_sync, wait_until

PERSISTENCE = {
    "aof": ["--appendonly", "yes", "--appendfsync", "always"],
    "rdb": ["--save", "3600 1", "--dbfilename", "master.rdb"],
}
"""Server options: every write in the append-only file, or a snapshot saved at shutdown."""
BACKLOG = 16 * 1024
"""The smallest replication backlog a server accepts, in bytes."""
NO_REPLID = "0" * 40
"""``master_replid2`` of a server that has no previous replication ID."""

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
@pytest.mark.parametrize(
    ("persistence", "replica", "busy"),
    [
        *(
            pytest.param(persistence, replica, False, id=f"{persistence}-{where}")
            for persistence in sorted(PERSISTENCE)
            for replica, where in ((False, "alone"), (True, "with a replica"))
        ),
        # Only a restart from RDB with a replica keeps a previous ID and a backlog to look at.
        pytest.param("rdb", True, True, id="rdb-with a replica-busy"),
    ],
)
def test_a_restart_that_kept_its_data_heals_nothing_logs_nothing_skips_nothing(
    started: Callable[[RedisServer], RedisServer],
    caplog: pytest.LogCaptureFixture,
    persistence: str,
    replica: bool,
    busy: bool,
    kind: str,
) -> None:
    """``busy``: other clients write more than the replication backlog holds after the restart
    and before the processes' next calls, so a backlog that started where the old history ended
    no longer starts there (a busy server fills the default 1 MB within seconds)."""
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
    if busy:  # written until the backlog lets go of its start (a replica still reading holds it)
        client.config_set("repl-backlog-size", str(BACKLOG))
        deadline = time.monotonic() + 20
        while True:
            client.set(f"{prefix}-other", b"x" * BACKLOG)
            state = client.info("replication")
            assert state["master_replid2"] != NO_REPLID, state  # the RDB's ID, kept as previous
            if state["repl_backlog_first_byte_offset"] > state["second_repl_offset"]:
                break
            assert time.monotonic() < deadline, f"the backlog kept its start: {state}"
            time.sleep(0.01)
        client.delete(f"{prefix}-other")
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


@pytest.mark.parametrize("kind", ["redis", "valkey"])
def test_a_replica_promoted_right_after_its_full_resync_is_a_promotion_not_a_restart(
    started: Callable[[RedisServer], RedisServer], kind: str
) -> None:
    """A replica whose link broke right after its full resynchronisation has an empty backlog
    that starts where its previous ID's history ended, as a server restarted from RDB has. It
    missed what its master issued since; promoted, every process must take it for a promotion
    and heal, one that was idle since before the resynchronisation included."""
    binary = binary_of(kind)
    master = started(RedisServer(binary=binary))
    proxy = Proxy(master.port)  # the address the processes know, moved to the replica below
    try:
        prefix = f"r{uuid.uuid4().hex[:10]}"

        def process() -> dict[str, Any]:
            ids = RedisIds.from_url(proxy.url, prefix=prefix, retry_after=0.1)
            return {name: getattr(ids, name)(name, **options) for name, options in STRATEGIES}

        idle, busy = process(), process()
        for name in idle:
            idle[name].next_ids(2)
            busy[name].next_ids(5)
        replica = started(RedisServer(binary=binary, args=["--replicaof", HOST, str(master.port)]))
        wait_until(lambda: replicas_in_sync(master, 1), "the replica in sync")
        replica.client().replicaof("NO", "ONE")  # the link breaks: it misses what follows
        shown = replica.client().info("replication")
        assert shown["second_repl_offset"] == shown["repl_backlog_first_byte_offset"], (
            "the backlog is empty: INFO replication alone reads as a restart from RDB"
        )
        lost = {name: generator.next_ids(30) for name, generator in busy.items()}
        proxy.switch(replica.port)
        master.kill()
        after = {name: first_after_restart(generator.next_id) for name, generator in idle.items()}
    finally:
        proxy.close()
    assert {name: generator.rewinds for name, generator in idle.items()} == dict.fromkeys(idle, 1)
    assert after["sequence"] > max(lost["sequence"])
    for name in ("date_prefixed", "daily_code"):
        parse = idle[name].parse
        assert parse(after[name]).counter > max(parse(value).counter for value in lost[name])
    assert after["snowflake"] > max(lost["snowflake"])
