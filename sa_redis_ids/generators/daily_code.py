"""DailyCode: order codes ``prefix + YYYYMMDD + N-digit counter`` that restart every day.

``IS202611220001`` is the first code of 2026-11-22 for prefix ``IS``. The day comes from Redis
``TIME`` in ``tz`` (default ``Asia/Shanghai``), so app servers with skewed clocks agree on it. Each day
has its own counter key, created atomically by the first call of the day and expiring
``grace_days`` after the day ends, so Redis does not fill up. A day whose counter reaches
``10^digits − 1`` raises `SequenceExhausted`: a code never grows a digit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import check_int_option
from sa_redis_ids.generators.day_counter import DatedGenerator, Floor, Locker
from sa_redis_ids.generators.day_window import label_day

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import NodeSet

MAX_PREFIX_LENGTH = 20
MAX_DIGITS = 18
_PREFIX = re.compile(r"[A-Za-z0-9_\-]+")
_DIGITS = re.compile(r"[0-9]+")
DAY_MS = 86_400_000


@dataclass(frozen=True)
class DailyCodeParts:
    """A daily code decoded: prefix, day, counter, and which node issued it."""

    code: str
    prefix: str
    day: date
    counter: int
    node_index: int


def check_code_prefix(prefix: object) -> str:
    """Validate a code prefix: 1–20 of ``[A-Za-z0-9_-]``, else [`ConfigError`][sa_redis_ids.ConfigError]."""
    if not isinstance(prefix, str):
        raise ConfigError(f"code_prefix must be a str, not {type(prefix).__name__}")
    if not prefix:
        raise ConfigError("code_prefix must not be empty; use 1 to 20 of A-Z a-z 0-9 _ -")
    if len(prefix) > MAX_PREFIX_LENGTH:
        raise ConfigError(
            f"code_prefix={prefix!r} is {len(prefix)} characters long; at most {MAX_PREFIX_LENGTH} fit"
        )
    if not _PREFIX.fullmatch(prefix):
        raise ConfigError(f"code_prefix={prefix!r} may only hold A-Z a-z 0-9 _ and -")
    return prefix


TAIL_DIGITS = 3
TAIL_SPAN = 10**TAIL_DIGITS
_TAILS = [f"{tail:03d}" for tail in range(TAIL_SPAN)]
"""The last three digits of every counter, formatted once: a batch's codes are a head per
thousand counters plus one of these (a string concatenation per code, not a formatting)."""


def _compose_by_tails(part: str, digits: int, first: int, n: int, step: int) -> list[str]:
    """The codes of counters ``first, first + step, …`` (``n`` of them): for each thousand they
    span, its head (``part`` and the leading digits) followed by the counters' last three
    digits."""
    out: list[str] = []
    last = first + (n - 1) * step
    counter = first
    lead_digits = digits - TAIL_DIGITS
    while counter <= last:
        thousand, tail = divmod(counter, TAIL_SPAN)
        head = f"{part}{thousand:0{lead_digits}d}"
        end = min(TAIL_SPAN, last - thousand * TAIL_SPAN + 1)
        # one join and one split build the strings in C (a code never holds a space)
        out += (head + (" " + head).join(_TAILS[tail:end:step])).split(" ")
        counter += -(-(end - tail) // step) * step
    return out


class DailyCodeGenerator(DatedGenerator[str]):
    """Codes ``prefix + YYYYMMDD + counter``, the counter restarting at 1 every local day."""

    strategy = "dc"
    python_type = str
    storage = "key"

    def __init__(
        self,
        nodes: NodeSet,
        prefix: str,
        namespace: str,
        *,
        code_prefix: str = "IS",
        digits: int = 4,
        tz: str = "Asia/Shanghai",
        grace_days: int = 2,
        floor: Floor | None = None,
        locker: Locker | None = None,
        headroom: int | None = None,
    ):
        self.prefix = check_code_prefix(code_prefix)
        self.digits = check_int_option("digits", digits, low=1, high=MAX_DIGITS)
        self.grace_days = check_int_option("grace_days", grace_days, low=0, high=366)
        super().__init__(
            nodes,
            prefix,
            namespace,
            tz=tz,
            start=1,
            counter_max=10**self.digits - 1,
            floor=floor,
            locker=locker,
            grace_ms=self.grace_days * DAY_MS,
            headroom=headroom,
        )
        self._set_headroom(self.counter_max // len(nodes))

    @property
    def max_value(self) -> int:
        """The highest counter a day can reach (codes are strings; this bounds their counter)."""
        return self.counter_max

    @property
    def max_length(self) -> int:
        return len(self.prefix) + 8 + self.digits

    @property
    def config(self) -> str:
        return f"daily_code:prefix={self.prefix}:digits={self.digits}:tz={self.clock.tz_name}"

    def _store_key(self) -> str:
        return self.keys.key(self.strategy, "days")

    def compose(self, day: date, counter: int) -> str:
        """The code of counter ``counter`` on ``day``."""
        if not 0 <= counter <= self.counter_max:
            raise ValueError(f"counter {counter} does not fit {self.digits} digits")
        head: str = self._part(day)
        return f"{head}{counter:0{self.digits}d}"

    def compose_all(self, day: date, counters: range) -> list[str]:
        head: str = self._part(day)
        digits = self.digits
        return [f"{head}{counter:0{digits}d}" for counter in counters]

    def _day_part(self, day: date) -> str:
        """The code's head: the prefix and the day's ``YYYYMMDD``."""
        return f"{self.prefix}{day.year:04d}{day.month:02d}{day.day:02d}"

    def _compose(self, part: str, first: int, n: int, step: int) -> list[str]:
        digits = self.digits
        if n == 1:
            return [f"{part}{first:0{digits}d}"]
        if digits <= TAIL_DIGITS or n < TAIL_SPAN // 10:
            form = f"{part}%0{digits}d"
            return list(map(form.__mod__, range(first, first + n * step, step)))
        return _compose_by_tails(part, digits, first, n, step)

    def parse(self, code: str) -> DailyCodeParts:
        """Prefix, day, counter and issuing node of ``code``; ``ValueError`` if it is not a code
        of this generator (other prefix or length, not a date, a counter of 0)."""
        if not isinstance(code, str):
            raise ValueError(f"{code!r} is not a daily code (not a str)")
        if len(code) != self.max_length or not code.startswith(self.prefix):
            raise ValueError(
                f"{code!r} is not a code of this generator: expected {self.prefix!r} + YYYYMMDD "
                f"+ {self.digits} digits"
            )
        rest = code[len(self.prefix) :]
        if not _DIGITS.fullmatch(rest):
            raise ValueError(
                f"{code!r} is not a code of this generator: non-digits after the prefix"
            )
        try:
            day = label_day(rest[:8])
        except ValueError:
            raise ValueError(f"{code!r} does not hold a valid YYYYMMDD date") from None
        if day.year < 1000:  # Redis time never gives such a day; strftime would not pad it
            raise ValueError(f"{code!r} holds the year {day.year}; codes hold years 1000-9999")
        counter = int(rest[8:])
        if counter < 1:
            raise ValueError(f"{code!r} has counter 0; counters start at 1")
        return DailyCodeParts(
            code=code,
            prefix=self.prefix,
            day=day,
            counter=counter,
            node_index=(counter - 1) % len(self._nodes),
        )

    def day_and_counter(self, value: str) -> tuple[date, int]:
        parts = self.parse(value)
        return parts.day, parts.counter
