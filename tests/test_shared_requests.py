"""A request carries what decides its values, also when its round trip is shared.

Concurrent callers of one generator ride one script call (`sa_redis_ids.sharing`). These tests hold
that call in flight on a real Redis (``CLIENT PAUSE``: the server runs no write until the test
lets it go, as a busy or slow server would), queue other requests behind it, and check that each
request is served as it would be alone:

* a flush queued behind a caller outside any flush is served under the flush's column floor, on
  the sync and the asyncio front end (after a loss, it never gets a value the table holds);
* single short IDs served by one call are independent random positions, not a run;
* each failed waiter raises an exception of its own (see ``tests/test_sharing.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from sa_redis_ids import RedisIds
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.generators.base import IdGenerator
from tests.support.orm import STRATEGIES, STRATEGY_IDS, Strategy
from tests.support.servers import RedisServer
from tests.test_column_floor import insert_rows, row_model, values_in
from tests.test_sharing import calls_counted, wait_until

TABLE_ROWS = 1000
OWN_ROWS = 5000
"""Rows a flush's own transaction inserts before it takes IDs (five headrooms)."""
POOL = 10_000_000
"""The short-ID pool of the independence tests (the default size)."""
CLOSE = 10
"""Two short IDs this close are "adjacent"."""


@contextmanager
def paused(server: RedisServer) -> Iterator[None]:
    """Every write to ``server`` (every script call) waits until the block ends
    (``CLIENT PAUSE ... WRITE``; reads such as ``INFO`` go on)."""
    admin = server.client()
    admin.client_pause(60_000, all=False)
    try:
        yield
    finally:
        admin.client_unpause()
        admin.close()


def _thread(target: Callable[[], Any], out: list[Any], errors: list[BaseException]) -> Any:
    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # collected: the test asserts there are none
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _lose(server: RedisServer) -> None:
    client = server.client()
    client.flushall()
    client.close()


def _values_elsewhere(server: RedisServer, strategy: Strategy, count: int) -> list[Any]:
    """``count`` values of the strategy that another deployment (another key prefix) issued."""
    other = strategy.make(RedisIds.from_url(server.url, prefix="elsewhere"), "held")
    return list(other.next_ids(count))


def _flush_behind_a_call_outside(
    server: RedisServer, generator: IdGenerator[Any], flush: Callable[[], list[Any]]
) -> list[Any]:
    """Run ``flush`` while a call of ``generator`` outside any flush is in flight: its request
    waits and rides the next shared call. Returns the values the flush got."""
    out: list[Any] = []
    errors: list[BaseException] = []
    with paused(server):
        outside = _thread(generator.next_id, out, errors)
        wait_until(lambda: generator._shared.threads._calls == 1, "the call outside is in flight")
        flushing = _thread(flush, out, errors)
        wait_until(lambda: generator._shared.waiting == 1, "the flush waits for the shared call")
    outside.join(timeout=60)
    flushing.join(timeout=60)
    assert errors == []
    flushed: list[Any] = next(each for each in out if isinstance(each, list))
    assert len(flushed) == 5
    return flushed


@pytest.mark.parametrize("strategy", STRATEGIES, ids=STRATEGY_IDS)
def test_a_flush_queued_behind_a_call_outside_any_flush_reads_its_column_floor(
    server: RedisServer, tmp_path: Path, strategy: Strategy
) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    first = row_model(strategy.make(RedisIds.from_url(server.url), "held"))
    first.metadata.create_all(engine)
    table = insert_rows(engine, first, TABLE_ROWS)
    _lose(server)
    # A new process: it never flushed, so a call outside a flush cannot read the column.
    generator: IdGenerator[Any] = strategy.make(RedisIds.from_url(server.url), "held")
    model = row_model(generator)
    flushed = _flush_behind_a_call_outside(server, generator, lambda: insert_rows(engine, model, 5))
    assert not set(flushed) & set(table), "the flush got a value the table holds"
    assert sorted(values_in(engine, model)) == sorted(table + flushed)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=STRATEGY_IDS)
def test_a_queued_flush_reads_the_rows_of_its_own_transaction(
    server: RedisServer, tmp_path: Path, strategy: Strategy
) -> None:
    """The floor of a flush is read through the flush's own connection, so it sees the rows its
    transaction inserted and did not commit yet: also when the call is made by a caller outside
    any flush (which could only read the committed rows)."""
    engine = create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    generator: IdGenerator[Any] = strategy.make(RedisIds.from_url(server.url), "held")
    model = row_model(generator)
    model.metadata.create_all(engine)
    # More rows than a heal's headroom: a floor that misses them lands among them.
    rows = _values_elsewhere(server, strategy, OWN_ROWS)

    def flush() -> list[Any]:
        with Session(engine, expire_on_commit=False) as session:
            session.execute(insert(model), [{"value": value} for value in rows])  # not committed
            objects = [model() for _ in range(5)]
            session.add_all(objects)
            session.flush()
            session.commit()
            return [each.value for each in objects]

    flushed = _flush_behind_a_call_outside(server, generator, flush)
    assert not set(flushed) & set(rows), "the flush got a value its own transaction holds"


