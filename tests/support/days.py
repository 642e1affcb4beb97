"""Put a date-keyed generator's Redis clock at a chosen instant, through the test seam.

The generator's Redis clock (``redis_clock.shift_ms``) shifts Redis ``TIME`` as its scripts see it; these
helpers compute the shift that puts "now" at an absolute UTC instant or a local wall-clock time.
"""

from __future__ import annotations

from datetime import date, datetime, time, timedelta, timezone
from typing import Any

from sa_redis_ids.generators.day_window import day_start_ms, local_day
from sa_redis_ids.testing import redis_time_ms, set_time_offset


def shift_to_ms(generator: Any, utc_ms: int) -> None:
    """From now on ``generator`` sees Redis time at about ``utc_ms`` (ms since the epoch)."""
    set_time_offset(generator, utc_ms - redis_time_ms(generator))


def shift_to(generator: Any, when: datetime) -> None:
    """From now on ``generator`` sees Redis time at about the aware datetime ``when``."""
    shift_to_ms(generator, int(when.timestamp() * 1000))


def shift_to_local(generator: Any, day: date, at: time) -> None:
    """From now on ``generator`` sees Redis time at about ``at`` on ``day`` in its time zone."""
    shift_to(generator, datetime.combine(day, at, tzinfo=generator.clock.tz))


def seen_now_ms(generator: Any) -> int:
    """The Redis time ``generator`` sees now (with its offset)."""
    return redis_time_ms(generator) + int(generator.redis_clock.shift_ms)


def seen_today(generator: Any) -> date:
    """The local day ``generator`` sees now."""
    return local_day(seen_now_ms(generator), generator.clock.tz)


def day_end_ms(generator: Any, day: date) -> int:
    """The UTC ms at which ``day`` ends in ``generator``'s time zone."""
    return day_start_ms(day + timedelta(days=1), generator.clock.tz)


def utc(*args: int) -> datetime:
    """An aware UTC datetime."""
    return datetime(*args, tzinfo=timezone.utc)
