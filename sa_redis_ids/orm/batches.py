"""Taking ``n`` values from a generator in as few ``next_ids`` calls as it allows."""

from __future__ import annotations

from typing import Any

from sa_redis_ids.strategies.base import IdGenerator


def batch_limit(generator: IdGenerator[Any]) -> int:
    """The most values one ``next_ids`` call of ``generator`` may take (its ``max_batch``)."""
    return generator.max_batch


def take(generator: IdGenerator[Any], n: int) -> list[Any]:
    """``n`` values: one ``next_ids`` call, or one per ``max_batch`` values beyond that."""
    limit = generator.max_batch
    if n <= limit:
        return generator.next_ids(n)
    values: list[Any] = []
    for start in range(0, n, limit):
        values.extend(generator.next_ids(min(limit, n - start)))
    return values
