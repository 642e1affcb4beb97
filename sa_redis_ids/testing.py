"""Moving the Redis clock in tests. Nothing here is used by the library itself in production.

``shift_time(generator, ms)`` moves the Redis time that a generator's scripts see by ``ms``
milliseconds, so a test can cross midnight or step a clock back without touching the server.
The shift belongs to the generator's node set (every generator of one ``RedisIds`` moves
together): its scripts then run in a variant whose time function adds the shift, the day
window of date-keyed generators is rebuilt around the shifted time, and buffer deadlines follow
the same clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def set_time_offset(generator: Any, ms: int) -> None:
    """Make ``generator`` (and the other generators of its ``RedisIds``) see Redis time shifted
    by ``ms`` milliseconds from now on."""
    clock = getattr(generator, "redis_clock", None)
    if clock is None:
        raise TypeError(f"{type(generator).__name__} has no Redis clock to shift")
    if isinstance(ms, bool) or not isinstance(ms, int):
        raise TypeError(f"ms must be an int, not {type(ms).__name__}")
    clock.shift_ms = ms
    day_clock = getattr(generator, "clock", None)
    if day_clock is not None and hasattr(day_clock, "recenter"):
        day_clock.recenter(redis_time_ms(generator) + ms)


@contextmanager
def shift_time(generator: Any, ms: int) -> Iterator[None]:
    """Within the block, ``generator`` sees Redis time shifted by ``ms`` milliseconds."""
    before = generator.redis_clock.shift_ms
    set_time_offset(generator, ms)
    try:
        yield
    finally:
        set_time_offset(generator, before)


def redis_time_ms(generator: Any) -> int:
    """The Redis server time (ms since the epoch) of the generator's first node, unshifted."""
    seconds, micros = generator._nodes.nodes[0].client.time()
    return int(seconds) * 1000 + int(micros) // 1000
