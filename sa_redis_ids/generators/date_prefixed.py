"""DatePrefixed: a date prefix followed by the zero-padded day counter, e.g. ``2026112200000000042``.

Formats: ``YYYYMMDD``, ``YYMMDD``, ``YYYYDDD``, ``YYDDD`` (DDD = day of the year); ``length`` is
the total number of digits (8–19); the counter gets ``length − len(prefix)`` digits and restarts each
day. Counters live in one hash per namespace, one field per day label, incremented by ``HINCRBY`` in
the Lua call that also creates the field, so the hot path is one round trip.

Bounds: the last day a configuration can serve is the last day whose largest value still fits a
signed BIGINT (or 2^53 − 1 with ``js_safe``), capped by the format (``YY`` formats cover 2000–2099).
A configuration must serve every day through `HORIZON` (the end of the ``YY`` century), else
it is a [`ConfigError`][sa_redis_ids.ConfigError] at construction. ``max_value`` is the largest value of that last day;
an exhausted day raises [`SequenceExhausted`][sa_redis_ids.SequenceExhausted] and never grows a digit.

``secret=`` (a key, see [`secret`][sa_redis_ids.secret]) writes each counter through the day's
keyed permutation of ``start … 10^k − 1`` (see [`permute`][sa_redis_ids.generators.permute]): the
values of a day are the same set, each still once, in an order only the key holder can undo
(``parse`` gives the counter back); the bounds above do not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from sa_redis_ids.bounds import BIGINT_MAX, limit_for
from sa_redis_ids.buffering import BufferedGenerator, Buffering, day_source
from sa_redis_ids.errors import ConfigError, SequenceExhausted
from sa_redis_ids.generators.base import check_int_option
from sa_redis_ids.generators.day_counter import DatedGenerator, Floor, Locker
from sa_redis_ids.generators.day_window import EMPTY_RANGE, aware_instant, day_label, day_start_ms
from sa_redis_ids.generators.permute import counter_permutation
from sa_redis_ids.redis.plans import Plan, planned
from sa_redis_ids.secret import Secret, check_secret
from sa_redis_ids.validation import check_bool

if TYPE_CHECKING:
    from collections.abc import Iterable

    from sa_redis_ids.redis.nodes import NodeSet

FORMATS: dict[str, int] = {"YYYYMMDD": 8, "YYMMDD": 6, "YYYYDDD": 7, "YYDDD": 5}
"""Each format and the digits its prefix takes."""

MIN_LENGTH = 8
MAX_LENGTH = 19

HORIZON = date(2099, 12, 31)
"""Every configuration must be able to issue values for every day up to this one."""


@dataclass(frozen=True)
class DatePrefixedParts:
    """A date-prefixed value decoded: its day, its counter part, and which node issued it
    (with ``secret=``, the counter its digits hide)."""

    value: int
    day: date
    counter: int
    node_index: int


def _first_day(fmt: str) -> date:
    return date(2000, 1, 1) if fmt.startswith("YY") and not fmt.startswith("YYYY") else date.min


def _format_last_day(fmt: str) -> date:
    return date(2099, 12, 31) if fmt.startswith("YY") and not fmt.startswith("YYYY") else date.max


def prefix_text(fmt: str, day: date) -> str:
    """The date prefix of ``day`` in ``fmt`` (``YY`` formats take the year modulo 100)."""
    year = f"{day.year:04d}" if fmt.startswith("YYYY") else f"{day.year % 100:02d}"
    if fmt.endswith("MMDD"):
        return f"{year}{day.month:02d}{day.day:02d}"
    return f"{year}{day.timetuple().tm_yday:03d}"


def parse_prefix(fmt: str, text: str) -> date:
    """The day of a date prefix in ``fmt``; ``ValueError`` if it is not a date."""
    width = 4 if fmt.startswith("YYYY") else 2
    year = int(text[:width]) + (0 if width == 4 else 2000)
    rest = text[width:]
    if fmt.endswith("MMDD"):
        return date(year, int(rest[:2]), int(rest[2:]))
    ordinal = int(rest)
    if not 1 <= ordinal <= 366:  # first: day 0 of year 1 is before date.min, 873 of 9999 after max
        raise ValueError(f"day of year {ordinal} does not exist in {year}")
    try:
        day = date(year, 1, 1) + timedelta(days=ordinal - 1)
    except OverflowError:  # day 366 of 9999 (not a leap year) would be in year 10000
        raise ValueError(f"day of year {ordinal} does not exist in {year}") from None
    if day.year != year:
        raise ValueError(f"day of year {ordinal} does not exist in {year}")
    return day


def last_day(fmt: str, length: int, limit: int) -> date | None:
    """The last day whose largest value (``length`` digits) is at most ``limit``; None if none."""
    scale = 10 ** (length - FORMATS[fmt])
    most = (limit - (scale - 1)) // scale  # the largest prefix whose whole day fits
    first, day = _first_day(fmt), _format_last_day(fmt)
    if int(prefix_text(fmt, day)) <= most:
        return day
    text = str(most).zfill(FORMATS[fmt])
    if len(text) > FORMATS[fmt]:  # pragma: no cover - the format's last day would have fitted
        return day
    width = 4 if fmt.startswith("YYYY") else 2
    year = int(text[:width]) + (0 if width == 4 else 2000)
    if year < first.year:
        return None
    day = min(day, date(year, 12, 31))
    while int(prefix_text(fmt, day)) > most:  # at most a year of steps
        if day == first:
            return None
        day -= timedelta(days=1)
    return day


def _limit_name(js_safe: bool) -> str:
    return "2^53−1, js_safe=True" if js_safe else "signed BIGINT"


class DatePrefixedGenerator(BufferedGenerator[int], DatedGenerator[int]):
    """Integers ``<date prefix><zero-padded day counter>``, unique across nodes and midnight.

    ``block=`` buffers blocks of one ``HINCRBY`` (see `sa_redis_ids.buffering`); a
    buffered block never spans two days: what is left of it at the day change is dropped (gaps).
    """

    strategy = "dp"
    python_type = int
    storage = "hash"

    def __init__(
        self,
        nodes: NodeSet,
        prefix: str,
        namespace: str,
        *,
        fmt: str = "YYYYMMDD",
        length: int = 19,
        start: int = 1,
        tz: str = "UTC",
        js_safe: bool = False,
        floor: Floor | None = None,
        locker: Locker | None = None,
        block: int | Buffering | None = None,
        headroom: int | None = None,
        secret: bytes | str | Secret | None = None,
    ):
        self.secret: Secret | None = check_secret(secret)
        """The key the counters are hidden with (None: written as they are)."""
        if fmt not in FORMATS:
            raise ConfigError(f"fmt={fmt!r} is not a date format; use one of {', '.join(FORMATS)}")
        length = check_int_option("length", length, low=MIN_LENGTH, high=MAX_LENGTH)
        width = FORMATS[fmt]
        if length <= width:
            raise ConfigError(
                f"length={length} with fmt={fmt} leaves the counter no digits (the date takes "
                f"{width}); use length>={width + 1}"
            )
        js_safe = check_bool("js_safe", js_safe)
        limit = limit_for(js_safe)
        self.fmt = fmt
        self.length = length
        self.js_safe = js_safe
        self.counter_digits = length - width
        self._scale: int = 10**self.counter_digits
        self.first_day = _first_day(fmt)
        found = last_day(fmt, length, limit)
        if found is None or found < HORIZON:
            raise ConfigError(self._bound_message(limit))
        self.last_day = found
        """The last day this configuration can issue values for (it runs out after it)."""
        start = check_int_option("start", start, low=0, high=self._scale - 1)
        super().__init__(
            nodes,
            prefix,
            namespace,
            tz=tz,
            start=start,
            counter_max=self._scale - 1,
            floor=floor,
            locker=locker,
            headroom=headroom,
        )
        self._cipher = counter_permutation(
            self.secret, self.strategy, self.namespace, self.start, self.counter_max
        )
        self._max_value = self._plain(found, self._scale - 1)
        fetch, clock = day_source(self)
        self._use_buffer(block, fetch, capacity=self.capacity_per_day, clock=clock, expiring=True)
        self._set_headroom(
            self.capacity_per_day // len(nodes),
            None if self.buffer is None else self.buffer.options.max_block,
        )

    def _bound_message(self, limit: int) -> str:
        reach = int(prefix_text(self.fmt, HORIZON)) * self._scale + self._scale - 1
        fits = [
            n
            for n in range(MIN_LENGTH, MAX_LENGTH + 1)
            if n > FORMATS[self.fmt] and (last_day(self.fmt, n, limit) or date.min) >= HORIZON
        ]
        advice = f"use length<={max(fits)}" if fits else "use a shorter fmt"
        if self.js_safe and (last_day(self.fmt, self.length, BIGINT_MAX) or date.min) >= HORIZON:
            advice += " or js_safe=False"
        return (
            f"length={self.length} with fmt={self.fmt} reaches {reach} on {HORIZON}, past "
            f"{limit} ({_limit_name(self.js_safe)}); {advice}"
        )

    @property
    def max_value(self) -> int:
        return self._max_value

    @property
    def capacity_per_day(self) -> int:
        """How many values one day holds, over all nodes together."""
        return self._scale - self.start

    @property
    def config(self) -> str:
        found = (
            f"date_prefixed:fmt={self.fmt}:length={self.length}:start={self.start}"
            f":tz={self.clock.tz_name}"
        )
        return found if self.secret is None else f"{found}:secret={self.secret.fingerprint}"

    def _store_key(self) -> str:
        return self.keys.key(self.strategy)

    @planned
    def purge_before(self, day: date) -> Plan[list[date]]:
        """As [`DatedGenerator.purge_before`][sa_redis_ids.generators.day_counter.DatedGenerator.purge_before], and first drop this process's buffered blocks of
        the purged days (a fetch in flight included; thread and asyncio buffers alike). Other
        processes keep theirs at most until those days end by their deadlines (maintenance
        purges days long over: none are left)."""
        day = self._purge_day(day)
        for buffer in self.buffers:
            buffer.end_periods(day_start_ms(day, self.clock.tz))
        return self._purge(day_label(day - timedelta(days=1)))

    def day_range(self) -> tuple[date, date]:
        first, last = super().day_range()
        return max(first, self.first_day), min(last, self.last_day)

    def id_range(self, start: datetime | date, end: datetime | date) -> tuple[int, int]:
        """``(low, high)``: inclusive bounds of every value this generator can issue for a time in
        ``[start, end)``, so that:

        ```python
        select(Order).where(Order.id.between(*order_ids.id_range(start, end)))
        ```

        finds the rows made in that range. ``start`` and ``end`` are aware datetimes, or dates,
        which mean the start of that local day in the generator's ``tz``: ``id_range(day, day +
        timedelta(days=1))`` is one whole day. A value knows only its local day, so the bounds
        are those of whole days: from the first value (counter ``start``) of the local day that
        holds ``start`` to the last possible value of the local day that holds the last instant
        before ``end``. A range partly outside the days the configuration covers
        (`day_range`) is cut to them; one wholly outside them, a naive datetime or ``end <
        start`` raise [`ConfigError`][sa_redis_ids.ConfigError]; ``start == end`` gives ``(1, 0)``, which matches
        nothing. No Redis call.
        """
        tz = self.clock.tz
        first_day, start_at = self._range_day(start, "start", tz, first=True)
        last_day, end_at = self._range_day(end, "end", tz, first=False)
        if end_at < start_at:
            raise ConfigError(
                f"end={end.isoformat()} is before start={start.isoformat()}; a range is "
                "[start, end)",
                namespace=self.namespace,
            )
        if end_at == start_at:
            return EMPTY_RANGE
        low_day, high_day = self.day_range()
        if last_day < low_day or first_day > high_day:
            raise ConfigError(
                f"no value of fmt={self.fmt} with length={self.length} falls in "
                f"[{start.isoformat()}, {end.isoformat()}): that is {first_day} to {last_day} in "
                f"{self.clock.tz_name}, and its values cover the days {low_day} to {high_day}",
                namespace=self.namespace,
            )
        first_day, last_day = max(first_day, low_day), min(last_day, high_day)
        return self._plain(first_day, self.start), self._plain(last_day, self._scale - 1)

    @staticmethod
    def _range_day(
        value: datetime | date, what: str, tz: ZoneInfo, *, first: bool
    ) -> tuple[date, datetime]:
        """The local day in ``tz`` a range bound stands for and the instant it is: for ``start``
        (``first``) the day that holds it, for ``end`` the day that holds the instant before it."""
        if isinstance(value, datetime):
            instant = aware_instant(value, what)
            before = instant if first else instant - timedelta(microseconds=1)
            try:
                return before.astimezone(tz).date(), instant
            except OverflowError:  # within a day of datetime.min or datetime.max
                return (date.min if before.year == 1 else date.max), instant
        if isinstance(value, date):
            at = datetime(value.year, value.month, value.day, tzinfo=tz)
            if first:
                return value, at
            return (value - timedelta(days=1) if value > date.min else value), at
        raise TypeError(f"{what} must be an aware datetime or a date, not {type(value).__name__}")

    def _check_day(self, day: date) -> None:
        if not self.first_day <= day <= self.last_day:
            raise SequenceExhausted(
                f"fmt={self.fmt} with length={self.length} has no prefix for {day}: it covers "
                f"{self.first_day} to {self.last_day}",
                namespace=self.namespace,
            )

    def compose(self, day: date, counter: int) -> int:
        """The value of counter part ``counter`` on ``day`` (with a secret: of a counter from
        ``start``)."""
        if not 0 <= counter < self._scale:
            raise ValueError(f"counter {counter} does not fit {self.counter_digits} digits")
        if self._cipher is not None:
            return self._compose(self._part(day), counter, 1, 1)[0]
        base: int = self._part(day)
        return base + counter

    def compose_all(self, day: date, counters: range) -> list[int]:
        if self._cipher is not None:
            return self._compose(self._part(day), counters.start, len(counters), counters.step)
        base: int = self._part(day)
        return list(range(base + counters.start, base + counters.stop, counters.step))

    def _plain(self, day: date, digits: int) -> int:
        """The value of ``day`` whose counter digits are ``digits`` (no secret applied)."""
        return self._base(day) + digits

    def day_bounds(self, day: date) -> tuple[int, int]:
        """The lowest and highest value of ``day``, counter digits all 0 and all 9 (a secret
        moves values within the day, never out of it)."""
        return self._plain(day, 0), self._plain(day, self.counter_max)

    def _base(self, day: date) -> int:
        """The day's prefix as a number, shifted above the counter digits."""
        return int(prefix_text(self.fmt, day)) * self._scale

    def _day_part(self, day: date) -> Any:
        """The day's prefix as a number; with a secret, that number and the day (its
        permutation's tweak)."""
        base = self._base(day)
        return base if self._cipher is None else (base, day)

    def _compose(self, part: Any, first: int, n: int, step: int) -> list[int]:
        cipher = self._cipher
        if cipher is not None:
            base, day = part
            return [base + shown for shown in cipher.day(day).encrypt_all(first, n, step)]
        base = part + first
        return [base] if n == 1 else list(range(base, base + n * step, step))

    def parse(self, value: int) -> DatePrefixedParts:
        """The day, counter part and issuing node of ``value``; ``ValueError`` if it is not one."""
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{value!r} is not a value of this date-prefixed generator")
        text = str(value).zfill(self.length)
        if len(text) > self.length:
            raise ValueError(f"{value} has more than {self.length} digits")
        width = FORMATS[self.fmt]
        try:
            day = parse_prefix(self.fmt, text[:width])
        except ValueError as exc:
            raise ValueError(f"{value} does not start with a {self.fmt} date: {exc}") from None
        counter = int(text[width:])
        if counter < self.start:
            raise ValueError(f"{value} has counter {counter}, below start={self.start}")
        if self._cipher is not None:
            counter = self._cipher.day(day).decrypt(counter)
        return DatePrefixedParts(
            value=value,
            day=day,
            counter=counter,
            node_index=(counter - self.start) % len(self._nodes),
        )

    def day_and_counter(self, value: int) -> tuple[date, int]:
        parts = self.parse(value)
        return parts.day, parts.counter

    def highest_counter(self, day: date, values: Iterable[int]) -> int:
        """The highest counter among the values ``values`` of ``day`` (0 when none): what a
        floor reads when the values hide their counters. Values of other days, or whose counter
        digits are below ``start``, are passed over: this generator never issues them."""
        low = self._plain(day, self.start)
        high = self._plain(day, self.counter_max)
        base = self._base(day)
        decrypt = None if self._cipher is None else self._cipher.day(day).decrypt
        found = 0
        for value in values:
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                continue
            counter = value - base if decrypt is None else decrypt(value - base)
            found = max(found, counter)
        return found
