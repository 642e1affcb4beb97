"""The fast lanes (a held connection per thread, a pool connection without redis-py's layers)
stay correct where the general path is: after a fork, a server restart, a flushed script cache,
a cancelled asyncio call, and a cluster slot that moved to another master.
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.cluster import RedisCluster

from sa_redis_ids import RedisIds, SaRedisIdsError
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.redis import fastlane
from sa_redis_ids.redis.fastlane import AsyncLane, FastLane, pack
from tests.support.servers import RedisServer
from tests.support.topologies import ReplicatedCluster


def _lane(ids: RedisIds) -> FastLane:
    lane = ids.nodes.nodes[0]._lane
    assert isinstance(lane, FastLane), "a plain client of a real server takes the fast lane"
    return lane


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_pack_matches_what_redis_py_sends(encoding: str) -> None:
    client = redis.Redis(encoding=encoding)
    encoder = client.connection_pool.get_encoder()
    parts = [b"EVALSHA", "abc", 2, b"k1", "k{2}", -5, 1.5, "é", 1, "1"]
    expected = b"".join(
        client.connection_pool.connection_class(encoding=encoding).pack_command(*parts)
    )
    for _ in range(3):  # packed afresh, then from the text already packed
        assert pack(encoder, *parts) == expected


def test_packed_text_is_forgotten_in_bulk_past_its_bound() -> None:
    encoder = redis.Redis().connection_pool.get_encoder()
    for guard in range(fastlane._BULK_MOST + 10):
        assert pack(encoder, str(guard)) == b"*1\r\n$%d\r\n%d\r\n" % (len(str(guard)), guard)
    assert len(fastlane._BULK) <= fastlane._BULK_MOST


def test_each_thread_holds_its_own_connection_and_values_never_repeat(
    server: RedisServer,
) -> None:
    ids = RedisIds.from_url(server.url)
    users = ids.sequence("users")
    users.share_calls = False  # every thread makes its own calls, on its own connection
    lane = _lane(ids)
    seen: list[int] = []
    held: set[int] = set()
    lock = threading.Lock()

    def work() -> None:
        mine = [users.next_id() for _ in range(200)]
        connection = next(iter(lane._local.held.values())).connection
        with lock:
            seen.extend(mine)
            held.add(id(connection))

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == len(set(seen)) == 1600
    assert len(held) == 8, "one connection per thread"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connection(server: RedisServer) -> None:
    ids = RedisIds.from_url(server.url)
    users = ids.sequence("users")
    before = [users.next_id() for _ in range(50)]  # the parent now holds a connection
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: draw on the inherited generator, report, exit at once
        try:
            drawn = [users.next_id() for _ in range(50)]
            os.write(write, ",".join(map(str, drawn)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = [int(v) for v in pipe.read().split(",")]
    os.waitpid(pid, 0)
    after = [users.next_id() for _ in range(50)]  # the parent's connection is still in step
    values = before + child + after
    assert len(values) == len(set(values)) == 150


def test_a_server_restart_is_crossed_by_the_general_path(server: RedisServer) -> None:
    ids = RedisIds.from_url(server.url, retry_after=0.0)
    users = ids.sequence("users")
    first = [users.next_id() for _ in range(20)]
    lane = _lane(ids)
    server.stop()
    server.start()  # no persistence: it comes back empty, and the held socket is dead
    later = [users.next_id() for _ in range(20)]
    assert min(later) > max(first), "the heal continued above what this process saw"
    assert users.rewinds == 1
    held = next(iter(lane._local.held.values())).connection
    assert held is not None, "the lane holds a connection again"
    held.send_command("PING")  # it is connected to the restarted server and in step
    assert held.read_response() in (b"PONG", "PONG", True)


def test_a_flushed_script_cache_is_reloaded_on_the_held_connection(server: RedisServer) -> None:
    ids = RedisIds.from_url(server.url)
    users = ids.sequence("users")
    users.next_id()
    server.client().script_flush()
    assert users.next_ids(3) == [2, 3, 4]


def test_the_asyncio_lane_survives_a_flushed_cache_and_a_cancelled_call(
    server: RedisServer,
) -> None:
    async def main() -> list[int]:
        ids = AsyncRedisIds.from_url(server.url)
        try:
            users = ids.sequence("users")
            assert isinstance(ids.nodes.nodes[0]._loops.here().lane, AsyncLane)
            drawn = [await users.next_id()]
            await ids.nodes.nodes[0].client.script_flush()
            drawn.append(await users.next_id())
            server.pause()  # the next call waits on a reply that a cancellation cuts off
            task = asyncio.ensure_future(users.next_id())
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            server.resume()
            drawn += await asyncio.gather(*(users.next_id() for _ in range(20)))
            return drawn
        finally:
            server.resume()
            await ids.aclose()

    drawn = asyncio.run(main())
    assert len(drawn) == len(set(drawn)) == 22
    assert drawn[:2] == [1, 2], "a flushed script cache is reloaded, nothing skipped"
    assert min(drawn[2:]) > 2, "after the cancelled call the lane goes on in step"


def test_a_cluster_failover_moves_the_lane_to_the_new_master(
    own_cluster: ReplicatedCluster,
) -> None:
    prefix = f"lane{uuid.uuid4().hex[:8]}"
    client: Any = RedisCluster.from_url(own_cluster.url, socket_timeout=5)
    ids = RedisIds(client, prefix=prefix, retry_after=0.0)
    users = ids.sequence("users")
    before = [users.next_id() for _ in range(20)]
    slot_owner = client.get_node_from_key(users.counter_key)
    victim = next(s for s in own_cluster.masters() if s.port == slot_owner.port)
    # A manual failover: the replica takes over with every write, the old master steps down.
    replica_port = next(
        port
        for port, (_, role, master) in own_cluster._roles().items()
        if role == "replica" and master == own_cluster._roles()[victim.port][0]
    )
    replica = next(s for s in own_cluster.servers if s.port == replica_port)
    replica.client().execute_command("CLUSTER", "FAILOVER")
    own_cluster.wait_healthy()
    after: list[int] = []
    for _ in range(50):  # the held connection answers MOVED: the call goes the general way
        try:
            after.append(users.next_id())
        except SaRedisIdsError:  # a call during the switch may fail; values are counted
            continue
        if len(after) >= 20:
            break
    values = before + after
    assert len(after) >= 20
    assert len(values) == len(set(values))
    assert min(after) > max(before)


def test_a_bounded_pool_keeps_connections_for_the_applications_own_commands(
    server: RedisServer,
) -> None:
    tight = redis.Redis.from_url(server.url, max_connections=1, socket_timeout=5)
    ids = RedisIds(tight)
    users = ids.sequence("users")
    assert users.next_ids(2) == [1, 2]  # a pool of one: the lane holds none of it
    assert tight.set("app:key", "x") is True, "the application's command finds a connection"
    # 60 threads each take values in turn and stay alive: a lane holding a connection for every
    # thread would empty a pool of 40; it holds at most half, the other threads go the general way.
    roomy = redis.Redis.from_url(server.url, max_connections=40, socket_timeout=5)
    many = RedisIds(roomy).sequence("many")
    drawn: list[int] = []
    turn = threading.Lock()
    alive = threading.Barrier(61, timeout=30)
    done = threading.Barrier(61, timeout=30)

    def work() -> None:
        with turn:
            drawn.extend(many.next_id() for _ in range(3))
        alive.wait()
        done.wait()

    threads = [threading.Thread(target=work) for _ in range(60)]
    for thread in threads:
        thread.start()
    alive.wait()  # every thread alive, each having drawn
    try:
        assert roomy.ping() is True, "the lane held at most its share of the pool"
        assert len(drawn) == len(set(drawn)) == 180
    finally:
        done.wait()
        for thread in threads:
            thread.join()


def test_the_asyncio_lane_keeps_at_most_its_share_of_a_bounded_pool(
    server: RedisServer,
) -> None:
    async def share_left_for_the_app() -> list[int]:
        client = redis.asyncio.Redis.from_url(server.url, max_connections=8, socket_timeout=5)
        ids = AsyncRedisIds(client)
        try:
            users = ids.sequence("users")
            drawn = await asyncio.gather(*(users.next_id() for _ in range(8)))
            assert await client.set("app:key", "x") is True, "a connection is free for the app"
            return list(drawn)
        finally:
            await ids.aclose()

    assert sorted(asyncio.run(share_left_for_the_app())) == list(range(1, 9))


def test_lanes_of_several_instances_on_one_client_keep_one_share_of_its_pool(
    server: RedisServer,
) -> None:
    """Three ``RedisIds`` on one client of 8 connections: their lanes together hold at most 4,
    so the application's own command still finds a connection while every thread stays alive."""
    client = redis.Redis.from_url(server.url, max_connections=8, socket_timeout=5)
    sequences = [RedisIds(client).sequence(f"users{n}") for n in range(3)]
    drawn: list[tuple[int, int]] = []
    turn = threading.Lock()
    alive = threading.Barrier(9, timeout=30)
    done = threading.Barrier(9, timeout=30)

    def work() -> None:
        with turn:
            for n, users in enumerate(sequences):
                drawn.extend((n, value) for value in users.next_ids(2))
        alive.wait()
        done.wait()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    alive.wait()  # every thread alive, each having drawn from every instance
    try:
        assert client.set("app:key", "x") is True, "the lanes held at most half the pool"
        assert len(drawn) == len(set(drawn)) == 48
    finally:
        done.wait()
        for thread in threads:
            thread.join()


