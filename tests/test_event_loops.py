"""One ``AsyncRedisIds`` on several event loops: threads that each run their own loop, and loops
that close and are followed by new ones (``asyncio.run()`` per request, a loop per test).

Each loop gets a client of its own (see ``sa_redis_ids.redis.loops``); no call may raise
redis-py's "bound to a different event loop" ``RuntimeError`` (nor anything else), and the values
of every loop together stay unique.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

from sa_redis_ids.asyncio import AsyncRedisIds
from tests.conftest import Backend
from tests.support.services import REDIS_URL
from tests.support.topologies import SentinelTopology
from tests.test_asyncio_front import _async_ids

THREADS = 8
STRATEGIES = {
    "sequence": {},
    "snowflake": {},
    "short_id": {"pool_size": 100_000, "offset": 100_000},
    "date_prefixed": {},
    "daily_code": {"digits": 7},
}


def _draw_from_loops(ids: AsyncRedisIds, make: Any) -> tuple[list[Any], list[BaseException]]:
    """Values drawn by 8 threads, each running two loops one after the other (3 tasks each)."""
    values: list[Any] = []
    errors: list[BaseException] = []

    async def task() -> None:
        generator = make(ids)
        for _ in range(3):
            values.extend(await generator.next_ids(2))
            values.append(await generator.next_id())

    async def loop() -> None:
        await asyncio.gather(*(task() for _ in range(3)))

    def thread() -> None:
        try:
            for _ in range(2):
                asyncio.run(loop())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=thread) for _ in range(THREADS)]
    for each in threads:
        each.start()
    for each in threads:
        each.join()
    return values, errors


def _unique_from_loops(backend: Backend, strategy: str) -> None:
    ids = _async_ids(backend)
    values, errors = _draw_from_loops(
        ids, lambda ids: getattr(ids, strategy)("loops", **STRATEGIES[strategy])
    )
    assert errors == []
    assert len(values) == THREADS * 2 * 3 * 9
    assert len(set(values)) == len(values)


@pytest.mark.parametrize("backend", ["fake", "redis", "valkey"], indirect=True)
@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_threads_with_their_own_loops_share_one_instance(backend: Backend, strategy: str) -> None:
    _unique_from_loops(backend, strategy)


@pytest.mark.parametrize("backend", ["cluster"], indirect=True)
def test_threads_with_their_own_loops_share_one_cluster_instance(backend: Backend) -> None:
    _unique_from_loops(backend, "sequence")  # each loop gets a cluster client of its own


def test_a_buffered_generator_serves_one_loop_and_the_others_draw_directly() -> None:
    ids = AsyncRedisIds.embedded()
    values, errors = _draw_from_loops(ids, lambda ids: ids.sequence("buffered", block=50))
    assert errors == []
    assert len(values) == THREADS * 2 * 3 * 9
    assert len(set(values)) == len(values)


def test_each_loop_closes_its_own_connections(backend: Backend) -> None:
    if backend.name == "fake":
        pytest.skip("the embedded Redis has no connections")
    ids = _async_ids(backend)
    users = ids.sequence("closing")

    async def draw_and_close() -> int:
        value = await users.next_id()
        await ids.aclose()
        return value

    drawn = [asyncio.run(draw_and_close()) for _ in range(3)]
    assert drawn == sorted(set(drawn))


def test_aclose_on_a_loop_that_never_called_leaves_other_loops_clients_alone(
    backend: Backend,
) -> None:
    """``asyncio.run(main())`` then ``asyncio.run(ids.aclose())``, and an ``aclose()`` from a
    thread's loop while the loop that drew still runs: no ``RuntimeError`` of a client bound to
    another loop, and the running loop keeps drawing."""
    if backend.name == "fake":
        pytest.skip("the embedded Redis has no connections")
    ids = _async_ids(backend)
    users = ids.sequence("aclose_elsewhere")
    first = asyncio.run(users.next_id())
    asyncio.run(ids.aclose())  # the loop that drew has closed

    running = asyncio.new_event_loop()
    thread = threading.Thread(target=running.run_forever, daemon=True)
    thread.start()
    try:
        second = asyncio.run_coroutine_threadsafe(users.next_id(), running).result(timeout=10)
        asyncio.run(ids.aclose())  # a loop that never called
        third = asyncio.run_coroutine_threadsafe(users.next_id(), running).result(timeout=10)
        asyncio.run_coroutine_threadsafe(ids.aclose(), running).result(timeout=10)
    finally:
        running.call_soon_threadsafe(running.stop)
        thread.join()
        running.close()
    assert [first, second, third] == sorted({first, second, third})


def test_the_event_loops_benchmark_reports_both_loops(real_redis: Any) -> None:
    from benchmarks import event_loops

    result = event_loops.run(REDIS_URL, calls=20)
    assert set(result["rows"]) == {"first loop (the given client)", "a later loop (its own client)"}
    for row in result["rows"].values():
        assert row["x_ping"] > 0 and row["lookup_ns"] > 0
    assert "× PING" in event_loops.render(result)


def test_threads_with_their_own_loops_share_one_sentinel_instance(
    sentinel_topology: SentinelTopology,
) -> None:
    sentinel_topology.wait_replicas_in_sync()
    ids = AsyncRedisIds.from_sentinel(
        sentinel_topology.addresses, sentinel_topology.service, prefix=f"l{uuid.uuid4().hex[:8]}"
    )
    values, errors = _draw_from_loops(ids, lambda ids: ids.sequence("loops"))
    assert errors == []
    assert sorted(values) == list(range(1, THREADS * 2 * 3 * 9 + 1))
