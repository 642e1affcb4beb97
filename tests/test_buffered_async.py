"""The asyncio segment buffer: one fetch in flight, prefetch as a task, the thread buffer's rules.

Each test runs its own event loop with ``asyncio.run``. Fetches are counted and held at a gate (an
effect awaiting an ``asyncio.Event``) by wrapping the buffer's fetch plan, so "exactly one fetch"
and "prefetched before running dry" are read from counts and statistics, never from timing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from datetime import date
from types import SimpleNamespace
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio

from sa_redis_ids import Buffering, RedisUnavailable
from sa_redis_ids.buffering import AsyncSegmentBuffer, BufferStats, Segment, day_plan_source
from sa_redis_ids.generators.aio import AsyncIdGenerator
from sa_redis_ids.generators.day_counter import DatedBlock
from sa_redis_ids.generators.sequence import SequenceGenerator
from sa_redis_ids.redis.nodes import NodeSet, RedisClock
from sa_redis_ids.redis.plans import Effect, Plan
from tests.support.services import REDIS_URL, missing
from tests.support.uniqueness import duplicates

Scenario = Callable[[Any, str], Awaitable[None]]


class FakeClock:
    """A monotonic clock that only moves when the test says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Gate(Effect):
    """An effect that waits until the test opens the gate (asyncio driver only)."""

    __slots__ = ("event",)

    def __init__(self, event: asyncio.Event):
        self.event = event

    async def run_async(self) -> None:
        await self.event.wait()


class Fail(Effect):
    """An effect that raises ``error`` (a lost connection, say)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException):
        self.error = error

    async def run_async(self) -> None:
        raise self.error


class Watched:
    """Wraps a buffer's fetch plan: counts fetches, can hold them at a gate or make one fail.

    ``fail_after_take``: the failing fetch takes its values from Redis first, then loses the reply
    (a gap); otherwise it fails before reaching Redis.
    """

    def __init__(self, buffer: AsyncSegmentBuffer[Any]) -> None:
        self.source = buffer._fetch_plan_source
        self.sizes: list[int] = []
        self.gate: asyncio.Event | None = None
        self.fail_on: set[int] = set()
        self.fail_after_take = False
        buffer._fetch_plan_source = self.fetch

    def fetch(self, n: int) -> Plan[Segment[Any]]:
        self.sizes.append(n)
        call = len(self.sizes)
        if self.gate is not None:
            yield Gate(self.gate)
        if call in self.fail_on and not self.fail_after_take:
            yield Fail(RedisUnavailable("connection lost before the request"))
        segment = yield from self.source(n)
        if call in self.fail_on:
            yield Fail(RedisUnavailable("connection lost after the request"))
        return segment


def counter_source(lifetimes: Iterator[float | None] | None = None) -> Any:
    """A fetch plan over an in-memory counter (1, 2, 3 …), with the given segment lifetimes."""
    taken = [0]

    def fetch(n: int) -> Plan[Segment[int]]:
        first = taken[0] + 1
        taken[0] += n
        lifetime = None if lifetimes is None else next(lifetimes)
        return Segment(range(first, first + n), lifetime=lifetime)
        yield  # pragma: no cover - makes this function a plan

    return fetch


async def until(condition: Callable[[], bool]) -> None:
    """Let the other tasks run until ``condition`` holds (counted loop steps, no clock)."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the condition never held")


def stats(ids: AsyncIdGenerator[Any]) -> BufferStats:
    found = ids.stats()
    assert found is not None, "the generator is not buffered"
    return found


def sequence(
    client: Any, prefix: str, block: Buffering, ns: str = "users"
) -> AsyncIdGenerator[int]:
    return AsyncIdGenerator(SequenceGenerator(NodeSet([client]), prefix, ns, block=block))


def buffer_of(ids: AsyncIdGenerator[Any]) -> AsyncSegmentBuffer[Any]:
    assert ids.buffer is not None
    return ids.buffer


# -- backends --------------------------------------------------------------------------------------


async def _on_fake(scenario: Scenario, prefix: str) -> None:
    client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    try:
        await scenario(client, prefix)
    finally:
        await client.aclose()