def test_asyncio_lanes_of_several_instances_on_one_client_keep_one_share_of_its_pool(
    server: RedisServer,
) -> None:
    async def app_command_after_draws() -> bool:
        client = redis.asyncio.Redis.from_url(server.url, max_connections=8, socket_timeout=5)
        instances = [AsyncRedisIds(client) for _ in range(3)]
        try:
            for n, ids in enumerate(instances):
                users = ids.sequence(f"users{n}")
                await asyncio.gather(*(users.next_id() for _ in range(4)))
            # each lane kept what it finished with: together at most 4 of the 8 connections
            return bool(await asyncio.gather(*(client.ping() for _ in range(4))))
        finally:
            for ids in instances:
                await ids.aclose()

    assert asyncio.run(app_command_after_draws())


def test_first_calls_on_several_event_loops_share_no_asyncio_lock() -> None:
    ids = AsyncRedisIds.embedded()

    async def first_calls(namespace: str) -> list[int]:
        users = ids.sequence(namespace)
        return list(await asyncio.gather(*(users.next_id() for _ in range(4))))

    assert sorted(asyncio.run(first_calls("a"))) == [1, 2, 3, 4]
    assert sorted(asyncio.run(first_calls("b"))) == [1, 2, 3, 4]  # another loop, no RuntimeError
