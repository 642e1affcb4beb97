"""``floor_from_column(engine_or_sessionmaker, column)``: a day's floor read from the table itself.

Given as ``floor=`` to :meth:`~sa_redis_ids.RedisIds.date_prefixed` or
:meth:`~sa_redis_ids.RedisIds.daily_code`, it is bound to that generator, and when a day's counter
is missing in Redis (the first call of the day, or after Redis lost its data) it returns the highest
counter the table already holds for that day:

* DatePrefixed: ``MAX(column)`` among the values of the day's range
  ``prefix·10^k … prefix·10^k + 10^k − 1``;
* DailyCode: ``MAX(column)`` among the codes ``prefix + YYYYMMDD + digits`` of that day (a range
  plus a length check, both index friendly), then the counter of that code.

The generator then seeds its counter above it under a Redlock, so no ID the table holds is issued
again. Rows still uncommitted when Redis lost its data are invisible to the query; that window is
the one thing the floor cannot cover.

The column may be given lazily, as a zero-argument callable, when the model's own column default
uses the generator (the model does not exist yet when the generator is made)::

    codes = ids.daily_code("orders", floor=floor_from_column(engine, lambda: Order.code))
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import sessionmaker
from sqlalchemy.sql.elements import ColumnElement

from sa_redis_ids.strategies.dated import DatedGenerator

ColumnRef = Any
"""A column (``Model.attr``, ``table.c.name``) or a zero-argument callable returning one."""


class ColumnFloor:
    """A floor that reads the highest counter of a day from a column; see the module docstring."""

    def __init__(
        self,
        source: Engine | sessionmaker[Any],
        column: ColumnRef,
        generator: DatedGenerator[Any] | None = None,
    ):
        if not isinstance(source, (Engine, sessionmaker)):
            raise TypeError(
                f"floor_from_column needs an Engine or a sessionmaker, not {type(source).__name__}"
            )
        if not (_is_column(column) or callable(column)):
            raise TypeError(f"{column!r} is not a column or a callable returning one")
        self.source = source
        self._column = column
        self.generator = generator

    def bind(self, generator: DatedGenerator[Any]) -> ColumnFloor:
        """This floor for ``generator`` (a generator calls it when given ``floor=``)."""
        if not isinstance(generator, DatedGenerator):
            raise TypeError(f"a column floor needs a date-keyed generator, not {generator!r}")
        return ColumnFloor(self.source, self._column, generator)

    @property
    def column(self) -> Any:
        """The column, resolving a lazy reference."""
        column = self._column if _is_column(self._column) else self._column()
        if not _is_column(column):
            raise TypeError(f"the column reference returned {column!r}, not a column")
        return column

    def __call__(self, day: date) -> int:
        """The highest counter ``column`` holds for ``day`` (0 when none)."""
        generator = self.generator
        if generator is None:
            raise TypeError(
                "this floor is not bound to a generator: pass it as floor= to "
                "ids.date_prefixed/ids.daily_code, or call bind(generator)"
            )
        column = self.column
        low, high = generator.day_bounds(day)
        statement = select(func.max(column)).where(column.between(low, high))
        if isinstance(low, str):
            statement = statement.where(func.length(column) == len(low))
        found = self._scalar(statement)
        if found is None:
            return 0
        try:
            found_day, counter = generator.day_and_counter(found)
        except ValueError as exc:
            raise ValueError(
                f"{column} holds {found!r} on {day}, which is not a value of {generator!r}: {exc}"
            ) from exc
        if found_day != day:  # pragma: no cover - the range only holds values of that day
            raise ValueError(f"{found!r} is not of {day}")
        return counter

    def _scalar(self, statement: Any) -> Any:
        if isinstance(self.source, Engine):
            with self.source.connect() as connection:
                return connection.scalar(statement)
        with self.source() as session:
            return session.scalar(statement)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ColumnFloor):
            return NotImplemented
        return (self.source, id(self._column), self.generator) == (
            other.source,
            id(other._column),
            other.generator,
        )

    def __hash__(self) -> int:
        return hash((id(self.source), id(self._column)))

    def __repr__(self) -> str:
        return f"floor_from_column({self.source!r}, {self._column!r})"


def _is_column(value: object) -> bool:
    return isinstance(value, ColumnElement) or hasattr(value, "__clause_element__")


def floor_from_column(
    engine_or_sessionmaker: Engine | sessionmaker[Any],
    column: ColumnRef | Callable[[], Any],
) -> ColumnFloor:
    """A ``floor=`` for a date-keyed generator that reads a day's highest counter from ``column``.

    ``column`` is the column the generator fills (``Order.code``, ``invoices.c.id``), or a
    zero-argument callable returning it when the model is defined after the generator.
    """
    return ColumnFloor(engine_or_sessionmaker, column)
