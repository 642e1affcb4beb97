"""Date-keyed generators on ``redis.asyncio`` clients: the same plans as the sync generators, run by
the asyncio driver (``AsyncIdGenerator``), on fakeredis's asyncio client, the real server and the
test cluster: plain, with ``floor=`` (a coroutine floor, first-of-day seeding under the Redlock
taken with the lock's plans), across midnight, and the Redlock's ``async with``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from types import SimpleNamespace
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster

from sa_redis_ids import LockNotAcquired, Redlock
from sa_redis_ids.generators.aio import AsyncIdGenerator
from sa_redis_ids.generators.daily_code import DailyCodeGenerator
from sa_redis_ids.generators.date_prefixed import DatePrefixedGenerator
from sa_redis_ids.generators.day_counter import DAY_INIT_LOCK_TTL, DatedGenerator
from sa_redis_ids.generators.day_window import day_start_ms, local_day
from sa_redis_ids.redis.nodes import Node, NodeSet
from sa_redis_ids.redis.plans import run_plan_async
from sa_redis_ids.testing import redis_time_ms, shift_time
from tests.support.services import REDIS_URL

TASKS = 20
PER_TASK = 200
FRESH_DAY = date(2031, 2, 3)


SCRIPTS = [
    "dated_take",
    "dated_fast",
    "dated_set",
    "lock_acquire",
    "lock_release",
    "set_if_greater",
]


@dataclass
class AioBackend:
    """One backend for asyncio clients: ``connect()`` makes an asyncio client inside the running
    loop; ``sync`` reaches the same Redis for reading its clock and cleaning up."""

    name: str
    make: Callable[[], Any]
    sync: Any
    prefix: str

    async def connect(self) -> Any:
        client = self.make()
        if self.name == "cluster":
            # redis-py's asyncio RedisCluster fails concurrent first calls of a script that is
            # not loaded yet (its NOSCRIPT fallback races: "'NoneType' object has no attribute
            # 'writelines'"), so the scripts are loaded before the tasks start.
            node = NodeSet([client]).nodes[0]
            for name in SCRIPTS:
                await client.script_load(node.script(name).script)
        return client


@pytest.fixture(params=["fake", "redis", "cluster"])
def aio(request: pytest.FixtureRequest) -> Iterator[AioBackend]:
    prefix = f"ta{uuid.uuid4().hex[:12]}"
    if request.param == "fake":
        server = fakeredis.FakeServer()
        yield AioBackend(
            "fake",
            lambda: fakeredis.FakeAsyncRedis(server=server),
            fakeredis.FakeRedis(server=server),
            prefix,
        )
        return
    if request.param == "redis":
        sync = request.getfixturevalue("real_redis")
        backend = AioBackend(
            "redis",
            lambda: redis.asyncio.Redis.from_url(REDIS_URL, socket_timeout=5),
            sync,
            prefix,
        )
    else:
        sync = request.getfixturevalue("cluster_client")
        url = request.getfixturevalue("redis_cluster").url
        backend = AioBackend(
            "cluster",
            lambda: redis.asyncio.cluster.RedisCluster.from_url(url, socket_timeout=5),
            sync,
            prefix,
        )
    yield backend
    for key in list(sync.scan_iter(match=f"{prefix}:*")):
        sync.delete(key)


def build(
    kind: str, client: Any, prefix: str, *, floor: Any = None, namespace: str = "orders"
) -> AsyncIdGenerator[Any]:
    """A generator on ``NodeSet([client])`` wired as ``RedisIds`` wires it (its day lock a
    Redlock on the seeded node), behind the asyncio front end."""
    nodes = NodeSet([client])

    def day_lock(name: str, on: list[Node]) -> Redlock:
        return Redlock(on, name, prefix=prefix, ttl=DAY_INIT_LOCK_TTL, timeout=DAY_INIT_LOCK_TTL)

    generator: DatedGenerator[Any]
    if kind == "date_prefixed":
        generator = DatePrefixedGenerator(nodes, prefix, namespace, floor=floor, locker=day_lock)
    else:
        generator = DailyCodeGenerator(nodes, prefix, namespace, floor=floor, locker=day_lock)
    assert nodes.asynchronous
    return AsyncIdGenerator(generator)


@contextmanager
def shifted(gen: AsyncIdGenerator[Any], sync: Any, ms: int) -> Iterator[None]:
    """``shift_time`` for a generator on asyncio clients: the shift is the generator's, the Redis
    time the window is rebuilt around is read by ``sync`` from the same server."""
    view = SimpleNamespace(
        redis_clock=gen.redis_clock,
        clock=gen.clock,
        _nodes=SimpleNamespace(nodes=[SimpleNamespace(client=sync)]),
    )
    with shift_time(view, ms):
        yield


def shift_for(gen: AsyncIdGenerator[Any], sync: Any, day: date, at: time) -> int:
    """The shift that puts the generator's Redis time at ``at`` on ``day`` (its time zone)."""
    view = SimpleNamespace(_nodes=SimpleNamespace(nodes=[SimpleNamespace(client=sync)]))
    target = int(datetime.combine(day, at, tzinfo=gen.clock.tz).timestamp() * 1000)
    return target - redis_time_ms(view)


