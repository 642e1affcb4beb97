"""Taking ``n`` values from a generator in as few ``next_ids`` calls as it allows."""

from __future__ import annotations

from typing import Any

from sa_redis_ids.errors import SequenceExhausted
from sa_redis_ids.generators.base import IdGenerator


def batch_limit(generator: IdGenerator[Any]) -> int:
    """The most values one ``next_ids`` call of ``generator`` may take (its ``max_batch``)."""
    return generator.max_batch


def take(generator: IdGenerator[Any], n: int) -> list[Any]:
    """``n`` values: one ``next_ids`` call, or one per ``max_batch`` values beyond that.

    Raises :class:`~sa_redis_ids.SequenceExhausted` if the generator gave fewer values than asked
    (rather than leave objects without an ID): the values it gave are dropped (gaps).
    """
    limit = generator.max_batch
    if n <= limit:
        values = generator.next_ids(n)
    else:
        values = []
        for start in range(0, n, limit):
            values.extend(generator.next_ids(min(limit, n - start)))
    if len(values) != n:
        raise SequenceExhausted(
            f"next_ids gave {len(values)} values for {n} objects; none of them was used",
            namespace=generator.namespace,
        )
    return values
