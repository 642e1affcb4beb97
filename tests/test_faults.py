"""Fault suite: real ``redis-server`` processes lose or rewind their data under a load of several
processes × threads drawing from every strategy (plain and buffered); every value is counted.

The documented guarantee under test: every process that already received values from a node
never receives one of them again, whatever the node forgets (a restart without persistence,
``FLUSHALL``, an eviction, a rewind to an older state); so with all processes running before the
fault, the count of duplicates is zero for every counter strategy (after a rewind in place,
which only processes with a mark above it can notice, the count across processes is measured).
The figures are printed (``-s``).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
from sqlalchemy import create_engine, func, select
from sqlalchemy import distinct as distinct_

from sa_redis_ids import RedisIds, RedisUnavailable
from tests.support.faults import CONFIGS, Drawn, Load, report, run_with_fault
from tests.support.orm_load import OrmLoad, insert_with_fault, model
from tests.support.servers import RedisServer
from tests.support.topologies import ReplicatedCluster, SentinelTopology

StartServers = Callable[[int], list[RedisServer]]


COUNTERS = {"seq", "seq_block", "dp", "dp_block", "dc", "sf"}
"""Strategies whose heal lifts the node above every process: no duplicates at all."""


def check(results: dict[str, Drawn], *, lost: bool = True, across: bool = True) -> None:
    """Zero duplicates for every counter strategy; for short IDs zero within each process (the
    values of other processes can come back until each of them has called the node again, which
    is measured and printed), no ``ScriptError``, values drawn again after the fault, and where
    the fault surely lost writes (``lost``), the loss noticed (healed) by some generators.

    Which generators notice depends on timing: a buffered generator that fetched no block
    between the loss and the heal of another process has nothing to heal.

    ``across=False``: the fault is one the docs do not promise to heal across processes (a rewind
    in place, under the same replication ID, is caught only by a process whose own mark lies
    above it): duplicates between processes are measured and printed, not asserted.
    """
    print("\n" + report(results))
    assert {label for label, _, _ in CONFIGS} == set(results)
    for label, drawn in results.items():
        assert drawn.values, f"{label} drew nothing"
        assert drawn.within == 0, f"{label}: {drawn.within} duplicates within one process"
        assert "ScriptError" not in drawn.errors, f"{label}: {drawn.errors}"
        assert drawn.after > 0, f"{label} drew nothing after the fault"
        if label in COUNTERS and across:
            assert drawn.duplicates() == 0, f"{label}: {drawn.duplicates()} duplicates"
    if lost:
        assert sum(drawn.rewinds for drawn in results.values()) > 0, "nobody noticed the fault"


def prefix() -> str:
    return f"f{uuid.uuid4().hex[:10]}"


@pytest.mark.slow
def test_one_of_three_nodes_killed_and_restarted_empty(servers_of_each_kind: StartServers) -> None:
    servers = servers_of_each_kind(3)
    victim = servers[1]

    def crash() -> None:
        victim.kill()
        time.sleep(0.2)
        victim.start()  # no persistence: it comes back empty

    # retry_after: a node that was down is tried again soon, within the load's few seconds
    load = Load({"urls": [s.url for s in servers]}, prefix(), options={"retry_after": 0.1})
    check(run_with_fault(load, crash))


@pytest.mark.slow
def test_flushall_on_the_only_node(servers_of_each_kind: StartServers) -> None:
    (server,) = servers_of_each_kind(1)
    load = Load({"urls": [server.url]}, prefix())
    check(run_with_fault(load, lambda: server.client().flushall()))


@pytest.mark.slow
def test_a_node_rewound_to_an_older_state(redis_servers: StartServers) -> None:
    """What a failover to a replica that was behind, or a restore of an old snapshot, does."""
    (server,) = redis_servers(1)
    load = Load({"urls": [server.url]}, prefix())

    def rewind() -> None:
        client = server.client()
        keys = list(client.scan_iter(match=f"{load.prefix}:*"))
        snapshot = {key: client.dump(key) for key in keys}
        time.sleep(0.6)  # the load goes on past the snapshot
        for key in client.scan_iter(match=f"{load.prefix}:*"):
            if key not in snapshot:
                client.delete(key)
        for key, dumped in snapshot.items():
            if dumped is not None:
                client.restore(key, 0, dumped, replace=True)

    # A process whose last block came before the snapshot and which fetches first after the
    # restore has no mark above the rewound state; it can take values another process holds.
    check(run_with_fault(load, rewind), across=False)


@pytest.mark.slow
def test_evictions_under_allkeys_lru(redis_servers: StartServers) -> None:
    """Twice, memory runs short and Redis's own allkeys-lru eviction removes every key at once.

    The limit is lowered below what any key needs for an instant: the next write makes Redis
    evict everything it can (writes in that instant are refused with OOM, which the library
    reports as ``RedisUnavailable``), then the limit goes back up.
    """
    server = RedisServer(args=["--maxmemory", "8mb", "--maxmemory-policy", "allkeys-lru"])
    server.start()
    try:
        load = Load({"urls": [server.url]}, prefix())

        def evict() -> None:
            client = server.client()
            for _ in range(2):
                client.config_set("maxmemory", "1")
                with contextlib.suppress(redis.OutOfMemoryError):
                    client.set("other:trigger", "x")  # evicts every key it can, then is refused
                client.config_set("maxmemory", "8mb")
                time.sleep(0.8)

        results = run_with_fault(load, evict)
        evicted = int(server.client().info("stats")["evicted_keys"])
        print(f"\nevicted keys: {evicted}")
        assert evicted > 0
        check(results)
    finally:
        server.stop()


def sentinel_load(topology: SentinelTopology, **options: Any) -> Load:
    return Load(
        {"sentinel": topology.addresses, "service": topology.service},
        prefix(),
        options={"retry_after": 0.1, **options},
    )


@pytest.mark.slow
def test_sentinel_failover_while_the_old_master_takes_writes(
    own_sentinels: SentinelTopology,
) -> None:
    """``SENTINEL FAILOVER``: the old master accepts writes until it is turned into a replica of
    the new one, which never saw them; every value of those writes comes back on the new master
    unless the processes remember them."""
    own_sentinels.wait_replicas_in_sync()
    # How many writes the old master takes before it follows the new one depends on timing.
    check(run_with_fault(sentinel_load(own_sentinels), own_sentinels.failover), lost=False)


@pytest.mark.slow
def test_sentinel_master_killed(own_sentinels: SentinelTopology) -> None:
    own_sentinels.wait_replicas_in_sync()
    # A replica on loopback usually has every write when its master dies: nothing may be lost.
    check(run_with_fault(sentinel_load(own_sentinels), own_sentinels.kill_master), lost=False)


@pytest.mark.slow
def test_cluster_master_killed(own_cluster: ReplicatedCluster) -> None:
    load = Load({"cluster": own_cluster.url}, prefix())
    check(run_with_fault(load, own_cluster.kill_master, after=1.5), lost=False)


@pytest.mark.slow
def test_flushall_while_processes_insert_through_the_orm_with_floors_and_blocks(
    redis_servers: StartServers, postgresql_url: str
) -> None:
    """Every column of the table comes from a generator with a column floor (two of them
    buffered); Redis is flushed twice under the inserts: no batch fails, every column is unique."""
    (server,) = redis_servers(1)
    load = OrmLoad(server.url, postgresql_url, prefix())
    engine = create_engine(postgresql_url)
    row = model(load, engine)
    row.metadata.drop_all(engine)
    row.metadata.create_all(engine)
    try:

        def flush_twice() -> None:
            server.client().flushall()
            time.sleep(0.8)
            server.client().flushall()

        batches, failed = insert_with_fault(load, flush_twice)
        print(f"\nbatches committed: {batches}, failed: {dict(failed)}")
        assert failed["IntegrityError"] == 0
        assert batches > 0
        with engine.connect() as connection:
            total = connection.scalar(select(func.count()).select_from(row.__table__))
            for column in ("id", "invoice", "code", "event", "short"):
                distinct = connection.scalar(select(func.count(distinct_(row.__table__.c[column]))))
                assert distinct == total, column
        assert total == batches * load.batch
    finally:
        row.metadata.drop_all(engine)
        engine.dispose()


@pytest.mark.slow
@pytest.mark.parametrize("factory", ["sequence", "date_prefixed", "snowflake"])
def test_a_failover_to_a_lagging_replica_is_caught_by_a_process_that_saw_none_of_the_lost_writes(
    own_sentinels: SentinelTopology, factory: str
) -> None:
    """The replica misses the last writes, then replaces its master. A process whose last value
    lies below the lost writes cannot tell from the counter; the node's new identity tells it."""
    own_sentinels.wait_replicas_in_sync()
    name = prefix()

    def generator() -> Any:
        ids = RedisIds.from_sentinel(
            own_sentinels.addresses, own_sentinels.service, prefix=name, retry_after=0.1
        )
        return getattr(ids, factory)("ns")

    idle, busy = generator(), generator()
    before = [idle.next_id(), *busy.next_ids(20)]
    own_sentinels.wait_replicas_in_sync()
    (replica,) = own_sentinels.replicas()
    old = own_sentinels.master()
    replica.pause()  # SIGSTOP: the replica receives nothing more
    lost = busy.next_ids(30)  # only the master has these
    old.kill()  # the master dies with them; then the replica wakes up and is promoted
    replica.resume()
    own_sentinels.wait_master_other_than(old)
    after = []
    deadline = time.monotonic() + 10
    while len(after) < 30 and time.monotonic() < deadline:
        try:
            after.append(idle.next_id())
        except RedisUnavailable:
            time.sleep(0.05)
    assert len(after) == 30
    assert not set(after) & set(before + lost)
    assert min(after) > max(lost)
    assert idle.rewinds >= 1