def redis_today(gen: AsyncIdGenerator[Any], sync: Any) -> date:
    view = SimpleNamespace(_nodes=SimpleNamespace(nodes=[SimpleNamespace(client=sync)]))
    return local_day(redis_time_ms(view) + gen.redis_clock.shift_ms, gen.clock.tz)


async def draw(
    gen: AsyncIdGenerator[Any], tasks: int = TASKS, per_task: int = PER_TASK
) -> list[Any]:
    """``per_task`` values from each of ``tasks`` concurrent tasks, each in one call."""
    batches = await asyncio.gather(*(gen.next_ids(per_task) for _ in range(tasks)))
    assert all(len(batch) == per_task for batch in batches)
    return [value for batch in batches for value in batch]


def check(gen: AsyncIdGenerator[Any], values: list[Any], days: set[date]) -> None:
    """All unique, every value parses back to one of ``days`` and recomposes to itself."""
    assert len(set(values)) == len(values), "duplicates"
    for value in values:
        day, counter = gen.day_and_counter(value)
        assert day in days, (value, day, days)
        assert gen.compose(day, counter) == value


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


KINDS = ["date_prefixed", "daily_code"]


@pytest.mark.parametrize("kind", KINDS)
def test_concurrent_tasks_draw_unique_values_of_today(aio: AioBackend, kind: str) -> None:
    async def main() -> None:
        client = await aio.connect()
        try:
            gen = build(kind, client, aio.prefix)
            with shifted(gen, aio.sync, shift_for(gen, aio.sync, FRESH_DAY, time(12))):
                values = await draw(gen)
                values.append(await gen.next_id())
                assert await gen.next_ids(0) == []
            check(gen, values, {FRESH_DAY})
            counters = sorted(gen.day_and_counter(v)[1] for v in values)
            assert counters == list(range(1, TASKS * PER_TASK + 2)), "one counter, no gaps"
        finally:
            await client.aclose()

    run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_a_coroutine_floor_seeds_the_first_call_of_a_day_under_the_lock(
    aio: AioBackend, kind: str
) -> None:
    asked: list[date] = []

    async def floor(day: date) -> int:
        asked.append(day)
        await asyncio.sleep(0.01)  # a database query: the other tasks run meanwhile
        return 41

    async def main() -> None:
        client = await aio.connect()
        try:
            gen = build(kind, client, aio.prefix, floor=floor)
            with shifted(gen, aio.sync, shift_for(gen, aio.sync, FRESH_DAY, time(12))):
                values = await draw(gen)
                check(gen, values, {FRESH_DAY})
                counters = sorted(gen.day_and_counter(v)[1] for v in values)
                assert counters[0] > 41, "the seeded counter continues above the floor"
                assert len(set(counters)) == len(counters)
                assert asked and set(asked) == {FRESH_DAY}
                # the lock was released: no lock key of the day is left
                lock_keys = [
                    k for k in aio.sync.scan_iter(match=f"{aio.prefix}:lock:*") if b"fence" not in k
                ]
                assert lock_keys == []
                fences = list(aio.sync.scan_iter(match=f"{aio.prefix}:lock:*:fence"))
                assert len(fences) == 1, "the day's lock was taken (its fence counter exists)"
                seen = len(asked)
                more = await draw(
                    gen, tasks=5, per_task=10
                )  # the counter exists: no floor, no lock
                check(gen, values + more, {FRESH_DAY})
                assert len(asked) == seen
        finally:
            await client.aclose()

    run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_a_floor_guards_an_existing_counter_below_it(aio: AioBackend, kind: str) -> None:
    async def floor(day: date) -> int:
        return 500

    async def main() -> None:
        client = await aio.connect()
        try:
            plain = build(kind, client, aio.prefix)
            guarded = build(kind, client, aio.prefix, floor=floor)
            shift = shift_for(plain, aio.sync, FRESH_DAY, time(9))
            with shifted(plain, aio.sync, shift), shifted(guarded, aio.sync, shift):
                first = await plain.next_ids(3)  # the day's counter exists, at 3
                values = await draw(guarded, tasks=10, per_task=20)
            check(guarded, first + values, {FRESH_DAY})
            assert min(guarded.day_and_counter(v)[1] for v in values) > 500, (
                "a counter below the floor is healed above it before anything is issued"
            )
        finally:
            await client.aclose()

    run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_values_across_midnight_belong_to_their_days(aio: AioBackend, kind: str) -> None:
    async def main() -> None:
        client = await aio.connect()
        try:
            gen = build(kind, client, aio.prefix)
            before = FRESH_DAY - timedelta(days=1)
            with shifted(gen, aio.sync, shift_for(gen, aio.sync, before, time(23, 59, 59))):
                evening = await draw(gen, tasks=10, per_task=50)
            check(gen, evening, {before})
            # Straddle midnight: tasks start 300 ms before it and keep drawing past it.
            with shifted(
                gen, aio.sync, shift_for(gen, aio.sync, before, time(23, 59, 59, 700_000))
            ):
                straddle: list[Any] = []
                deadline = asyncio.get_running_loop().time() + 1.0
                while asyncio.get_running_loop().time() < deadline:
                    straddle += await draw(gen, tasks=10, per_task=2)
                    await asyncio.sleep(0.02)
                assert redis_today(gen, aio.sync) == FRESH_DAY
                after = await draw(gen, tasks=10, per_task=50)
                assert gen.clock.window.days[1] == FRESH_DAY, "the window moved on with the day"
            check(gen, evening + straddle + after, {before, FRESH_DAY})
            assert {gen.day_and_counter(v)[0] for v in after} == {FRESH_DAY}
            new_day = sorted(
                gen.day_and_counter(v)[1]
                for v in straddle + after
                if gen.day_and_counter(v)[0] == FRESH_DAY
            )
            assert new_day[0] == 1, "the new day's counter starts over"
        finally:
            await client.aclose()

    run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_sound_calls_are_short_ones_on_the_asyncio_driver(aio: AioBackend, kind: str) -> None:
    """Once a call has shown the node's identity, the next ones are ``dated_fast`` calls (on a
    server with a replication ID; fakeredis has none, and every call is ``dated_take``)."""

    async def main() -> None:
        client = await aio.connect()
        try:
            gen = build(kind, client, aio.prefix)
            node = gen._nodes.nodes[0]
            names: list[str] = []
            run_async = node.run_async

            async def recording(name: str, keys: Any, args: Any) -> Any:
                names.append(name)
                return await run_async(name, keys, args)

            node.run_async = recording  # type: ignore[method-assign]
            values = [await gen.next_id() for _ in range(4)]
            values += await gen.next_ids(3)
            counters = [gen.day_and_counter(value)[1] for value in values]
            assert counters == list(range(1, 8))
            assert bool(gen.high.identities[0]) == (aio.name != "fake")
            short = "dated_fast" if aio.name != "fake" else "dated_take"
            assert names == ["dated_take"] + [short] * 4
        finally:
            await client.aclose()

    run(main)


