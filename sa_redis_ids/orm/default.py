"""``redis_id(generator)``: a SQLAlchemy column default that takes its value from a generator.

SQLAlchemy calls a Python-side column default once per row that lacks the column, on every insert
path: the ORM unit of work, ``session.execute(insert(Model), [dicts])`` and Core executemany. An
explicitly given value is never replaced. If the generator raises (Redis down, counter exhausted),
the statement fails before anything is sent to the database, so no row is written without an ID.
"""

from __future__ import annotations

from typing import Any, Generic

from sa_redis_ids.orm import errors
from sa_redis_ids.strategies.base import IdGenerator, V

errors.install()


class RedisIdDefault(Generic[V]):
    """The callable SQLAlchemy invokes for a missing value; ``generator`` is public for inspection."""

    def __init__(self, generator: IdGenerator[V]):
        if not isinstance(generator, IdGenerator):
            raise TypeError(f"redis_id() needs an ID generator, not {type(generator).__name__}")
        self.generator: IdGenerator[V] = generator

    def __call__(self, context: Any) -> V:
        value: V = self.generator.next_id()
        return value

    def __repr__(self) -> str:
        return f"redis_id({self.generator!r})"


def redis_id(generator: IdGenerator[V]) -> RedisIdDefault[V]:
    """A ``default=`` for ``mapped_column``/``Column`` that fills the column from ``generator``."""
    return RedisIdDefault(generator)
