"""Snowflake and ShortId on ``redis.asyncio`` clients: the very plans of the sync generators, run
by the asyncio driver through :class:`~sa_redis_ids.generators.aio.AsyncIdGenerator`.

Backends: fakeredis's asyncio client (with Lua), the real server and the session's Redis Cluster.
Many tasks draw concurrently with ``asyncio.gather``; every value must be unique, decode back to
itself, and agree with what Redis recorded. Each test drives its own event loop (``asyncio.run``)
and uses a key prefix of its own, deleted afterwards.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster

from sa_redis_ids import ConfigError, SequenceExhausted
from sa_redis_ids.generators import short_id as short_id_module
from sa_redis_ids.generators.aio import AsyncIdGenerator
from sa_redis_ids.generators.short_id import ShortIdGenerator
from sa_redis_ids.generators.snowflake import SnowflakeGenerator
from sa_redis_ids.redis.nodes import NodeSet
from sa_redis_ids.redis.plans import run_plan
from tests.support.services import REDIS_URL

TASKS = 12
ROUNDS = 3
BATCH = 500


@dataclass
class AsyncBackend:
    """How a test makes asyncio clients of one backend, its private key prefix, and a sync client
    of the same data (to look at keys and delete them)."""

    name: str
    make: Callable[[int], Any]
    """A new asyncio client of node ``i`` (make it inside the test's event loop)."""
    sync: list[Any]
    """A sync client per node the backend offers (fakeredis: 3, the real server: 3 databases)."""
    prefix: str

    def scan_keys(self, node: int = 0) -> list[bytes]:
        return list(self.sync[node].scan_iter(match=f"{self.prefix}:*"))


def _fake() -> AsyncBackend:
    servers = [fakeredis.FakeServer() for _ in range(3)]
    return AsyncBackend(
        "fake",
        lambda i: fakeredis.FakeAsyncRedis(server=servers[i]),
        [fakeredis.FakeRedis(server=server) for server in servers],
        "",
    )


@pytest.fixture(params=["fake", "redis", "cluster"])
def aio(request: pytest.FixtureRequest) -> Iterator[AsyncBackend]:
    """Each backend in turn, with a prefix of the test's own; its keys are deleted afterwards."""
    if request.param == "fake":
        found = _fake()
    elif request.param == "redis":
        request.getfixturevalue("real_redis")  # skips (or fails in CI) without a server
        urls = [REDIS_URL.rsplit("/", 1)[0] + f"/{db}" for db in range(3)]
        found = AsyncBackend(
            "redis",
            lambda i: redis.asyncio.Redis.from_url(urls[i], socket_timeout=5),
            [redis.Redis.from_url(url, socket_timeout=5) for url in urls],
            "",
        )
    else:
        cluster = request.getfixturevalue("redis_cluster")
        found = AsyncBackend(
            "cluster",
            lambda i: redis.asyncio.cluster.RedisCluster.from_url(cluster.url, socket_timeout=5),
            [request.getfixturevalue("cluster_client")],
            "",
        )
    found.prefix = f"t{uuid.uuid4().hex[:12]}"
    yield found
    for index, client in enumerate(found.sync):
        for key in found.scan_keys(index):
            client.delete(key)
        if found.name == "redis":
            client.close()


async def _closing(clients: list[Any], body: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return await body()
    finally:
        for client in clients:
            await client.aclose()


def _run(aio: AsyncBackend, nodes: int, body: Callable[[NodeSet], Awaitable[Any]]) -> Any:
    """``body(node_set)`` in a fresh event loop on ``nodes`` asyncio clients, closed after."""

    async def main() -> Any:
        clients = [aio.make(i) for i in range(nodes)]
        if aio.name == "cluster":
            # redis-py's asyncio cluster client, first used by many tasks at once, can let one
            # task's initialize() close the connection another task is opening (AttributeError
            # on a None writer); initialised once up front it is not
            await clients[0].initialize()
        return await _closing(clients, lambda: body(NodeSet(clients)))

    return asyncio.run(main())


async def _draw(generator: AsyncIdGenerator[Any]) -> list[list[Any]]:
    """What each of :data:`TASKS` concurrent tasks drew: batches and single values in turn."""

    async def task() -> list[Any]:
        drawn: list[Any] = []
        for _ in range(ROUNDS):
            drawn += await generator.next_ids(BATCH)
            drawn.append(await generator.next_id())
        return drawn

    return list(await asyncio.gather(*(task() for _ in range(TASKS))))


NODE_COUNTS = [
    pytest.param(name, count, id=f"{name}-{count}")
    for name, count in [("fake", 1), ("fake", 3), ("redis", 1), ("redis", 3), ("cluster", 1)]
]
"""Backends with the node counts they offer (a cluster is one node of the library's)."""


# -- snowflake -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("aio", "count"), NODE_COUNTS, indirect=["aio"])
def test_snowflake_tasks_draw_unique_increasing_well_formed_ids(
    aio: AsyncBackend, count: int
) -> None:

    async def body(nodes: NodeSet) -> tuple[SnowflakeGenerator, list[list[int]]]:
        assert nodes.asynchronous
        generator = SnowflakeGenerator(nodes, aio.prefix, "orders")
        return generator, await _draw(AsyncIdGenerator(generator))

    generator, drawn = _run(aio, count, body)
    everything = [value for values in drawn for value in values]
    assert len(everything) == TASKS * ROUNDS * (BATCH + 1)
    assert len(set(everything)) == len(everything), f"duplicates on {count} node(s)"
    for values in drawn:  # each task's IDs of one node increase (nodes' clocks differ)
        for index in range(count):
            mine = [v for v in values if generator.parse(v).sequence % count == index]
            assert mine == sorted(mine), f"task's IDs of node {index} of {count}"
    layout = generator.layout
    seen_nodes = set()
    for value in everything:
        parts = generator.parse(value)
        assert parts.shard == 0
        assert layout.compose(parts.ms, parts.shard, parts.sequence) == value
        seen_nodes.add(parts.sequence % count)
    assert seen_nodes == set(range(count)), "every node issued"
    if count == 1:  # the node's state is the last (millisecond, slot) handed out
        state = aio.sync[0].hgetall(generator.state_key)
        last = generator.parse(max(everything))
        assert int(state[b"ms"]) == last.ms - layout.epoch_ms
        assert int(state[b"c"]) == last.sequence


def test_a_snowflake_state_lost_is_healed_on_asyncio(aio: AsyncBackend) -> None:
    async def body(nodes: NodeSet) -> tuple[list[int], list[int], int]:
        orders = AsyncIdGenerator(
            SnowflakeGenerator(nodes, aio.prefix, "orders", tolerance_ms=0, headroom=0)
        )
        before = [value for values in await _draw(orders) for value in values]
        for key in aio.scan_keys():
            aio.sync[0].delete(key)
        after = await orders.next_ids(BATCH)
        return before, after, orders.rewinds

    before, after, rewinds = _run(aio, 1, body)
    assert min(after) > max(before)
    assert rewinds == 1


def test_a_coroutine_floor_of_a_snowflake_is_awaited_once_per_node(aio: AsyncBackend) -> None:
    calls = []

    async def body(nodes: NodeSet) -> tuple[int, list[int]]:
        reference = SnowflakeGenerator(nodes, aio.prefix, "reference")
        now = reference.parse(await AsyncIdGenerator(reference).next_id()).ms
        future = reference.layout.compose(now + 60_000, 0, 5)

        async def floor() -> int:
            calls.append(1)
            await asyncio.sleep(0)
            return future

        orders = AsyncIdGenerator(
            SnowflakeGenerator(nodes, aio.prefix, "orders", floor=floor, headroom=0)
        )
        first = await orders.next_id()  # reads the floor
        rest = [value for values in await _draw(orders) for value in values]
        return future, [first, *rest]

    future, values = _run(aio, 1, body)
    assert min(values) > future
    assert len(set(values)) == len(values)
    assert len(calls) == 1


# -- short IDs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("aio", "count"), NODE_COUNTS, indirect=["aio"])
def test_short_id_tasks_draw_unique_values_the_bitmap_records(
    aio: AsyncBackend, count: int
) -> None:

    async def body(nodes: NodeSet) -> tuple[ShortIdGenerator, list[list[int]]]:
        generator = ShortIdGenerator(nodes, aio.prefix, "codes", pool_size=60_000, offset=10**6)
        return generator, await _draw(AsyncIdGenerator(generator))

    generator, drawn = _run(aio, count, body)
    everything = [value for values in drawn for value in values]
    assert len(everything) == TASKS * ROUNDS * (BATCH + 1)
    assert len(set(everything)) == len(everything), f"duplicates on {count} node(s)"
    assert all(10**6 <= value <= generator.max_value for value in everything)
    assert generator._heals == [0] * count, "concurrent takes alone never heal"
    assert generator.rewinds == 0
    taken: dict[int, int] = {}
    for value in everything:
        node, bit = generator.locate(value)
        assert generator.value_at(node, bit) == value
        taken[node.index] = taken.get(node.index, 0) + 1
    assert sorted(taken) == list(range(count)), "every node issued"
    for index, issued in taken.items():
        client = aio.sync[index]
        assert client.bitcount(generator.bitmap_key) == issued
        assert int(client.get(generator.total_key)) == issued


def test_a_short_id_bitmap_lost_is_healed_on_asyncio(aio: AsyncBackend) -> None:
    async def body(nodes: NodeSet) -> tuple[list[int], list[int], int]:
        codes = AsyncIdGenerator(
            ShortIdGenerator(nodes, aio.prefix, "codes", pool_size=400, offset=1000)
        )
        before = await codes.next_ids(150) + [await codes.next_id() for _ in range(50)]
        for key in aio.scan_keys():
            aio.sync[0].delete(key)
        after = list(await asyncio.gather(*(codes.next_ids(50) for _ in range(4))))
        with pytest.raises(SequenceExhausted):
            await codes.next_id()  # all 400 are taken again
        return before, [value for values in after for value in values], codes.rewinds

    before, after, rewinds = _run(aio, 1, body)
    assert not set(before) & set(after)
    assert len(set(after)) == 200
    assert rewinds >= 1


def test_a_short_id_floor_streaming_asynchronously_is_marked_taken(
    aio: AsyncBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(short_id_module, "FLOOR_CHUNK", 7)  # several chunks
    used = list(range(0, 300, 3))
    calls = []

    async def floor() -> AsyncIterator[int]:
        calls.append(1)
        for value in used:
            if value % 20 == 0:
                await asyncio.sleep(0)
            yield value

    async def body(nodes: NodeSet) -> list[int]:
        codes = AsyncIdGenerator(
            ShortIdGenerator(nodes, aio.prefix, "codes", pool_size=300, offset=0, floor=floor)
        )
        first = await codes.next_ids(100)  # marks the floor's values first
        rest = await asyncio.gather(*(codes.next_ids(25) for _ in range(4)))
        with pytest.raises(SequenceExhausted):
            await codes.next_id()
        return first + [value for values in rest for value in values]

    issued = _run(aio, 1, body)
    assert sorted(issued) == sorted(set(range(300)) - set(used))
    assert len(calls) == 1


def test_a_floor_streaming_asynchronously_needs_the_asyncio_driver() -> None:
    async def floor() -> AsyncIterator[int]:
        yield 5

    codes = ShortIdGenerator(NodeSet([fakeredis.FakeRedis()]), "t", "codes", floor=floor)
    with pytest.raises(ConfigError, match="asyncio front end"):
        codes.next_id()


def test_sync_and_asyncio_plans_are_the_same_plans() -> None:
    """The sync generator runs the plan the asyncio one awaits: both see one node's state."""
    server = fakeredis.FakeServer()
    sync = SnowflakeGenerator(NodeSet([fakeredis.FakeRedis(server=server)]), "t", "orders")
    taken = run_plan(sync._take_plan(3))

    async def body() -> list[int]:
        client = fakeredis.FakeAsyncRedis(server=server)
        orders = AsyncIdGenerator(SnowflakeGenerator(NodeSet([client]), "t", "orders"))
        return await _closing([client], lambda: orders.next_ids(3))

    later = asyncio.run(body())
    assert min(later) > max(taken)
    assert sync.next_ids(3)[0] > max(later)
