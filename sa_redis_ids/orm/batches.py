"""Taking ``n`` values from a generator in as few ``next_ids`` calls as it allows."""

from __future__ import annotations

import sys
from typing import Any

from sa_redis_ids.strategies.base import MAX_BATCH, IdGenerator


def batch_limit(generator: IdGenerator[Any]) -> int:
    """The most values one ``next_ids`` call of ``generator`` may take.

    A ``max_batch`` attribute wins; else the ``MAX_BATCH`` of the generator's module (ShortId takes
    10,000 per call, Snowflake 100,000), else the base limit.
    """
    found = getattr(generator, "max_batch", None)
    if isinstance(found, int) and found > 0:
        return found
    module = sys.modules.get(type(generator).__module__)
    found = getattr(module, "MAX_BATCH", None)
    return found if isinstance(found, int) and found > 0 else MAX_BATCH


def take(generator: IdGenerator[Any], n: int) -> list[Any]:
    """``n`` values: one ``next_ids`` call, or one per ``batch_limit`` values beyond that."""
    limit = batch_limit(generator)
    if n <= limit:
        return generator.next_ids(n)
    values: list[Any] = []
    for start in range(0, n, limit):
        values.extend(generator.next_ids(min(limit, n - start)))
    return values