async def _on_real(scenario: Scenario, prefix: str) -> None:
    client = redis.asyncio.Redis.from_url(REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        try:
            await client.ping()
        except redis.ConnectionError:
            missing(f"no Redis server at {REDIS_URL}")
        await scenario(client, prefix)
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@pytest.fixture(params=["fake", "redis"])
def run_on(request: pytest.FixtureRequest) -> Callable[[Scenario], None]:
    """Run a scenario ``(async client, key prefix)`` on fakeredis or the real server."""
    backend = _on_fake if request.param == "fake" else _on_real

    def run(scenario: Scenario) -> None:
        asyncio.run(backend(scenario, f"t{uuid.uuid4().hex[:12]}"))

    return run


# -- many tasks on a real generator ----------------------------------------------------------------


def test_64_tasks_share_one_buffer_without_duplicates_or_lost_blocks(
    run_on: Callable[[Scenario], None],
) -> None:
    drawn: list[int] = []

    async def scenario(client: Any, prefix: str) -> None:
        ids = sequence(client, prefix, Buffering(100, max_block=2000))

        async def work(slot: int) -> list[int]:
            out: list[int] = []
            for i in range(270):
                if i % 10 == slot % 10:
                    out.extend(await ids.next_ids(slot % 13 + i % 31))
                else:
                    out.append(await ids.next_id())
            return out

        chunks = await asyncio.gather(*(work(slot) for slot in range(64)))
        drawn.extend(v for chunk in chunks for v in chunk)
        await buffer_of(ids).settle()
        found = stats(ids)
        generator = ids.generator
        assert isinstance(generator, SequenceGenerator) and generator.buffer is not None
        counter = int(await client.get(generator.counter_key))
        assert found.ids_taken == counter, "every value taken from Redis is counted"
        assert found.ids_issued == len(drawn)
        assert len(set(range(1, counter + 1)) - set(drawn)) == found.ids_left, "no value lost"
        assert found.prefetches > 0, "blocks were fetched in the background"
        assert found.block_size > 100, "the block grew: the buffer is used fast"
        assert found.ids_dropped == 0
        assert generator.buffer.stats().blocks_taken == 0, "the thread buffer was never used"

    run_on(scenario)
    assert 45_000 < len(drawn) < 60_000
    assert duplicates(drawn) == {}


def test_a_dry_buffer_with_many_waiters_makes_exactly_one_fetch(
    run_on: Callable[[Scenario], None],
) -> None:
    async def scenario(client: Any, prefix: str) -> None:
        ids = sequence(client, prefix, Buffering(100, max_block=100, prefetch=None))
        watched = Watched(buffer_of(ids))
        watched.gate = asyncio.Event()
        waiters = [asyncio.ensure_future(ids.next_id()) for _ in range(64)]
        await until(lambda: bool(watched.sizes))  # the fetch waits at the gate
        await until(lambda: all(not w.done() for w in waiters))
        assert watched.sizes == [100], "one fetch is in flight"
        watched.gate.set()
        values = await asyncio.gather(*waiters)
        assert sorted(values) == list(range(1, 65))
        assert watched.sizes == [100]
        found = stats(ids)
        assert (found.blocks_taken, found.waits, found.ids_left) == (1, 64, 36)

    run_on(scenario)


def test_a_shortfall_of_a_block_or_more_is_fetched_directly(
    run_on: Callable[[Scenario], None],
) -> None:
    async def scenario(client: Any, prefix: str) -> None:
        ids = sequence(client, prefix, Buffering(10, max_block=10, prefetch=None))
        watched = Watched(buffer_of(ids))
        assert await ids.next_ids(3) == [1, 2, 3]
        assert await ids.next_ids(25) == list(range(4, 29)), "7 buffered, 18 fetched directly"
        assert watched.sizes == [10, 18]
        assert await ids.next_id() == 29, "nothing was buffered from the direct fetch"
        assert watched.sizes == [10, 18, 10]

    run_on(scenario)


@pytest.mark.parametrize("after_take", [False, True], ids=["before-redis", "reply-lost"])
def test_a_failed_prefetch_is_retried_in_the_foreground_without_duplicates(
    run_on: Callable[[Scenario], None], after_take: bool
) -> None:
    async def scenario(client: Any, prefix: str) -> None:
        ids = sequence(client, prefix, Buffering(10, max_block=10))
        watched = Watched(buffer_of(ids))
        watched.fail_on = {2}
        watched.fail_after_take = after_take
        first = [await ids.next_id() for _ in range(10)]  # the second starts the prefetch
        await buffer_of(ids).settle()
        assert stats(ids).fetch_errors == 1
        assert stats(ids).prefetches == 0
        then = [await ids.next_id() for _ in range(10)]  # the foreground retries
        assert first == list(range(1, 11))
        assert then == list(range(21 if after_take else 11, 31 if after_take else 21))
        assert len(watched.sizes) >= 3
        await buffer_of(ids).settle()
        found = stats(ids)
        assert found.ids_issued == 20
        assert found.prefetches >= 1, "prefetching resumed after the error"

    run_on(scenario)


def test_drop_discards_the_buffer_and_a_fetch_in_flight(run_on: Callable[[Scenario], None]) -> None:
    async def scenario(client: Any, prefix: str) -> None:
        ids = sequence(client, prefix, Buffering(10, max_block=10))
        buffer = buffer_of(ids)
        watched = Watched(buffer)
        assert await ids.next_ids(3) == [1, 2, 3]
        watched.gate = asyncio.Event()
        await until(lambda: len(watched.sizes) == 2)  # the prefetch of 11..20 waits at the gate
        assert buffer.drop() == 7
        watched.gate.set()
        await buffer.settle()
        assert await ids.next_id() == 21, "the block fetched before the drop is a gap"
        assert stats(ids).ids_dropped == 10

    run_on(scenario)


def test_a_failed_foreground_fetch_raises_in_its_starter_and_the_waiters_fetch_again(
    run_on: Callable[[Scenario], None],
) -> None:
    async def scenario(client: Any, prefix: str) -> None:
        ids = sequence(client, prefix, Buffering(100, max_block=100, prefetch=None))
        watched = Watched(buffer_of(ids))
        watched.gate = asyncio.Event()
        watched.gate.set()
        watched.fail_on = {1}
        results = await asyncio.gather(*(ids.next_id() for _ in range(8)), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], RedisUnavailable)
        assert sorted(r for r in results if isinstance(r, int)) == list(range(1, 8))
        assert len(watched.sizes) == 2, "one failed fetch, one fetch for every waiter"

    run_on(scenario)


