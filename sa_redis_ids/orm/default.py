"""``redis_id(generator)``: the column default that takes its value from a generator.

SQLAlchemy calls a Python-side column default once per row that lacks the column, on every insert
path. This one reserves the IDs of the whole statement at its first call: ``next_ids(rows)``, one
Redis round trip for ``session.execute(insert(Model), [dicts])``, ``bulk_insert_mappings`` or a Core
executemany of any size (a multi-row ``insert().values([...])`` counts each row); the other rows
take from that reservation. In the ORM flush the ``before_insert`` hook fills the attribute first
(from the flush's reservation, see `sa_redis_ids.orm.events`), so the default is not called
at all. An explicitly given value is never replaced. If the generator raises (Redis down, counter
exhausted), the statement fails before anything reaches the database, so no row is written without
an ID; the error reaches the caller as itself, not wrapped in ``StatementError``.
``INSERT … FROM SELECT`` is refused with [`ConfigError`][sa_redis_ids.ConfigError]: SQLAlchemy would call
the default once for all its rows.

The generator may be an ``AsyncIdGenerator``: under ``AsyncSession``/``AsyncConnection`` the
reservation is awaited on the event loop (see `batches`).

This module is a leaf of `sa_redis_ids.orm`: it knows nothing of mappers, bindings or session
events, which sit above it.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from sqlalchemy.schema import Column

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.aio import AsyncIdGenerator
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.orm.batches import check_generator, core_of, take
from sa_redis_ids.orm.bound_floor import bind_column_floor, expect_column_floor
from sa_redis_ids.orm.checks import check_column, dialect_key
from sa_redis_ids.orm.floor_scope import connection_scope
from sa_redis_ids.orm.sqlalchemy_internals import statement_rows

V = TypeVar("V", int, str)

STATEMENT_RESERVATION = "sa_redis_ids_reserved"
"""Attribute this package sets on a statement's execution context: ``{RedisIdDefault: iterator of
the IDs reserved for that statement}``."""


class RedisIdDefault(Generic[V]):
    """The callable SQLAlchemy invokes for a missing value; ``generator`` is public for inspection."""

    def __init__(
        self,
        generator: IdGenerator[V] | AsyncIdGenerator[V],
        *,
        registered: bool = False,
        column_floor: bool = True,
    ):
        check_generator(generator, "redis_id()")
        if not isinstance(column_floor, bool):
            raise ConfigError(f"column_floor must be True or False, not {column_floor!r}")
        self.generator: IdGenerator[V] | AsyncIdGenerator[V] = generator
        self.registered = registered
        """``True`` when ``register()`` installed this default (not a ``default=`` in the model)."""
        self.column_floor = column_floor
        """Whether the column is part of the generator's floor (see ``bound_floor``)."""
        self._checked: set[tuple[int, str]] = set()
        if column_floor:
            expect_column_floor(
                core_of(generator), asynchronous=isinstance(generator, AsyncIdGenerator)
            )

    def __call__(self, context: Any) -> V:
        if getattr(context, "compiled", None) is None:  # executed on its own, not for a statement
            return self._one(context)
        reserved: dict[RedisIdDefault[Any], Any] | None = getattr(
            context, STATEMENT_RESERVATION, None
        )
        if reserved is None:
            reserved = {}
            setattr(context, STATEMENT_RESERVATION, reserved)
        values = reserved.get(self)
        if values is None:
            values = reserved[self] = iter(self._reserve(context))
        value: V | None = next(values, None)
        if value is None:  # more calls than the statement's rows: never expected, still correct
            value = self._one(context)
        return value

    def _one(self, context: Any = None) -> V:
        connection = getattr(context, "root_connection", None)
        if connection is None:
            value: V = take(self.generator, 1)[0]
            return value
        with connection_scope(connection):
            value = take(self.generator, 1)[0]
        return value

    def _reserve(self, context: Any) -> list[V]:
        """One ``next_ids`` for every value of the statement this default fills."""
        statement = getattr(context.compiled, "statement", None)
        if getattr(statement, "select", None) is not None:
            raise ConfigError(
                "INSERT ... FROM SELECT cannot take its IDs from redis_id(): SQLAlchemy calls "
                "a Python default once for the whole statement, so every row would get the "
                "same ID; select the rows and insert them as a list of dicts instead",
                namespace=core_of(self.generator).namespace,
            )
        # The columns this default fills in each row: its column, a multi-row VALUES's stand-ins
        # for it (one per further row), any other column given the same default object.
        ours = [
            column
            for column in getattr(context, "prefetch_cols", None) or ()
            if getattr(getattr(column, "default", None), "arg", None) is self
        ]
        columns = [c for c in ours if isinstance(c, Column)]
        self._check(context.dialect, columns)
        if self.column_floor:  # a table no mapper binds: its column is the floor from now on
            for column in columns:
                bind_column_floor(
                    core_of(self.generator),
                    None,
                    column,
                    asynchronous=isinstance(self.generator, AsyncIdGenerator),
                )
        with connection_scope(context.root_connection):
            values: list[V] = take(self.generator, statement_rows(context) * max(1, len(ours)))
        return values

    def _check(self, dialect: Any, columns: list[Column[Any]]) -> None:
        """Check each column against the generator, once per column and dialect."""
        name = dialect_key(dialect)
        for column in columns:
            if (id(column), name) not in self._checked:
                check_column(core_of(self.generator), column, dialect)
                self._checked.add((id(column), name))

    def __repr__(self) -> str:
        return f"redis_id({self.generator!r})"


def redis_id(
    generator: IdGenerator[V] | AsyncIdGenerator[V], *, column_floor: bool = True
) -> RedisIdDefault[V]:
    """A ``default=`` for ``mapped_column``/``Column`` that fills the column from ``generator``
    (an ``IdGenerator``, or an ``AsyncIdGenerator`` for models used with ``AsyncSession``).

    The column is the generator's floor unless ``column_floor=False`` or the generator was given
    ``floor=`` (see ``bound_floor``).

    Mapped models with such a column get the same flush-wide reservation as ``register()``.
    """
    return RedisIdDefault(generator, column_floor=column_floor)
