"""The ORM binding is the floor: a generator bound to columns reads them without ``floor=``.

When ``redis_id()``, ``redis_id_column()`` or ``register()`` binds a generator to a column, the
column becomes the generator's floor (``ColumnsFloor``, the generator's ``implied_floor``);
a generator bound to several columns takes the highest of them (a ShortId: the values of all of
them). What is read is what [`floor_from_column`][sa_redis_ids.floor_from_column] reads, and when: at a
process's first use of each node and after a detected loss. ``floor=`` given to the factory
replaces it; ``column_floor=False`` on the binding leaves that column out.

Where it reads:

* inside a flush (``Session`` or ``AsyncSession``), ``assign_ids`` or an ``insert()`` statement,
  through that flush's or statement's own connection (``floor_scope``);
* elsewhere (a direct ``next_id()``, a buffer's prefetch thread, maintenance) through a new
  connection of the engine each column was last read with, where that can run here (an asyncio
  engine only from the asyncio front end or under ``AsyncSession``);
* otherwise (nothing flushed yet in this process) it cannot be read: the call goes on as one
  without a floor and the floor is read at the next call that can.

An ``AsyncIdGenerator`` (from ``AsyncRedisIds``) reads it from the event loop in a greenlet, the
way ``AsyncSession.run_sync`` runs synchronous code, so the loop is never blocked on an asyncio
driver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractContextManager, nullcontext
from datetime import date
from typing import Any

from sqlalchemy.engine import Connection, Engine

from sa_redis_ids.generators.base import IdGenerator, ImpliedFloor
from sa_redis_ids.generators.short_id import ShortIdGenerator
from sa_redis_ids.orm.floor import STREAM_ROWS, highest_used, pool_values, streamed_pool_rows
from sa_redis_ids.orm.floor_scope import FloorScope, current_scope
from sa_redis_ids.orm.sqlalchemy_internals import can_block_on, sync_in_greenlet

_UNSET = object()

Source = tuple[Any, Callable[[], AbstractContextManager[Connection]]]
"""A column and how to open the connection to read it on."""


class _Column:
    """One bound column: its mapper (what a session's bind is chosen by) and the engine it
    was last read with (for reads outside a flush)."""

    __slots__ = ("column", "engine", "mapper")

    def __init__(self, mapper: Any, column: Any):
        self.mapper = mapper
        self.column = column
        self.engine: Engine | None = None


class ColumnsFloor(ImpliedFloor):
    """The floor of a generator taken from the columns it is bound to (see the module)."""

    def __init__(self, generator: IdGenerator[Any], *, asynchronous: bool):
        self.generator = generator
        self.asynchronous = asynchronous
        """The generator runs on the asyncio front end: the floor is read from the event loop."""
        self.columns: list[_Column] = []
        self._outside: tuple[tuple[Engine | None, ...], Callable[..., Any] | None, bool] | None = (
            None
        )
        """The engines the columns were last read with, the floor reading through them, and
        whether one of them is an asyncio engine (None: to be worked out again)."""

    def add(self, mapper: Any, column: Any) -> None:
        """Read ``column`` (of ``mapper``'s table) too."""
        if all(each.column is not column for each in self.columns):
            self.columns.append(_Column(mapper, column))
            self._outside = None

    def now(self) -> Callable[..., Any] | None:
        # Asked at every call of the generator: answers are kept per scope and per set of engines.
        if not self.columns:
            return None
        scope = current_scope()
        if scope is not None:
            found = scope.floors.get(id(self), _UNSET)
            if found is _UNSET:
                found = scope.floors[id(self)] = self._in(scope)
            if found is not None:
                return found  # type: ignore[no-any-return]
        outside = self._outside
        if outside is None:
            engines = tuple(each.engine for each in self.columns)
            outside = self._outside = (engines, self._through(engines), self._any_async(engines))
        engines, found, needs_greenlet = outside
        if found is None or self.asynchronous or not needs_greenlet:
            return found
        return found if all(can_block_on(e.dialect) for e in engines if e) else None

    def _in(self, scope: FloorScope) -> Callable[..., Any] | None:
        """The floor read through ``scope``'s connections, or None where they cannot run here."""
        columns = self.columns
        engines = [scope.engine(each.mapper) for each in columns]
        if any(engine is None for engine in engines):
            return None
        for bound, engine in zip(columns, engines, strict=True):
            if engine is not bound.engine:  # what reads outside a flush use from now on, even
                bound.engine = engine  # when this flush finds the floor merged, unread
                self._outside = None
        if not self.asynchronous and not all(can_block_on(e.dialect) for e in engines if e):
            return None
        return lambda *day: self._read(
            [self._in_scope(scope, c) for c in columns], *day, scope=scope
        )

    def _through(self, engines: tuple[Engine | None, ...]) -> Callable[..., Any] | None:
        """The floor read through new connections of ``engines`` (None: one is not known)."""
        if any(engine is None for engine in engines):
            return None
        sources: list[Source] = [
            (c.column, e.connect) for c, e in zip(self.columns, engines, strict=True) if e
        ]
        return lambda *day: self._read(sources, *day)

    @staticmethod
    def _any_async(engines: tuple[Engine | None, ...]) -> bool:
        return any(getattr(e.dialect, "is_async", False) for e in engines if e)

    @staticmethod
    def _in_scope(scope: FloorScope, bound: _Column) -> Source:
        return bound.column, lambda: nullcontext(scope.connection(bound.mapper))

    def _read(self, sources: list[Source], *day: date, scope: FloorScope | None = None) -> Any:
        """The floor: the highest used (a ShortId: the values), sync or as an awaitable. On the
        event loop, reads through one flush's connections take turns (`FloorScope.reading`)."""
        if isinstance(self.generator, ShortIdGenerator):
            if self.asynchronous:
                return self._values_async(self.generator, sources, scope)
            return self._values(self.generator, sources)
        if self.asynchronous:
            return self._highest_async(sources, day, scope)
        return self._highest(sources, *day)

    async def _highest_async(
        self, sources: list[Source], day: tuple[date, ...], scope: FloorScope | None
    ) -> int:
        async with nullcontext() if scope is None else scope.reading():
            return await sync_in_greenlet(self._highest, sources, *day)

    def _highest(self, sources: list[Source], *day: date) -> int:
        found = 0
        for column, connect in sources:
            with connect() as connection:
                found = max(found, highest_used(connection, self.generator, column, *day))
        return found

    @staticmethod
    def _values(generator: ShortIdGenerator, sources: list[Source]) -> Iterator[int]:
        for column, connect in sources:
            with connect() as connection:
                yield from pool_values(connection, generator, column)

    @staticmethod
    async def _values_async(
        generator: ShortIdGenerator, sources: list[Source], scope: FloorScope | None = None
    ) -> AsyncIterator[int]:
        async with nullcontext() if scope is None else scope.reading():
            async for value in ColumnsFloor._streamed_async(generator, sources):
                yield value

    @staticmethod
    async def _streamed_async(
        generator: ShortIdGenerator, sources: list[Source]
    ) -> AsyncIterator[int]:
        for column, connect in sources:
            opened = await sync_in_greenlet(connect)
            connection = await sync_in_greenlet(opened.__enter__)
            try:
                result = await sync_in_greenlet(streamed_pool_rows, connection, generator, column)
                while rows := await sync_in_greenlet(result.fetchmany, STREAM_ROWS):
                    for (value,) in rows:
                        yield int(value)
            finally:
                await sync_in_greenlet(opened.__exit__, None, None, None)

    def __repr__(self) -> str:
        names = ", ".join(str(each.column) for each in self.columns)
        return f"ColumnsFloor({names})"


def bind_column_floor(
    generator: IdGenerator[Any], mapper: Any, column: Any, *, asynchronous: bool
) -> None:
    """Make ``column`` part of ``generator``'s floor (see the module docstring)."""
    expect_column_floor(generator, asynchronous=asynchronous)
    floor = generator.implied_floor
    assert isinstance(floor, ColumnsFloor)
    floor.add(mapper, column)


def expect_column_floor(generator: IdGenerator[Any], *, asynchronous: bool) -> None:
    """Tell ``generator`` that a column will be its floor, before SQLAlchemy has configured the
    mapper that binds it (mappers are configured at their first use, not when a model is
    defined). Until the column is bound and readable, a draw records what it recreates after a
    loss as unjudged, and the first call that reads the floor judges it (see ``sequence.lua``):
    a process that draws directly before its first flush must not leave a recreated counter
    that others, who read their floor long ago, would trust."""
    if not isinstance(generator.implied_floor, ColumnsFloor):
        generator.implied_floor = ColumnsFloor(generator, asynchronous=asynchronous)