def test_a_cancelled_waiter_leaves_the_fetch_to_the_others(
    run_on: Callable[[Scenario], None],
) -> None:
    async def scenario(client: Any, prefix: str) -> None:
        ids = sequence(client, prefix, Buffering(10, max_block=10, prefetch=None))
        watched = Watched(buffer_of(ids))
        watched.gate = asyncio.Event()
        starter = asyncio.ensure_future(ids.next_id())
        waiter = asyncio.ensure_future(ids.next_id())
        await until(lambda: bool(watched.sizes))
        starter.cancel()  # the task that started the fetch goes away
        await until(starter.done)
        watched.gate.set()
        assert await waiter == 1
        assert starter.cancelled()
        assert await ids.next_ids(9) == list(range(2, 11)), "the fetched block was not lost"
        assert watched.sizes == [10]

    run_on(scenario)


def test_an_unbuffered_async_generator_has_no_buffer() -> None:
    async def scenario() -> None:
        client = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
        ids = AsyncIdGenerator(SequenceGenerator(NodeSet([client]), "p", "users"))
        assert ids.buffer is None and ids.stats() is None
        assert await ids.next_ids(2) == [1, 2]
        assert await ids.next_id() == 3
        await client.aclose()

    asyncio.run(scenario())


# -- the shared rules, on an in-memory source ------------------------------------------------------


