"""``RedisIds.from_sentinel``: IDs from the master Sentinel names, and failovers as RedisUnavailable."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from typing import Any

import pytest

from sa_redis_ids import (
    ConfigError,
    RedisIds,
    RedisUnavailable,
    ReplicasNotAcknowledged,
    SaRedisIdsError,
    ScriptError,
)
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.redis.switchover import successor_identity
from tests.support.servers import HOST, RedisServer
from tests.support.topologies import REPLICATION_ARGS, TEST_PERIODS, SentinelTopology, wait_until
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


def test_from_sentinel_waits_for_a_replica_by_default_and_can_opt_out() -> None:
    assert RedisIds.from_sentinel(["127.0.0.1:1"], "svc").nodes.nodes[0].replicas == 1
    assert AsyncRedisIds.from_sentinel(["127.0.0.1:1"], "svc").nodes.nodes[0].replicas == 1
    assert RedisIds.from_sentinel(["127.0.0.1:1"], "svc", replicas=0).nodes.nodes[0].replicas == 0


def test_a_switch_over_under_load_with_defaults_issues_nothing_twice_and_resumes(
    sentinel_topology: SentinelTopology,
) -> None:
    """Threads draw through a realistic switch-over (the old master stays writable until
    Sentinel demotes it): only RedisUnavailable meanwhile, no value twice, and the calls resume
    on the new master."""
    sentinel_topology.wait_replicas_in_sync()
    ids = RedisIds.from_sentinel(
        sentinel_topology.addresses,
        sentinel_topology.service,
        prefix="s2",
        retry_after=0.1,
        replica_timeout=0.5,
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
        assert sentinel_topology.is_master(old)  # the window real Sentinel leaves open
        sentinel_topology.wait_demoted(old)
        issued = len(values)
        wait_until(lambda: len(values) > issued + 50, "IDs after the switch-over", timeout=30)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert all(isinstance(exc, RedisUnavailable) for exc in errors), [
        exc for exc in errors if not isinstance(exc, RedisUnavailable)
    ]
    assert not any(isinstance(exc, ScriptError) for exc in errors)
    # The old master's writes after the promotion had no replica to acknowledge them.
    assert any(isinstance(exc, ReplicasNotAcknowledged) for exc in errors)
    after = seq.next_id()
    assert int(new.client().get(seq.counter_key) or 0) >= after
    assert not duplicates([*values, after])


def _watched_clients(server: RedisServer, name: str) -> int:
    return sum(1 for client in server.client().client_list() if client.get("name") == name)


def _draw_in_threads(seq: Any, threads: int = 4, each: int = 20) -> None:
    """Open several pooled connections: threads drawing at once each take one."""
    workers = [threading.Thread(target=seq.next_ids, args=(1,)) for _ in range(threads * each)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def test_a_failed_call_after_a_switch_over_closes_every_connection_to_the_old_master(
    sentinel_topology: SentinelTopology,
) -> None:
    """redis-py keeps connections open before a switch-over on the old master until Sentinel
    demotes it; the first failed call asks the Sentinels and closes them, while the old master
    still takes writes."""
    sentinel_topology.wait_replicas_in_sync()
    name = f"watched{uuid.uuid4().hex[:8]}"
    ids = RedisIds.from_sentinel(
        sentinel_topology.addresses, sentinel_topology.service, prefix=name, client_name=name
    )
    seq = ids.sequence("users")
    seq.share_calls = False  # a connection per thread: several to close
    _draw_in_threads(seq)
    old = sentinel_topology.master()
    assert _watched_clients(old, name) > 1
    new = sentinel_topology.failover()
    with pytest.raises(RedisUnavailable):  # an old connection: no replica acknowledges it now
        for _ in range(100):
            seq.next_id()
    assert sentinel_topology.is_master(old)
    wait_until(lambda: _watched_clients(old, name) == 0, "the old master's connections to close")
    assert sentinel_topology.is_master(old)  # closed by the library, not by Sentinel's demotion
    assert ids.nodes.nodes[0].client.connection_pool.master_address[1] == new.port
    sentinel_topology.wait_demoted(old)
    ids.close()


def test_an_asyncio_call_after_a_switch_over_closes_every_connection_to_the_old_master(
    sentinel_topology: SentinelTopology,
) -> None:
    sentinel_topology.wait_replicas_in_sync()
    name = f"watched{uuid.uuid4().hex[:8]}"
    ports: dict[str, Any] = {}

    async def main() -> None:
        ids = AsyncRedisIds.from_sentinel(
            sentinel_topology.addresses, sentinel_topology.service, prefix=name, client_name=name
        )
        try:
            seq = ids.sequence("users")
            seq.share_calls = False  # a connection per task: several to close
            deadline = time.monotonic() + 20
            while "drawn" not in ports and time.monotonic() < deadline:
                try:  # the replica may still be catching up after the session's last failover
                    ports["drawn"] = await asyncio.gather(*(seq.next_id() for _ in range(20)))
                except RedisUnavailable:
                    await asyncio.sleep(0.05)
            assert "drawn" in ports, "no values from the master before the switch-over"
            old = ports["old"] = sentinel_topology.master()
            ports["before"] = _watched_clients(old, name)
            ports["new"] = await asyncio.to_thread(sentinel_topology.failover)
            for _ in range(3):  # tasks on old connections fail; the first failure closes them all
                with contextlib.suppress(RedisUnavailable):
                    await asyncio.gather(*(seq.next_id() for _ in range(20)))
                await asyncio.sleep(0.15)  # past the re-check interval
            ports["master"] = ids.nodes.nodes[0].client.connection_pool.master_address
            ports["old master then"] = sentinel_topology.is_master(old)
            ports["after"] = _watched_clients(old, name)
        finally:
            await ids.aclose()

    asyncio.run(main())
    old = ports["old"]
    assert ports["before"] > 1
    assert ports["old master then"]  # still: the window real Sentinel leaves open
    assert ports["after"] == 0
    assert ports["master"][1] == ports["new"].port
    sentinel_topology.wait_demoted(old)


MASTER = {
    "role": "master",
    "connected_slaves": 0,
    "master_replid": "b" * 40,
    "master_replid2": "a" * 40,
}
PREDECESSOR = {"role": "master", "connected_slaves": 0, "master_replid": "a" * 40}


@pytest.mark.parametrize(
    ("master", "replicas", "issues"),
    [
        (MASTER, [], True),  # no replica listed that is up (none, or all down)
        (MASTER, [PREDECESSOR], True),  # the old master, not yet demoted by Sentinel
        ({**MASTER, "connected_slaves": 1}, [], False),  # a replica that can acknowledge
        (MASTER, [{"role": "slave", "master_link_status": "down"}], False),  # promotable
        (MASTER, [{**PREDECESSOR, "master_replid": "c" * 40}], False),  # another master
        ({**MASTER, "master_replid2": "0" * 40}, [PREDECESSOR], False),  # it is the old master
        ({**MASTER, "role": "slave"}, [], False),
    ],
    ids=["alone", "predecessor", "connected", "replica", "stranger", "replaced", "not master"],
)
def test_a_master_issues_without_wait_only_when_no_replica_could_replace_it(
    master: dict[str, Any], replicas: list[dict[str, Any]], issues: bool
) -> None:
    found = successor_identity(master, replicas)
    assert found == (master["master_replid"] if issues else None)


def test_a_connection_left_on_the_old_master_hands_nothing_out_while_the_new_one_has_no_replica(
    sentinel_topology: SentinelTopology,
) -> None:
    """An asyncio pool takes back a connection still open to the old master; a call that runs on
    it while the new master issues without WAIT is dropped (the server is not the one judged)."""
    sentinel_topology.wait_replicas_in_sync()
    outcome: dict[str, Any] = {}

    async def main() -> None:
        ids = AsyncRedisIds.from_sentinel(
            sentinel_topology.addresses,
            sentinel_topology.service,
            prefix=f"stale{uuid.uuid4().hex[:8]}",
            retry_after=0.1,
        )
        try:
            seq = ids.sequence("users")
            deadline = time.monotonic() + 20
            while "first" not in outcome and time.monotonic() < deadline:
                try:  # the replica may still be catching up after the session's last failover
                    outcome["first"] = await seq.next_id()
                except RedisUnavailable:
                    await asyncio.sleep(0.05)
            pool = ids.nodes.nodes[0].client.connection_pool
            stale = await pool.get_connection()  # open to the master, kept aside
            old = sentinel_topology.master()
            await asyncio.to_thread(sentinel_topology.failover)
            deadline = time.monotonic() + 20
            while "resumed" not in outcome and time.monotonic() < deadline:
                try:
                    outcome["resumed"] = await seq.next_id()  # on the new master, without WAIT
                except RedisUnavailable:
                    await asyncio.sleep(0.05)
            await pool.release(stale)  # the pool hands it out next
            try:
                outcome["from the old master"] = await seq.next_id()
            except ReplicasNotAcknowledged as exc:
                outcome["dropped"] = str(exc)
            outcome["old still master"] = sentinel_topology.is_master(old)
        finally:
            await ids.aclose()

    asyncio.run(main())
    assert "first" in outcome, "no value from the master before the switch-over"
    assert "resumed" in outcome, "no value from the new master while the old one is writable"
    assert outcome["old still master"]
    assert "from the old master" not in outcome, outcome
    assert "dropped" in outcome, outcome  # by the identity check; by WAIT if its time ran out
    sentinel_topology.wait_demoted(sentinel_topology.replicas()[0])


def test_a_master_issuing_without_wait_drops_the_write_a_new_replica_could_miss() -> None:
    """The master's only replica dies; once the Sentinels call it down, the master issues
    without WAIT. A replica that then connects (here one that stops answering: it acknowledges
    nothing) could be promoted without the next write, so that write is dropped, not handed out,
    and the calls wait for the replica again."""
    topology = SentinelTopology(periods=TEST_PERIODS).start()
    extra = RedisServer(args=REPLICATION_ARGS)
    try:
        topology.wait_replicas_in_sync()
        master = topology.master()
        ids = RedisIds.from_sentinel(
            topology.addresses, topology.service, prefix="alone", retry_after=0.05
        )
        seq = ids.sequence("users")
        first = seq.next_id()
        topology.replicas()[0].kill()
        resumed = wait_until(seq.next_id, "the master to issue without its dead replica")
        extra.start()
        extra.client().replicaof(HOST, master.port)
        wait_until(
            lambda: master.client().info("replication")["connected_slaves"],
            "the new replica to connect",
        )
        extra.pause()
        with pytest.raises(ReplicasNotAcknowledged):
            seq.next_id()
        assert first < resumed
    finally:
        extra.resume()
        extra.stop()
        topology.stop()


def test_a_minority_of_sentinels_never_lets_a_master_issue_without_wait() -> None:
    """One Sentinel cut off with the master sees its replica down, as when the others promoted
    that replica: its word alone must not let the master issue without WAIT. With two of the
    three Sentinels gone and the replica dead, every call is dropped; once the others answer
    again (they too see the replica down), the master issues."""
    topology = SentinelTopology(periods=TEST_PERIODS).start()
    try:
        topology.wait_replicas_in_sync()
        ids = RedisIds.from_sentinel(
            topology.addresses, topology.service, prefix="minority", retry_after=0.05
        )
        seq = ids.sequence("users")
        first = seq.next_id()
        for sentinel in topology.sentinels[1:]:
            sentinel.stop()
        topology.replicas()[0].kill()
        only = topology.sentinels[0].client()
        wait_until(
            lambda: all(r["is_sdown"] for r in only.sentinel_slaves(topology.service)),
            "the remaining Sentinel to see the replica down",
        )
        for _ in range(3):  # each past the re-check interval: judged again every time
            with pytest.raises(ReplicasNotAcknowledged):
                seq.next_id()
            time.sleep(0.15)
        for sentinel in topology.sentinels[1:]:
            sentinel.start()
        assert wait_until(seq.next_id, "a majority to let the master issue") > first
    finally:
        topology.stop()
