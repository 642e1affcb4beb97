"""``floor_from_column(engine_or_sessionmaker, column)``: a generator's floor read from the table.

Given as ``floor=`` to any factory of [`RedisIds`][sa_redis_ids.RedisIds], it is bound to that
generator. The generator reads it once per process and Redis node at first use, and again when a
node's state is missing or behind what this process already received (Redis lost its data, a key
was evicted, a failover went to a replica that was behind). What it reads depends on the strategy:

* Sequence, Snowflake: ``MAX(column)`` among the generator's possible values;
* DatePrefixed: ``MAX(column)`` among the values of the day's range
  ``prefix·10^k … prefix·10^k + 10^k − 1``, then the counter of that value;
* DailyCode: ``MAX(column)`` among the codes ``prefix + YYYYMMDD + digits`` of that day (a range
  plus a length check, both index friendly), then the counter of that code;
* ShortId: every value of the column inside the pool (streamed), which the generator marks taken;
* DatePrefixed or DailyCode with ``secret=``: the day's highest value no longer holds its highest
  counter, so every value of the day's range is read (streamed) and the generator finds their
  highest counter with its key.

The generator then continues above it, so no ID the table holds is issued again: after a loss
plus its ``headroom`` (rows still uncommitted when Redis lost its data are invisible to the query,
and the headroom is what covers them, as far as it reaches); a snowflake whose state lost nothing
only moves up to the floor.

The column may be given lazily, as a zero-argument callable, when the model's own column default
uses the generator (the model does not exist yet when the generator is made):

```python
codes = ids.daily_code("orders", floor=floor_from_column(engine, lambda: Order.code))
```
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import sessionmaker
from sqlalchemy.sql.elements import ColumnElement
from sqlalchemy.types import Float, Integer, NullType, Numeric, String, TypeDecorator

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import GeneratorFloor, IdGenerator
from sa_redis_ids.generators.day_counter import DatedGenerator
from sa_redis_ids.generators.permute import HiddenCounters, hides_counters
from sa_redis_ids.generators.short_id import ShortIdGenerator

ColumnRef = Any
"""A column (``Model.attr``, ``table.c.name``) or a zero-argument callable returning one."""


STREAM_ROWS = 10_000
"""Rows fetched per round trip when a ShortId floor streams a column's values."""


class ColumnFloor(GeneratorFloor):
    """A floor that reads what a column already holds; see the module docstring."""

    def __init__(
        self,
        source: Engine | sessionmaker[Any],
        column: ColumnRef,
        generator: IdGenerator[Any] | None = None,
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

    def bind(self, generator: IdGenerator[Any]) -> ColumnFloor:
        """This floor for ``generator`` (a generator calls it when given ``floor=``)."""
        if not isinstance(generator, IdGenerator):
            raise TypeError(f"a column floor needs an ID generator, not {generator!r}")
        if _is_column(self._column):
            check_column_type(self._column, generator)
        return ColumnFloor(self.source, self._column, generator)

    @property
    def column(self) -> Any:
        """The column, resolving a lazy reference."""
        column = self._column if _is_column(self._column) else self._column()
        if not _is_column(column):
            raise TypeError(f"the column reference returned {column!r}, not a column")
        if self.generator is not None and column is not self._column:
            check_column_type(column, self.generator)
        return column

    def __call__(self, *day: date) -> Any:
        """What ``column`` holds, as the bound generator's floor (see the module docstring)."""
        generator = self.generator
        if generator is None:
            raise TypeError(
                "this floor is not bound to a generator: pass it as floor= to a factory of "
                "RedisIds, or call bind(generator)"
            )
        if isinstance(generator, ShortIdGenerator):
            return self._values(generator)
        with self._connection() as connection:
            return highest_used(connection, generator, self.column, *day)

    def _values(self, generator: ShortIdGenerator) -> Iterator[int]:
        with self._connection() as connection:
            yield from pool_values(connection, generator, self.column)

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A connection of the engine, or of a session of the sessionmaker."""
        if isinstance(self.source, Engine):
            with self.source.connect() as connection:
                yield connection
            return
        with self.source() as session:
            yield session.connection()

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


def highest_used(
    connection: Connection, generator: IdGenerator[Any], column: Any, *day: date
) -> int:
    """What ``column`` holds as ``generator``'s floor: its highest value (a date-keyed generator:
    the highest counter of ``day``), 0 when none; read through ``connection``."""
    if isinstance(generator, DatedGenerator):
        if len(day) != 1:
            raise TypeError("a date-keyed generator's floor takes the day")
        return _day_floor(connection, generator, column, day[0])
    found = connection.scalar(
        select(func.max(column)).where(column.between(0, generator.max_value))
    )
    return 0 if found is None else int(found)


def pool_values(connection: Connection, generator: ShortIdGenerator, column: Any) -> Iterator[int]:
    """Every value of ``column`` inside ``generator``'s pool, streamed through ``connection``."""
    result = streamed_pool_rows(connection, generator, column)
    for (value,) in result:
        yield int(value)


