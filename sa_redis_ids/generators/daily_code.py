"""DailyCode: order codes ``prefix + YYYYMMDD + N-digit counter`` that restart every day.

``IS202611220001`` is the first code of 2026-11-22 for prefix ``IS``. The day comes from Redis
``TIME`` in ``tz`` (default ``Asia/Shanghai``), so app servers with skewed clocks agree on it. Each day
has its own counter key, created atomically by the first call of the day and expiring
``grace_days`` after the day ends, so Redis does not fill up. A day whose counter reaches
``10^digits − 1`` raises `SequenceExhausted`: a code never grows a digit.

``secret=`` (a key, see [`secret`][sa_redis_ids.secret]) writes each counter through the day's
keyed permutation of ``1 … 10^digits − 1`` (see [`permute`][sa_redis_ids.generators.permute]):
``IS202611277315`` instead of ``IS202611270042``, the same width, each code of the day still once,
and ``parse`` (with the key) gives the counter back.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date
from typing import TYPE_CHECKING, Any

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.base import check_int_option
from sa_redis_ids.generators.day_counter import DatedGenerator, Floor, Locker
from sa_redis_ids.generators.day_window import label_day
from sa_redis_ids.generators.permute import counter_permutation
from sa_redis_ids.secret import Secret, check_secret

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sa_redis_ids.redis.nodes import NodeSet

MAX_PREFIX_LENGTH = 20
MAX_DIGITS = 18
_PREFIX = re.compile(r"[A-Za-z0-9_\-]+")
_DIGITS = re.compile(r"[0-9]+")
DAY_MS = 86_400_000


@dataclass(frozen=True)
class DailyCodeParts:
    """A daily code decoded: prefix, day, counter, and which node issued it (with ``secret=``,
    the counter the code's digits hide)."""

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
        secret: bytes | str | Secret | None = None,
    ):
        self.secret: Secret | None = check_secret(secret)
        """The key the counters are hidden with (None: written as they are)."""
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
        self._cipher = counter_permutation(
            self.secret, self.strategy, self.namespace, self.start, self.counter_max
        )

    @property
    def max_value(self) -> int:
        """The highest counter a day can reach (codes are strings; this bounds their counter)."""
        return self.counter_max

    @property
    def max_length(self) -> int:
        return len(self.prefix) + 8 + self.digits

    @property
    def config(self) -> str:
        found = f"daily_code:prefix={self.prefix}:digits={self.digits}:tz={self.clock.tz_name}"
        return found if self.secret is None else f"{found}:secret={self.secret.fingerprint}"

    def _store_key(self) -> str:
        return self.keys.key(self.strategy, "days")

    def compose(self, day: date, counter: int) -> str:
        """The code of counter ``counter`` on ``day`` (with a secret: of a counter from 1)."""
        if not 0 <= counter <= self.counter_max:
            raise ValueError(f"counter {counter} does not fit {self.digits} digits")
        if self._cipher is not None:
            return self._compose(self._part(day), counter, 1, 1)[0]
        head: str = self._part(day)
        return f"{head}{counter:0{self.digits}d}"

    def compose_all(self, day: date, counters: range) -> list[str]:
        if self._cipher is not None:
            return self._compose(self._part(day), counters.start, len(counters), counters.step)
        head: str = self._part(day)
        digits = self.digits
        return [f"{head}{counter:0{digits}d}" for counter in counters]

    def day_bounds(self, day: date) -> tuple[str, str]:
        """The lowest and highest code of ``day``, counters 0 and ``10^digits − 1`` (a secret
        moves codes within the day, never out of it)."""
        head = self._head(day)
        return f"{head}{0:0{self.digits}d}", f"{head}{self.counter_max}"

    def _head(self, day: date) -> str:
        """The code's head: the prefix and the day's ``YYYYMMDD``."""
        return f"{self.prefix}{day.year:04d}{day.month:02d}{day.day:02d}"

    def _day_part(self, day: date) -> Any:
        """The code's head; with a secret, the head and the day (its permutation's tweak)."""
        head = self._head(day)
        return head if self._cipher is None else (head, day)

    def _compose(self, part: Any, first: int, n: int, step: int) -> list[str]:
        digits = self.digits
        cipher = self._cipher
        if cipher is not None:
            head, day = part
            shown = cipher.day(day).encrypt_all(first, n, step)
            return [f"{head}{counter:0{digits}d}" for counter in shown]
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
        if self._cipher is not None:
            counter = self._cipher.day(day).decrypt(counter)
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

    def highest_counter(self, day: date, values: Iterable[str]) -> int:
        """The highest counter among the codes ``values`` of ``day`` (0 when none): what a floor
        reads when the codes hide their counters. Other texts, and codes of other days or with
        the digits 0, are passed over: this generator never issues them."""
        head = self._head(day)
        width = len(head) + self.digits
        decrypt = None if self._cipher is None else self._cipher.day(day).decrypt
        found = 0
        for value in values:
            if not (isinstance(value, str) and len(value) == width and value.startswith(head)):
                continue
            digits = value[len(head) :]
            if not _DIGITS.fullmatch(digits) or int(digits) < 1:
                continue
            counter = int(digits) if decrypt is None else decrypt(int(digits))
            found = max(found, counter)
        return found
