"""``RedisIds.from_sentinel``: IDs from the master Sentinel names, and failovers as RedisUnavailable."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from sa_redis_ids import ConfigError, RedisIds, RedisUnavailable, SaRedisIdsError, ScriptError
from tests.support.topologies import SentinelTopology, wait_until
from tests.support.uniqueness import duplicates


@pytest.mark.parametrize(
    "sentinels",
    [
        [],
        "127.0.0.1:26379",
        ["127.0.0.1"],
        ["127.0.0.1:0"],
        ["h:99999"],
        [("h", "1")],
        [("h",)],
        [("", 1)],
        ["127.0.0.1:1", ("127.0.0.1", 1)],
        [None],
    ],
    ids=repr,
)
def test_bad_sentinel_addresses_are_refused(sentinels: Any) -> None:
    with pytest.raises(ConfigError, match="sentinel"):
        RedisIds.from_sentinel(sentinels, "svc")


def test_a_bad_service_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="service_name"):
        RedisIds.from_sentinel(["127.0.0.1:1"], "")


def test_sentinels_may_be_strings_or_tuples() -> None:
    ids = RedisIds.from_sentinel(["127.0.0.1:1", ("127.0.0.1", 2), "[::1]:3"], "svc")
    assert ids.nodes.nodes[0].name == "sentinel:svc@127.0.0.1:1,127.0.0.1:2,::1:3"


def test_no_reachable_sentinel_is_unavailable() -> None:
    ids = RedisIds.from_sentinel(["127.0.0.1:1"], "svc", connect_timeout=0.2)
    with pytest.raises(RedisUnavailable):
        ids.sequence("users").next_id()


def test_from_sentinel_issues_ids_from_the_master(sentinel_topology: SentinelTopology) -> None:
    ids = RedisIds.from_sentinel(
        sentinel_topology.addresses, sentinel_topology.service, prefix="s1"
    )
    seq = ids.sequence("users")
    assert seq.next_ids(3) == [1, 2, 3]
    assert ids.nodes.nodes[0].name.startswith(f"sentinel:{sentinel_topology.service}@")
    assert int(sentinel_topology.master().client().get(seq.counter_key) or 0) == 3


@pytest.mark.parametrize("replicas", [0, 1])
def test_a_failover_under_load_raises_only_redis_unavailable_then_issues_on_the_new_master(
    sentinel_topology: SentinelTopology, replicas: int
) -> None:
    sentinel_topology.wait_replicas_in_sync()
    ids = RedisIds.from_sentinel(
        sentinel_topology.addresses,
        sentinel_topology.service,
        prefix=f"s2r{replicas}",
        retry_after=0.1,
        replicas=replicas,
        replica_timeout=1.5,  # generous: the machine may be loaded
        socket_timeout=3.0,
    )
    seq = ids.sequence("users")
    values: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()
    lock = threading.Lock()

    def draw() -> None:
        while not stop.is_set():
            try:
                value = seq.next_id()
            except SaRedisIdsError as exc:
                with lock:
                    errors.append(exc)
                time.sleep(0.01)
                continue
            with lock:
                values.append(value)

    threads = [threading.Thread(target=draw) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(values) > 50, "IDs before the failover")
        old = sentinel_topology.master()
        new = sentinel_topology.failover()
        assert new.port != old.port
        issued = len(values)
        wait_until(lambda: len(values) > issued + 50, "IDs after the failover")
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert all(isinstance(exc, RedisUnavailable) for exc in errors), [
        exc for exc in errors if not isinstance(exc, RedisUnavailable)
    ]
    assert not any(isinstance(exc, ScriptError) for exc in errors)
    # redis-py's SentinelConnectionPool asked the sentinels again: the client writes to the new master.
    pool = ids.nodes.nodes[0].client.connection_pool
    assert pool.master_address[1] == new.port
    after = seq.next_id()
    assert int(new.client().get(seq.counter_key) or 0) >= after
    if replicas:
        # Writes the old master took after the promotion had no replica to acknowledge them, so
        # none of their values was handed out. (Without WAIT those writes are lost and the new
        # master issues their values again: replicas=0 alone does not survive a failover.)
        assert not duplicates([*values, after])
