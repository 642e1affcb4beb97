"""Test seams. Nothing here is used by the library itself in production.

``shift_time(generator, ms)`` moves the Redis clock a date-keyed or time-based generator sees by
``ms`` milliseconds (the script adds it to Redis ``TIME``), so a test can cross midnight or move a
clock backwards without touching the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def set_time_offset(generator: Any, ms: int) -> None:
    """Make ``generator`` see Redis time shifted by ``ms`` milliseconds from now on."""
    clock = getattr(generator, "clock", None)
    if clock is None or not hasattr(clock, "offset_ms"):
        raise TypeError(f"{type(generator).__name__} has no Redis time source to shift")
    clock.offset_ms = int(ms)
    if hasattr(clock, "recenter"):
        clock.recenter(redis_time_ms(generator) + clock.offset_ms)


@contextmanager
def shift_time(generator: Any, ms: int) -> Iterator[None]:
    """Within the block, ``generator`` sees Redis time shifted by ``ms`` milliseconds."""
    before = generator.clock.offset_ms
    set_time_offset(generator, ms)
    try:
        yield
    finally:
        set_time_offset(generator, before)


def redis_time_ms(generator: Any) -> int:
    """The Redis server time (ms since the epoch) of the generator's first node, unshifted."""
    seconds, micros = generator._nodes.nodes[0].client.time()
    return int(seconds) * 1000 + int(micros) // 1000
