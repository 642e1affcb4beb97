"""``redis_id(generator)``: a SQLAlchemy column default that takes its value from a generator.

SQLAlchemy calls a Python-side column default once per row that lacks the column, on every insert
path. This one reserves the IDs of the whole statement at its first call: ``next_ids(rows)``, one
Redis round trip for ``session.execute(insert(Model), [dicts])``, ``bulk_insert_mappings`` or a Core
executemany of any size; the other rows take from that reservation. In the ORM flush the
``before_insert`` hook fills the attribute first (from the flush's reservation, see
:mod:`sa_redis_ids.orm.flush`), so the default is not called at all. An explicitly given value is
never replaced. If the generator raises (Redis down, counter exhausted), the statement fails before
anything reaches the database, so no row is written without an ID; the error reaches the caller as
itself, not wrapped in ``StatementError``. ``INSERT … FROM SELECT`` is refused with
:class:`~sa_redis_ids.ConfigError`: SQLAlchemy would call the default once for all its rows.
"""

from __future__ import annotations

from typing import Any, Generic

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import IdGenerator, V
from sa_redis_ids.orm.batches import take
from sa_redis_ids.orm.checks import check_column, dialect_key

STATEMENT_RESERVATION = "_sa_redis_ids_reserved"
"""Attribute of SQLAlchemy's execution context holding ``{column: iterator of reserved IDs}``."""


class RedisIdDefault(Generic[V]):
    """The callable SQLAlchemy invokes for a missing value; ``generator`` is public for inspection."""

    def __init__(self, generator: IdGenerator[V], *, registered: bool = False):
        if not isinstance(generator, IdGenerator):
            raise TypeError(f"redis_id() needs an ID generator, not {type(generator).__name__}")
        self.generator: IdGenerator[V] = generator
        self.registered = registered
        """``True`` when ``register()`` installed this default (not a ``default=`` in the model)."""
        self._checked: set[tuple[int, str]] = set()

    def __call__(self, context: Any) -> V:
        reserved: dict[Any, Any] | None = getattr(context, STATEMENT_RESERVATION, None)
        if reserved is None:
            if getattr(context, "compiled_parameters", None) is None:
                return self.generator.next_id()  # called outside a statement execution
            statement = getattr(getattr(context, "compiled", None), "statement", None)
            if getattr(statement, "select", None) is not None:
                raise ConfigError(
                    "INSERT ... FROM SELECT cannot take its IDs from redis_id(): SQLAlchemy calls "
                    "a Python default once for the whole statement, so every row would get the "
                    "same ID; select the rows and insert them as a list of dicts instead",
                    namespace=self.generator.namespace,
                )
            reserved = {}
            setattr(context, STATEMENT_RESERVATION, reserved)
        column: Any = getattr(context, "current_column", None)
        try:
            values = reserved[column]
        except KeyError:
            values = reserved[column] = iter(self._reserve(context, column))
        except TypeError:  # a later row of a multi-VALUES insert: an unhashable stand-in column
            column = column.original
            values = reserved.get(column) or reserved.setdefault(
                column, iter(self._reserve(context, column))
            )
        value: V | None = next(values, None)
        if value is None:  # more calls than the statement's rows: never expected, still correct
            value = self.generator.next_id()
        return value

    def _reserve(self, context: Any, column: Any) -> list[V]:
        """One ``next_ids`` for every row of the statement (a multi-VALUES row counts each value)."""
        dialect = getattr(context, "dialect", None)
        if column is not None and dialect is not None:
            name = dialect_key(dialect)
            if (id(column), name) not in self._checked:
                check_column(self.generator, column, dialect)
                self._checked.add((id(column), name))
        prefetch = getattr(getattr(context, "compiled", None), "insert_prefetch", None) or ()
        per_row = max(1, sum(1 for c in prefetch if getattr(c, "original", c) is column))
        return take(self.generator, len(context.compiled_parameters) * per_row)

    def __repr__(self) -> str:
        return f"redis_id({self.generator!r})"


def redis_id(generator: IdGenerator[V]) -> RedisIdDefault[V]:
    """A ``default=`` for ``mapped_column``/``Column`` that fills the column from ``generator``.

    Mapped models with such a column get the same flush-wide reservation as ``register()``.
    """
    from sa_redis_ids.orm.flush import install

    default = RedisIdDefault(generator)
    install()
    return default
