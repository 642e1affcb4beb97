"""Which local day it is, by the Redis server's clock, in a configured time zone.

App servers' clocks disagree around midnight, so date-keyed generators never ask them. Lua cannot
convert time zones, so Python (``zoneinfo``) computes a *day window*: the UTC boundaries of a few
consecutive local days around the last Redis time it saw. The script reads ``TIME`` and picks the
day whose boundaries hold it; if the Redis time is outside the window, the script says so with the
time it read, the window is rebuilt around that time and the call is repeated. DST-correct
because every boundary comes from ``zoneinfo``.

Tests cross midnight by moving the node set's `RedisClock`
([`sa_redis_ids.testing.shift_time`][sa_redis_ids.testing.shift_time]); no script takes a time argument.
"""

from __future__ import annotations

import time
import zoneinfo
from collections.abc import Callable
from datetime import date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sa_redis_ids.errors import ConfigError

DAYS_BEFORE = 1
DAYS_AFTER = 1
"""The window: yesterday, today and tomorrow (by the last Redis time seen). A call that lands on
its last day moves the window on, so crossing midnight costs no extra round trip (only a clock
jump does), and a node whose clock is a little behind the others still finds its day in it."""


def zone(name: str) -> ZoneInfo:
    """The ``ZoneInfo`` for an IANA name, or [`ConfigError`][sa_redis_ids.ConfigError] saying what is wrong: the name
    is not a zone name, no zone has that name, or Python finds no time-zone database at all."""
    if not isinstance(name, str):
        raise ConfigError(f"tz={name!r} must be a str naming an IANA time zone, such as 'UTC'")
    try:
        return ZoneInfo(name)
    except ZoneInfoNotFoundError as exc:
        if not tz_database_found():
            raise ConfigError(
                f"tz={name!r} cannot be loaded: Python finds no time-zone database here (none "
                f"in {list(zoneinfo.TZPATH)} and no tzdata package); run `pip install tzdata` "
                "(a dependency of sa_redis_ids that is missing from this environment)"
            ) from exc
        raise ConfigError(
            f"tz={name!r} is not an IANA time zone: the time-zone database has no zone of that "
            f"name; use a name such as {_example_for(name)}"
        ) from exc
    except ValueError as exc:  # an absolute path, '..' or another key that is not a zone name
        raise ConfigError(
            f"tz={name!r} is not an IANA time zone name ({exc}); "
            f"use a name such as {_example_for(name)}"
        ) from exc


def tz_database_found() -> bool:
    """Whether ``zoneinfo`` can load any zone at all (the system's database or ``tzdata``); looks
    past the ``ZoneInfo`` cache, so it tells what is installed now."""
    try:
        ZoneInfo.no_cache("UTC")
    except (ZoneInfoNotFoundError, OSError, ValueError):
        return False
    return True


def _example_for(name: str) -> str:
    """Example zone names other than ``name`` (an example equal to the bad name would confuse)."""
    examples = [z for z in ("UTC", "Europe/Berlin", "Asia/Shanghai") if z != name]
    return " or ".join(repr(z) for z in examples[:2]) + " (names are case-sensitive)"


EMPTY_RANGE = (1, 0)
"""What a generator's ``id_range`` gives when no value can fall in the range (``start == end``, or
for snowflakes a span within one millisecond): ``low > high``, so ``between`` matches nothing."""


def aware_instant(value: object, what: str) -> datetime:
    """``value`` if it is an aware datetime (one instant everywhere): [`ConfigError`][sa_redis_ids.ConfigError] if it
    is naive, ``TypeError`` if it is not a datetime. ``what`` names the argument in the message."""
    if not isinstance(value, datetime):
        raise TypeError(f"{what} must be an aware datetime, not {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(
            f"{what}={value.isoformat()} is a naive datetime, which is no instant; give it a "
            "time zone (tzinfo=timezone.utc or a ZoneInfo) so the range means the same everywhere"
        )
    return value


def day_label(day: date) -> str:
    """The label a day is stored under: ``YYYYMMDD``."""
    return day.strftime("%Y%m%d")


def label_day(label: str) -> date:
    """The day of a ``YYYYMMDD`` label."""
    return datetime.strptime(label, "%Y%m%d").date()


def day_start_ms(day: date, tz: ZoneInfo) -> int:
    """The first UTC millisecond of ``day`` in ``tz``."""
    start = datetime(day.year, day.month, day.day, tzinfo=tz)
    return int(start.astimezone(timezone.utc).timestamp() * 1000)


def local_day(ms: int, tz: ZoneInfo) -> date:
    """The day in ``tz`` that holds UTC millisecond ``ms``."""
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).astimezone(tz).date()


class DayWindow:
    """One day window: its days, their labels and UTC boundaries, and the script arguments.

    Immutable; a `DayClock` replaces its window as a whole, so a reader that takes
    ``clock.window`` once sees days, keys and arguments that belong together.
    """

    __slots__ = ("args", "bounds", "days", "labels")

    def __init__(self, days: list[date], tz: ZoneInfo):
        bounds = [day_start_ms(day, tz) for day in days]
        bounds.append(day_start_ms(days[-1] + timedelta(days=1), tz))
        self.days: tuple[date, ...] = tuple(days)
        self.labels: tuple[str, ...] = tuple(map(day_label, days))
        self.bounds: tuple[int, ...] = tuple(bounds)
        """The m + 1 boundaries: day ``d`` is ``bounds[d] <= ms < bounds[d + 1]``."""
        self.args: tuple[str, ...] = (str(len(days)), *map(str, bounds), *self.labels)
        """``[m, boundaries…, labels…]`` as ``pick_day`` in ``day_window.lua`` reads them."""


class DayClock:
    """Builds the day-window arguments a date-keyed script needs, for one time zone.

    ``now`` (app server time in seconds, injectable) only seeds the first window; after that the
    window follows the Redis time the script reported.
    """

    def __init__(self, tz: str, *, now: Callable[[], float] = time.time):
        self.tz_name = tz
        self.tz = zone(tz)
        self._now = now
        self.window: DayWindow
        """The current window (replaced whole by `recenter`)."""
        self.recenter(int(now() * 1000))

    def recenter(self, around_ms: int) -> None:
        """Rebuild the window around UTC millisecond ``around_ms`` (as Redis sees it)."""
        today = local_day(around_ms, self.tz)
        days = [today + timedelta(days=d) for d in range(-DAYS_BEFORE, DAYS_AFTER + 1)]
        self.window = DayWindow(days, self.tz)

    @property
    def days(self) -> list[date]:
        """The days of the current window, oldest first (their order matches per-day KEYS)."""
        return list(self.window.days)

    def window_args(self) -> list[str]:
        """``[m, boundaries…, labels…]`` as ``pick_day`` in ``day_window.lua`` reads them."""
        return list(self.window.args)

    def snapshot(self) -> tuple[list[date], list[str]]:
        """Days and window arguments taken together, so per-day KEYS match the labels."""
        window = self.window
        return list(window.days), list(window.args)