@pytest.mark.parametrize("factory", ["sequence", "date_prefixed", "daily_code"])
def test_an_async_flush_queued_behind_a_task_outside_any_flush_reads_its_own_transaction(
    server: RedisServer, tmp_path: Path, factory: str
) -> None:
    """`test_a_queued_flush_reads_the_rows_of_its_own_transaction` on the asyncio front end,
    under ``AsyncSession``: the floor is read through the flush's own connection."""
    options: dict[str, Any] = {"daily_code": {"digits": 6}}.get(factory, {})
    url = f"sqlite+aiosqlite:///{tmp_path / 'rows.db'}"
    rows = getattr(RedisIds.from_url(server.url, prefix="elsewhere"), factory)(
        "held", **options
    ).next_ids(OWN_ROWS)

    async def flush(engine: Any, model: Any) -> list[Any]:
        async with AsyncSession(engine, expire_on_commit=False) as session:
            await session.execute(insert(model), [{"value": value} for value in rows])
            objects = [model() for _ in range(5)]
            session.add_all(objects)
            await session.flush()
            await session.commit()
            return [each.value for each in objects]

    async def scenario() -> list[Any]:
        engine = create_async_engine(url)
        ids = AsyncRedisIds.from_url(server.url)
        try:
            generator = getattr(ids, factory)("held", **options)
            model = row_model(generator)
            async with engine.begin() as connection:
                await connection.run_sync(model.metadata.create_all)
            shared = generator.generator._shared.tasks
            with paused(server):
                outside = asyncio.ensure_future(generator.next_id())
                while not any(state.calls for state in list(shared._states.values())):
                    await asyncio.sleep(0.002)
                flushing = asyncio.ensure_future(flush(engine, model))
                while shared.waiting != 1:
                    await asyncio.sleep(0.002)
            await outside
            return await flushing
        finally:
            await ids.aclose()
            await engine.dispose()

    flushed = asyncio.run(scenario())
    assert len(flushed) == 5
    assert not set(flushed) & set(rows), "the flush got a value its own transaction holds"


def _close_pairs(values: list[int]) -> int:
    """How many pairs of ``values`` lie within `CLOSE` of each other."""
    ordered = sorted(values)
    pairs = 0
    for i, value in enumerate(ordered):
        j = i + 1
        while j < len(ordered) and ordered[j] - value <= CLOSE:
            pairs += 1
            j += 1
    return pairs


def _expected_close_pairs(count: int) -> float:
    """The expected number of close pairs among ``count`` independent random positions of the
    pool: each of the ``count·(count−1)/2`` pairs is close with probability about ``2·CLOSE/POOL``."""
    return count * (count - 1) / 2 * 2 * CLOSE / POOL


def test_single_short_ids_served_by_one_call_of_threads_stay_independent(
    server: RedisServer,
) -> None:
    ids = RedisIds.from_url(server.url)
    calls = calls_counted(ids)
    short = ids.short_id("independent")
    short.next_id()  # the pool exists: the call below is a plain draw
    count = 300
    out: list[Any] = []
    errors: list[BaseException] = []
    with paused(server):
        leader = _thread(short.next_id, out, errors)
        wait_until(lambda: short._shared.threads._calls == 1, "the first call is in flight")
        waiters = [_thread(short.next_id, out, errors) for _ in range(count)]
        wait_until(lambda: short._shared.waiting == count, "every request waits")
    for thread in [leader, *waiters]:
        thread.join(timeout=60)
    assert errors == []
    assert calls("independent") == 3, "the first draw, the call in flight, one for all waiters"
    assert len(set(out)) == count + 1
    # Expected about 0.09 close pairs among 301; a run would give about 300.
    assert _expected_close_pairs(count + 1) < 0.1
    assert _close_pairs(out) <= 3


def test_single_short_ids_served_by_one_call_of_tasks_stay_independent(
    server: RedisServer,
) -> None:
    count = 400

    async def scenario() -> tuple[list[int], float]:
        ids = AsyncRedisIds.from_url(server.url)
        try:
            calls = calls_counted(ids)
            short = ids.short_id("independent")
            await short.next_id()
            shared = short.generator._shared.tasks
            with paused(server):
                leader = asyncio.ensure_future(short.next_id())
                while not any(state.calls for state in list(shared._states.values())):
                    await asyncio.sleep(0.002)
                waiters = [asyncio.ensure_future(short.next_id()) for _ in range(count)]
                while shared.waiting != count:
                    await asyncio.sleep(0.002)
            await leader
            values = list(await asyncio.gather(*waiters))
            return values, calls("independent")
        finally:
            await ids.aclose()

    values, calls = asyncio.run(scenario())
    assert calls == 3, "the first draw, the call in flight, one for all waiters"
    assert len(set(values)) == count
    assert _expected_close_pairs(count) < 0.2
    assert _close_pairs(values) <= 4


def test_batches_of_big_short_id_requests_still_take_runs(server: RedisServer) -> None:
    """Requests that each take runs alone (``next_ids`` of 256 or more) still do when shared."""
    ids = RedisIds.from_url(server.url)
    short = ids.short_id("runs")
    short.next_id()
    out: list[Any] = []
    errors: list[BaseException] = []
    with paused(server):
        leader = _thread(short.next_id, out, errors)
        wait_until(lambda: short._shared.threads._calls == 1, "the first call is in flight")
        waiters = [_thread(lambda: short.next_ids(300), out, errors) for _ in range(2)]
        wait_until(lambda: short._shared.waiting == 2, "both requests wait")
    for thread in [leader, *waiters]:
        thread.join(timeout=60)
    assert errors == []
    batches = [each for each in out if isinstance(each, list)]
    assert [len(batch) for batch in batches] == [300, 300]
    assert all(_close_pairs(batch) > 250 for batch in batches), "taken in runs, as alone"
