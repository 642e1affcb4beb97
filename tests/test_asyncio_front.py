"""The asyncio front end: ``AsyncRedisIds`` on ``redis.asyncio`` clients of every backend.

The strategies run the same plans as the sync front end, awaited on the event loop; these tests
draw from many concurrent tasks and count duplicates on fakeredis, a real Redis and a real
Cluster, and check that a client of the wrong kind is refused at construction.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.asyncio import AsyncIdGenerator, AsyncRedisIds
from tests.conftest import BACKENDS, Backend
from tests.support.servers import RedisClusterProcesses
from tests.support.services import REDIS_URL
from tests.support.topologies import SentinelTopology

TASKS = 64


def _async_ids(backend: Backend) -> AsyncRedisIds:
    """An ``AsyncRedisIds`` on the same server (and key prefix) as ``backend``."""
    if backend.name == "fake":
        return AsyncRedisIds.embedded(prefix=backend.prefix)
    if backend.url is not None:
        return AsyncRedisIds.from_url(backend.url, prefix=backend.prefix)
    assert backend.target is not None
    return AsyncRedisIds(
        AsyncRedisCluster.from_url(backend.target["cluster"], socket_timeout=5),
        prefix=backend.prefix,
    )


async def _draw(generator: AsyncIdGenerator[Any], per_task: int) -> list[list[Any]]:
    async def task() -> list[Any]:
        out: list[Any] = []
        for _ in range(per_task // 10):
            out.append(await generator.next_id())
            out.extend(await generator.next_ids(9))
        return out

    return await asyncio.gather(*(task() for _ in range(TASKS)))


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_a_sequence_drawn_by_64_tasks_repeats_nothing_and_stays_ordered_per_task(
    backend: Backend,
) -> None:
    async def main() -> list[list[int]]:
        ids = _async_ids(backend)
        try:
            users = ids.sequence("users", start=1000)
            assert users.max_value == 2**63 - 1 and users.namespace == "users"
            return await _draw(users, 200)
        finally:
            await ids.aclose()

    per_task = asyncio.run(main())
    values = [v for chunk in per_task for v in chunk]
    assert len(values) == TASKS * 200
    assert len(set(values)) == len(values), "no value twice"
    assert min(values) >= 1000
    for chunk in per_task:
        assert chunk == sorted(chunk), "one task's values rise"
    if backend.name != "fake":  # the embedded Redis of each front end is a server of its own
        sync = backend.ids().sequence("users", start=1000)
        assert sync.next_id() > max(values), "the sync front end continues the same counter"


def test_the_same_options_give_the_same_generator_and_others_are_refused() -> None:
    ids = AsyncRedisIds.embedded()
    assert ids.sequence("a") is ids.sequence("a")
    assert ids.generator("sequence", "a") is ids.sequence("a")
    with pytest.raises(ConfigError, match="start"):
        ids.sequence("a", start=5)
    with pytest.raises(ConfigError, match="no strategy named 'nope'"):
        ids.generator("nope", "a")


def test_a_client_of_the_wrong_kind_is_refused_with_the_front_end_to_use() -> None:
    with pytest.raises(ConfigError, match=r"redis\.asyncio client: use sa_redis_ids\.asyncio"):
        RedisIds(redis.asyncio.Redis.from_url(REDIS_URL))
    with pytest.raises(ConfigError, match=r"sync redis-py client: use sa_redis_ids\.RedisIds"):
        AsyncRedisIds(redis.Redis.from_url(REDIS_URL))
    with pytest.raises(ConfigError, match="mix"):
        from sa_redis_ids.redis.nodes import NodeSet

        NodeSet([redis.Redis.from_url(REDIS_URL), redis.asyncio.Redis.from_url(REDIS_URL)])


def test_the_sync_close_points_to_aclose() -> None:
    ids = AsyncRedisIds.embedded()
    with pytest.raises(TypeError, match="aclose"):
        ids.close()
    asyncio.run(ids.aclose())


def test_the_cluster_fixture_is_reachable_from_asyncio(
    redis_cluster: RedisClusterProcesses,
) -> None:
    async def main() -> int:
        client = AsyncRedisCluster.from_url(redis_cluster.url)
        try:
            return int(await client.ping())
        finally:
            await client.aclose()

    assert asyncio.run(main()) == 1


def test_from_sentinel_on_asyncio_issues_ids_from_the_master_with_replicas(
    sentinel_topology: SentinelTopology,
) -> None:
    sentinel_topology.wait_replicas_in_sync()
    prefix = f"as{uuid.uuid4().hex[:8]}"

    async def main() -> list[int]:
        ids = AsyncRedisIds.from_sentinel(
            sentinel_topology.addresses, sentinel_topology.service, prefix=prefix, replicas=1
        )
        try:
            users = ids.sequence("users")
            drawn = await asyncio.gather(*(users.next_ids(5) for _ in range(8)))
            return [v for chunk in drawn for v in chunk]
        finally:
            await ids.aclose()

    values = asyncio.run(main())
    assert sorted(values) == list(range(1, 41)), "every value once, acknowledged by a replica"
    master = sentinel_topology.master().client()
    assert int(master.get(f"{prefix}:{{users}}:seq") or 0) == 40
    for key in master.scan_iter(match=f"{prefix}:*"):
        master.delete(key)