def test_a_window_miss_is_rebuilt_on_the_asyncio_driver(aio: AioBackend) -> None:
    async def main() -> None:
        client = await aio.connect()
        try:
            gen = build("date_prefixed", client, aio.prefix)
            gen.clock.recenter(0)  # a window around 1970: the script reports the miss
            values = await draw(gen, tasks=5, per_task=10)
            today = redis_today(gen, aio.sync)
            check(gen, values, {today, today - timedelta(days=1), today + timedelta(days=1)})
            assert today in gen.clock.window.days
        finally:
            await client.aclose()

    run(main)


def test_redlock_async_with_on_asyncio_clients(aio: AioBackend) -> None:
    async def main() -> None:
        client = await aio.connect()
        try:
            nodes = NodeSet([client])
            first = Redlock(nodes, "aio-lock", prefix=aio.prefix, ttl=5, timeout=0)
            async with first as lease:
                assert lease.held and lease.fencing_token >= 1
                assert aio.sync.get(first.key) is not None
                other = Redlock(nodes, "aio-lock", prefix=aio.prefix, ttl=5, timeout=0.3)
                with pytest.raises(LockNotAcquired):
                    async with other:
                        pass  # pragma: no cover - never acquired
            assert not first.held and aio.sync.get(first.key) is None
            async with Redlock(nodes, "aio-lock", prefix=aio.prefix, ttl=5) as later:
                assert later.fencing_token > lease.fencing_token
        finally:
            await client.aclose()

    run(main)


def test_take_block_plan_answers_a_dated_block_on_the_asyncio_driver(aio: AioBackend) -> None:
    async def main() -> None:
        client = await aio.connect()
        try:
            gen = build("date_prefixed", client, aio.prefix)
            with shifted(gen, aio.sync, shift_for(gen, aio.sync, FRESH_DAY, time(12))):
                block = await run_plan_async(gen.generator._take_block_plan(5))  # type: ignore[attr-defined]
            assert block.day == FRESH_DAY and len(block.values) == 5
            check(gen, block.values, {FRESH_DAY})
            assert block.day_end_ms == day_start_ms(FRESH_DAY + timedelta(days=1), gen.clock.tz)
            assert 0 < block.day_end_ms - block.redis_now_ms <= 12 * 3_600_000 + 1_000
        finally:
            await client.aclose()

    run(main)