def streamed_pool_rows(connection: Connection, generator: ShortIdGenerator, column: Any) -> Any:
    """The result of the query for ``pool_values``, fetched ``STREAM_ROWS`` at a time."""
    statement = select(column).where(column.between(generator.offset, generator.max_value))
    # per statement: Connection.execution_options would change the (flush's) connection for good
    return connection.execute(statement, execution_options={"yield_per": STREAM_ROWS})


def _day_floor(
    connection: Connection, generator: DatedGenerator[Any], column: Any, day: date
) -> int:
    """The highest counter ``column`` holds for ``day`` (0 when none)."""
    if isinstance(generator, HiddenCounters) and hides_counters(generator):
        return hidden_day_floor(connection, generator, column, day)
    low, high = generator.day_bounds(day)
    within = _day_range(column, low, high)
    found = connection.scalar(select(func.max(column)).where(within))
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


def _day_range(column: Any, low: Any, high: Any) -> Any:
    """The condition on ``column`` of a day's values: a range, and a length for codes (both
    index friendly)."""
    within = column.between(low, high)
    if isinstance(low, str):
        within = within & (func.length(column) == len(low))
    return within


def hidden_day_floor(
    connection: Connection, generator: HiddenCounters, column: Any, day: date
) -> int:
    """The highest counter ``column`` holds for ``day`` when the values hide their counters
    (``secret=``): every value of the day's range is read, streamed, and decoded with the key."""
    low, high = generator.day_bounds(day)
    statement = select(column).where(_day_range(column, low, high))
    rows = connection.execute(statement, execution_options={"yield_per": STREAM_ROWS})
    try:
        if isinstance(low, str):
            return generator.highest_counter(day, (value for (value,) in rows))
        return generator.highest_counter(day, (int(value) for (value,) in rows))
    finally:
        rows.close()


def check_column_type(column: Any, generator: IdGenerator[Any]) -> None:
    """Raise `ConfigError` naming ``column`` unless its SQL type holds ``generator``'s
    values: an integer type for numeric IDs, a string type for codes (an untyped column passes).
    A floor read from another type would find nothing, or nonsense, and let IDs be issued again.
    """
    sql_type = getattr(column, "type", None)
    if isinstance(sql_type, TypeDecorator):
        sql_type = sql_type.impl_instance
    if sql_type is None or isinstance(sql_type, NullType):
        return
    if generator.python_type is str:
        fits = isinstance(sql_type, String)
        wanted = "a string column (String, Text ...)"
    else:
        fits = isinstance(sql_type, Integer) or (
            isinstance(sql_type, Numeric)
            and not isinstance(sql_type, Float)
            and sql_type.scale == 0
        )
        wanted = "an integer column (BigInteger, Integer ...)"
    if not fits:
        raise ConfigError(
            f"floor_from_column: column {column} is {sql_type!r}, but {generator.strategy} "
            f"{generator.namespace!r} issues {generator.python_type.__name__} values; "
            f"give it {wanted}",
            namespace=generator.namespace,
        )


def _is_column(value: object) -> bool:
    return isinstance(value, ColumnElement) or hasattr(value, "__clause_element__")


def floor_from_column(
    engine_or_sessionmaker: Engine | sessionmaker[Any],
    column: ColumnRef | Callable[[], Any],
) -> ColumnFloor:
    """A ``floor=`` for any generator that reads what ``column`` already holds (see the module).

    ``column`` is the column the generator fills (``Order.code``, ``invoices.c.id``), or a
    zero-argument callable returning it when the model is defined after the generator.
    """
    return ColumnFloor(engine_or_sessionmaker, column)