def test_an_expired_segment_is_dropped_and_the_next_block_is_fetched() -> None:
    clock = FakeClock()
    source = counter_source(iter([5.0, 5.0, None]))
    options = Buffering(10, prefetch=None).resolved(10**9)
    buffer: AsyncSegmentBuffer[int] = AsyncSegmentBuffer(
        source, options, clock=clock, expiring=True
    )

    async def scenario() -> None:
        assert [await buffer.next_id() for _ in range(3)] == [1, 2, 3]
        clock.now += 5.0
        assert await buffer.next_id() == 11, "7 values of the expired segment were dropped"
        assert await buffer.next_ids(2) == [12, 13]
        clock.now += 5.0
        assert await buffer.next_ids(2) == [21, 22]

    asyncio.run(scenario())
    found = buffer.stats()
    assert (found.blocks_dropped, found.ids_dropped, found.blocks_taken) == (2, 14, 3)


def test_block_size_doubles_when_fast_and_halves_when_slow() -> None:
    clock = FakeClock()
    options = Buffering(100, min_block=25, max_block=800, target_seconds=10).resolved(10**9)
    buffer: AsyncSegmentBuffer[int] = AsyncSegmentBuffer(counter_source(), options, clock=clock)

    async def sizes(count: int, step: float) -> list[int]:
        """Draw one value at a time (``step`` seconds apart) until each of ``count`` blocks came."""
        found = []
        for _ in range(count):
            before = buffer.stats().blocks_taken
            while buffer.stats().blocks_taken == before:
                clock.now += step
                await buffer.next_id()
                await buffer.settle()
            found.append(buffer.stats().block_size)
        return found

    async def scenario() -> None:
        await buffer.next_id()
        assert await sizes(5, 0.0) == [200, 400, 800, 800, 800]
        assert await sizes(7, 1.0) == [400, 200, 100, 50, 25, 25, 25]
        assert await sizes(3, 0.5) == [25, 25, 25]
        values = await buffer.next_ids(5000)
        assert values == sorted(set(values)) and len(values) == 5000

    asyncio.run(scenario())


def test_a_days_block_expires_before_its_day_ends_by_the_redis_clock() -> None:
    """:func:`day_plan_source` over a date-keyed generator's ``_take_block_plan``."""
    clock = FakeClock()
    counter = iter(range(1, 10_000))

    def take_block_plan(n: int) -> Plan[DatedBlock[int]]:  # Redis read 0 ms: maybe 0.999 ms
        values = [next(counter) for _ in range(n)]
        return DatedBlock(date(2026, 11, 22), values, redis_now_ms=0, day_end_ms=1000)
        yield  # pragma: no cover - makes this function a plan

    generator = SimpleNamespace(redis_clock=RedisClock(), _take_block_plan=take_block_plan)
    fetch, _ = day_plan_source(generator)
    options = Buffering(10, prefetch=None).resolved(10**9)
    buffer: AsyncSegmentBuffer[int] = AsyncSegmentBuffer(fetch, options, clock=clock, expiring=True)

    async def scenario() -> None:
        assert await buffer.next_id() == 1
        clock.now += 0.999
        assert await buffer.next_id() == 11, "dropped by 0.999 s after the request was sent"

    asyncio.run(scenario())
    assert buffer.stats().ids_dropped == 9


def test_a_block_of_a_retired_period_in_flight_is_dropped_when_it_lands() -> None:
    gate = asyncio.Event()
    taken = [0]

    def fetch(n: int) -> Plan[Segment[int]]:
        first = taken[0] + 1
        taken[0] += n
        if first > 1:  # taken from the source now, lands after the period is retired
            yield Gate(gate)
        return Segment(range(first, first + n), lifetime=1e6, period_end=1000)

    options = Buffering(10, max_block=10).resolved(10**9)
    buffer: AsyncSegmentBuffer[int] = AsyncSegmentBuffer(fetch, options, expiring=True)

    async def scenario() -> None:
        assert [await buffer.next_id(), await buffer.next_id()] == [1, 2]  # past the prefetch point
        await until(lambda: taken[0] == 20)  # the prefetch waits at the gate
        assert buffer.end_periods(1000) == 8
        gate.set()
        await buffer.settle()
        assert buffer.stats().ids_left == 0, "the block 11..20 of the retired period was dropped"

    asyncio.run(scenario())
