"""A block fetched before the column floor could be read is never handed to a flush.

A new process after a loss (Redis emptied while the table holds rows) that draws directly, outside
any flush, cannot read its column floor yet: its first block starts where the emptied Redis
starts, among the table's values. Its next flush, which can read the floor, must not take the rest
of that block from memory: the buffer drops it (a gap) and the flush's values come from a fetch
that reads the floor. Every buffered strategy, on the backend table and the database matrix, sync
and asyncio.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import create_async_engine

from sa_redis_ids.asyncio import AsyncRedisIds
from tests.conftest import Backend
from tests.support.servers import RedisServer
from tests.test_column_floor import insert_async, insert_rows, lose, row_model, values_in

TABLE_ROWS = 1000
BUFFERED = ["sequence", "date_prefixed"]
"""The strategies that take ``block=``."""


@pytest.mark.parametrize("factory", BUFFERED)
def test_a_block_drawn_before_the_floor_was_known_is_not_handed_to_a_flush(
    backend: Backend, engine: Engine, create_tables: Any, factory: str
) -> None:
    first = getattr(backend.ids(), factory)("bf", block=50)
    model = row_model(first)
    create_tables(model.metadata)
    table = insert_rows(engine, model, TABLE_ROWS)
    lose(backend)
    again = getattr(backend.ids(), factory)("bf", block=50)
    bound = row_model(again)
    again.next_id()  # outside any flush, before any: the floor cannot be read here yet
    assert again.buffer.floorless
    flushed = insert_rows(engine, bound, 30)
    assert not set(flushed) & set(table), "a flush got a value the table holds"
    stats = again.stats()
    assert stats.ids_dropped >= 49 - 1, "the block drawn without the floor was dropped"
    assert not again.buffer.floorless
    assert sorted(values_in(engine, bound)) == sorted(table + flushed)
    later = insert_rows(engine, bound, 30)  # served from a block fetched with the floor
    assert not set(later) & set(table + flushed)
    assert again.stats().ids_dropped == stats.ids_dropped, "nothing more is dropped"


@pytest.mark.parametrize("factory", BUFFERED)
def test_a_block_fetched_with_the_floor_known_is_kept(
    backend: Backend, tmp_path: Path, factory: str
) -> None:
    """No drop without a reason: a process whose first draw is a flush keeps its blocks."""
    from sqlalchemy import create_engine

    engine = create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    generator = getattr(backend.ids(), factory)("kept", block=50)
    model = row_model(generator)
    model.metadata.create_all(engine)
    first = insert_rows(engine, model, 10)
    generator.next_id()  # outside a flush, but the floor is known (the engine the flush used)
    second = insert_rows(engine, model, 10)
    assert not generator.buffer.floorless
    assert generator.stats().ids_dropped == 0
    assert len(set(first + second)) == 20


@pytest.mark.parametrize("factory", BUFFERED)
def test_an_async_block_drawn_before_the_floor_was_known_is_not_handed_to_a_flush(
    server: RedisServer, tmp_path: Path, factory: str
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'rows.db'}"

    async def scenario() -> tuple[list[Any], list[Any], int]:
        engine = create_async_engine(url)
        try:
            before = AsyncRedisIds.from_url(server.url)
            try:
                model = row_model(getattr(before, factory)("bf", block=50))
                async with engine.begin() as connection:
                    await connection.run_sync(model.metadata.create_all)
                table = await insert_async(engine, model, TABLE_ROWS)
            finally:
                await before.aclose()
            server.client().flushall()
            after = AsyncRedisIds.from_url(server.url)
            try:
                generator = getattr(after, factory)("bf", block=50)
                bound = row_model(generator)
                await generator.next_id()
                assert generator.buffer.floorless
                flushed = await insert_async(engine, bound, 30)
                dropped = generator.stats().ids_dropped
            finally:
                await after.aclose()
            return table, flushed, dropped
        finally:
            await engine.dispose()

    table, flushed, dropped = asyncio.run(scenario())
    assert len(set(flushed)) == 30
    assert not set(flushed) & set(table), "a flush got a value the table holds"
    assert dropped >= 48


def test_a_flush_takes_again_when_another_flush_dropped_a_floorless_block_it_took_from(
    backend: Backend, engine: Engine, create_tables: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three threads of one process after a loss, in the order that once let a flush keep
    values the table held: flush B checks for blocks fetched without the floor (none yet);
    thread A draws directly and its fetch goes without the floor; B takes its values from A's
    block; flush C drops that block first. B must see that a block fetched without the floor
    landed during its take, and take its values again."""
    from sa_redis_ids.orm import batches

    first = backend.ids().sequence("race", block=50)
    model = row_model(first)
    create_tables(model.metadata)
    table = insert_rows(engine, model, TABLE_ROWS)
    lose(backend)
    again = backend.ids().sequence("race", block=50)
    bound = row_model(again)
    seen: dict[str, Any] = {}
    real_drop = batches.drop_floorless

    def in_thread(action: Any) -> Any:
        found: list[Any] = []
        worker = threading.Thread(target=lambda: found.append(action()))
        worker.start()
        worker.join()
        return found[0]

    def drop_then_let_a_draw(generator: Any, buffer: Any) -> int:
        dropped = real_drop(generator, buffer)
        if "a" not in seen:  # B has read the count and dropped: now A draws, without the floor
            seen["a"] = in_thread(again.next_id)
            seen["floorless"] = again.buffer.floorless
        return dropped

    real_next_ids = again.next_ids

    def take_then_let_c_drop(n: int) -> list[int]:
        values = real_next_ids(n)
        if "b" not in seen:  # B took from A's block: now C drops it first
            seen["b"] = values
            seen["c"] = real_drop(again, again.buffer)  # (as C's flush would: a floor is readable)
        return values

    monkeypatch.setattr(batches, "drop_floorless", drop_then_let_a_draw)
    monkeypatch.setattr(again, "next_ids", take_then_let_c_drop)
    flushed = insert_rows(engine, bound, 20)
    assert seen["floorless"], "A's block was fetched without the floor"
    assert set(seen["b"]) & set(table), "B's first take came from A's block"
    assert seen["c"] > 0, "C dropped the block"
    assert not set(flushed) & set(table), "a flush got a value the table holds"
    assert sorted(values_in(engine, bound)) == sorted(table + flushed)
