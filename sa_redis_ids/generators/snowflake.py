"""Snowflake: ``milliseconds · shard · sequence`` packed into one positive 63-bit integer.

The milliseconds come from the Redis server's ``TIME`` (never the app server's clock). A Lua script
keeps, per namespace and node, the last millisecond and sequence slot issued and the latest Redis
time it has seen, and returns only small numbers; Python composes the 64-bit value, because Lua
numbers are doubles.

* **Layouts.** ``"default"``: 41 bits of milliseconds since 2026-01-01T00:00:00Z, 12 shard bits, 10
  sequence bits (runs out in 2095). ``"compat"``: the classic layout, milliseconds since 1970 with the
  same widths, to decode and continue IDs of existing deployments; it warns, because it runs out in
  2039. ``"js_safe"``: 41/0/12 since 2026-01-01, every ID at most 2^53 − 1. Or any
  [`SnowflakeLayout`][sa_redis_ids.SnowflakeLayout].
* **Sequence used up.** When a millisecond's slots are used up the script moves on to the next
  millisecond even if the clock has not reached it yet (borrowing); IDs never repeat.
* **Clock backwards** means the Redis time is behind the latest time *seen*, not behind the last
  millisecond issued (which may be borrowed). Up to ``tolerance_ms`` behind, the node keeps issuing
  after its last millisecond; further behind it raises [`ClockMovedBackwards`][sa_redis_ids.ClockMovedBackwards].
* **Lost state.** A new namespace (no state and no claim on the node, no mark in this process,
  nothing in the floor) starts at the current millisecond. A process that already received IDs
  from the node remembers the last (millisecond, slot): a state missing (``FLUSHALL``, a restart
  without persistence, the state key alone deleted or evicted while its claim survives), below
  it, or on a node that moved (a failover to a replica that missed the last writes) is a loss:
  it resumes ``headroom`` ms (default ``tolerance_ms``) after the later of that mark and the
  clock, so IDs borrowed ahead of the clock are not repeated either, and never below the floor;
  the heal is logged and counted. The headroom is not added above the floor: the floor also
  shows IDs other processes issued after the loss (their own heals), and each process that heals
  after one loss would otherwise move the state another ``headroom`` ahead of the clock.
* **Floors.** ``floor=`` (the highest ID a table holds, see
  [`floor_from_column`][sa_redis_ids.floor_from_column]; a generator bound to a column reads that
  column) bounds the state from below. A state at or past this process's mark but below the floor
  lost nothing this process knows of (rows of its own last milliseconds, another node's, or IDs
  of a generator this one took over from): the next ID is simply the first slot after the
  floor's millisecond, or the clock's if later; nothing is healed, logged or counted.
* **N nodes** (a step scheme): node ``k`` of ``N`` only issues sequence values ``≡ k (mod
  N)``, so two nodes can never produce the same (millisecond, shard, sequence).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, ClassVar

from sa_redis_ids.errors import ConfigError, ScriptError
from sa_redis_ids.generators.base import IdGenerator, check_count, check_int_option, first
from sa_redis_ids.generators.day_window import EMPTY_RANGE, aware_instant
from sa_redis_ids.redis.plans import Plan, Run, now, planned_as, run_plan
from sa_redis_ids.redis.scripts import NeedsFloor, check_reply, reply_text

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import Node, NodeSet

UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
DEFAULT_EPOCH_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z, the epoch of the ``default`` and ``js_safe`` layouts."""
DEFAULT_TOLERANCE_MS = 1000
"""How far the Redis clock may fall behind before `ClockMovedBackwards` is raised."""
MAX_TOLERANCE_MS = 3_600_000
SNOWFLAKE_MAX_BATCH = 100_000
"""The most IDs one ``next_ids`` call may take (more would borrow far into the future)."""
TOTAL_BITS = 63
"""A signed BIGINT has 63 value bits; the sign bit stays 0."""


def _unix_us(instant: datetime) -> int:
    """Microseconds since 1970 of an aware datetime, exactly (no float on the way)."""
    return (instant - UNIX_EPOCH) // timedelta(microseconds=1)


class SnowflakeCompatWarning(UserWarning):
    """The ``compat`` layout was chosen: its IDs (ms since 1970 in 41 bits) run out in 2039."""


def _ms_to_datetime(ms: int) -> datetime:
    """UTC datetime of ``ms`` since 1970, exact to the millisecond (``datetime.max`` past year 9999)."""
    try:
        return UNIX_EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return datetime.max.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class SnowflakeParts:
    """A snowflake ID decoded: when it was made (UTC), on which shard, with which sequence."""

    value: int
    timestamp: datetime
    """The UTC datetime of its millisecond."""
    ms: int
    """Milliseconds since 1970-01-01T00:00:00Z (Unix time in ms)."""
    shard: int
    sequence: int


@dataclass(frozen=True)
class SnowflakeLayout:
    """Bit widths and epoch of a snowflake ID: ``(ms − epoch) << (shard+seq) | shard << seq | seq``.

    ``time_bits + shard_bits + sequence_bits`` must be at most 63, so IDs stay positive in a signed
    BIGINT. Each millisecond holds ``2**sequence_bits`` IDs per namespace (split across nodes), and
    the layout runs out ``2**time_bits`` ms after ``epoch_ms`` ([`runs_out_at`][sa_redis_ids.SnowflakeLayout.runs_out_at]).
    """

    epoch_ms: int = DEFAULT_EPOCH_MS
    time_bits: int = 41
    shard_bits: int = 12
    sequence_bits: int = 10

    def __post_init__(self) -> None:
        check_int_option("epoch_ms", self.epoch_ms, low=0, high=2**53)
        check_int_option("time_bits", self.time_bits, low=1, high=TOTAL_BITS - 1)
        check_int_option("shard_bits", self.shard_bits, low=0, high=TOTAL_BITS - 2)
        check_int_option("sequence_bits", self.sequence_bits, low=1, high=TOTAL_BITS - 1)
        total = self.time_bits + self.shard_bits + self.sequence_bits
        if total > TOTAL_BITS:
            raise ConfigError(
                f"time_bits={self.time_bits} + shard_bits={self.shard_bits} + "
                f"sequence_bits={self.sequence_bits} = {total} bits; at most {TOTAL_BITS} fit a "
                "signed BIGINT (the default is 41 + 12 + 10)"
            )

    @property
    def total_bits(self) -> int:
        return self.time_bits + self.shard_bits + self.sequence_bits

    @property
    def max_value(self) -> int:
        """The largest ID the layout can hold: ``2**total_bits − 1``."""
        return (1 << self.total_bits) - 1

    @property
    def max_ms(self) -> int:
        """The last millisecond after the epoch the layout can hold."""
        return (1 << self.time_bits) - 1

    @property
    def max_shard(self) -> int:
        return (1 << self.shard_bits) - 1

    @property
    def max_sequence(self) -> int:
        return (1 << self.sequence_bits) - 1

    @property
    def epoch(self) -> datetime:
        """The epoch as a UTC datetime."""
        return _ms_to_datetime(self.epoch_ms)

    @property
    def runs_out_at(self) -> datetime:
        """The first UTC instant the layout cannot hold (``datetime.max`` if past year 9999)."""
        return _ms_to_datetime(self.epoch_ms + self.max_ms + 1)

    def describe(self) -> str:
        """``epoch_ms=…,bits=time/shard/sequence``: the options that shape the IDs."""
        return (
            f"epoch_ms={self.epoch_ms},bits={self.time_bits}/{self.shard_bits}/{self.sequence_bits}"
        )

    def compose(self, ms: int, shard: int, sequence: int) -> int:
        """The ID of Unix millisecond ``ms``, ``shard`` and ``sequence``; ValueError if one won't fit."""
        since = ms - self.epoch_ms
        if not 0 <= since <= self.max_ms:
            raise ValueError(
                f"millisecond {ms} is outside this layout's span "
                f"({self.epoch_ms} to {self.epoch_ms + self.max_ms})"
            )
        check_shard(shard, self)
        if not 0 <= sequence <= self.max_sequence:
            raise ValueError(
                f"sequence {sequence} does not fit; it must be 0 to {self.max_sequence}"
            )
        return self._compose_run(since, sequence, 1, self.max_sequence + 1, shard, 1, 0)[0]

    def _compose_run(
        self, since: int, slot: int, n: int, slots: int, shard: int, step: int, index: int
    ) -> list[int]:
        """The IDs of ``n`` consecutive slots from slot ``slot`` of millisecond ``since`` (after
        the epoch) for ``shard``, a millisecond holding ``slots`` slots; slot ``s`` is sequence
        ``s·step + index`` (node ``index`` of ``step`` owns those). The one place IDs are packed;
        its inputs are trusted ([`compose`][sa_redis_ids.SnowflakeLayout.compose] checks them, the generator has them from Redis).
        """
        time_shift = self.shard_bits + self.sequence_bits
        shard_part = shard << self.sequence_bits
        values: list[int] = []
        extend = values.extend
        while n > 0:
            take = min(n, slots - slot)
            first = ((since << time_shift) | shard_part) + slot * step + index
            extend(range(first, first + take * step, step))
            n -= take
            since, slot = since + 1, 0
        return values

    def parse(self, value: int) -> SnowflakeParts:
        """Decode an ID of this layout into its UTC time, shard and sequence."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"a snowflake ID is an int, not {type(value).__name__}")
        if not 0 <= value <= self.max_value:
            raise ValueError(f"{value} is not an ID of this layout (0 to {self.max_value})")
        sequence = value & self.max_sequence
        shard = (value >> self.sequence_bits) & self.max_shard
        ms = (value >> (self.shard_bits + self.sequence_bits)) + self.epoch_ms
        return SnowflakeParts(
            value=value, timestamp=_ms_to_datetime(ms), ms=ms, shard=shard, sequence=sequence
        )

    def id_range(self, start: datetime, end: datetime) -> tuple[int, int]:
        """``(low, high)``: inclusive bounds of every ID of this layout whose time (the
        millisecond [`parse`][sa_redis_ids.SnowflakeLayout.parse] gives) lies in ``[start, end)``, all shards and sequences; for
        ``Model.id.between(low, high)``. See [`SnowflakeGenerator.id_range`][sa_redis_ids.SnowflakeGenerator.id_range]."""
        return self._id_range(start, end)

    def _id_range(
        self, start: datetime, end: datetime, namespace: str | None = None
    ) -> tuple[int, int]:
        start_us = _unix_us(aware_instant(start, "start"))
        end_us = _unix_us(aware_instant(end, "end"))
        if end_us < start_us:
            raise ConfigError(
                f"end={end.isoformat()} is before start={start.isoformat()}; a range is "
                "[start, end)",
                namespace=namespace,
            )
        last_ms = self.epoch_ms + self.max_ms
        if start_us < end_us and (end_us <= self.epoch_ms * 1000 or start_us > last_ms * 1000):
            raise ConfigError(
                f"no ID of this layout has a time in [{start.isoformat()}, {end.isoformat()}): "
                f"its IDs run from {self.epoch:%Y-%m-%d %H:%M:%S} UTC (epoch_ms={self.epoch_ms}) "
                f"to before {self.runs_out_at:%Y-%m-%d %H:%M:%S} UTC",
                namespace=namespace,
            )
        # The milliseconds m with start <= m < end, as far as the layout holds them.
        first = max(-(-start_us // 1000), self.epoch_ms)
        last = min(-(-end_us // 1000) - 1, last_ms)
        if first > last:
            return EMPTY_RANGE
        time_shift = self.shard_bits + self.sequence_bits
        return (first - self.epoch_ms) << time_shift, ((last - self.epoch_ms + 1) << time_shift) - 1


LAYOUTS: dict[str, SnowflakeLayout] = {
    "default": SnowflakeLayout(),
    "compat": SnowflakeLayout(epoch_ms=0, time_bits=41, shard_bits=12, sequence_bits=10),
    "js_safe": SnowflakeLayout(time_bits=41, shard_bits=0, sequence_bits=12),
}
"""The named layouts ``ids.snowflake(ns, layout=…)`` accepts."""


def resolve_layout(layout: str | SnowflakeLayout, *, stacklevel: int = 2) -> SnowflakeLayout:
    """The layout a name stands for (``"compat"`` warns), or ``layout`` itself if it is one."""
    if isinstance(layout, SnowflakeLayout):
        return layout
    if not isinstance(layout, str) or layout not in LAYOUTS:
        names = ", ".join(repr(name) for name in LAYOUTS)
        raise ConfigError(f"layout={layout!r} is not one of {names} or a SnowflakeLayout")
    if layout == "compat":
        warnings.warn(
            "the 'compat' snowflake layout (ms since 1970 in 41 bits) runs out on "
            f"{LAYOUTS['compat'].runs_out_at:%Y-%m-%d}; use it only to continue IDs of an existing "
            "deployment, and the 'default' layout (epoch 2026-01-01) for new ones",
            SnowflakeCompatWarning,
            stacklevel=stacklevel + 1,
        )
    return LAYOUTS[layout]


def check_shard(shard: object, layout: SnowflakeLayout) -> int:
    """``shard`` if it is an int that fits the layout's shard bits, else ValueError."""
    if isinstance(shard, bool) or not isinstance(shard, int):
        raise ValueError(f"shard must be an int, not {type(shard).__name__}")
    if not 0 <= shard <= layout.max_shard:
        raise ValueError(
            f"shard {shard} does not fit {layout.shard_bits} shard bits; "
            f"it must be 0 to {layout.max_shard}"
        )
    return shard


NO_GUARD = (-1, 0)
"""A guard (millisecond, slot) below every state: nothing to guard."""


class _NodeCall:
    """What the snowflake script is sent on one node at every call, fixed at construction: the
    claim, the slots per millisecond, the keys and the constant arguments (as bytes)."""

    __slots__ = ("claim", "head", "headroom", "keys", "slots")

    def __init__(
        self,
        *,
        claim: str,
        slots: int,
        keys: tuple[str, str, str],
        head: tuple[bytes, ...],
        headroom: bytes,
    ):
        self.claim = claim
        self.slots = slots
        self.keys = keys
        self.head = head
        """The epoch, last millisecond, slots per millisecond and tolerance."""
        self.headroom = headroom


class SnowflakeGenerator(IdGenerator[int]):
    """Time-ordered IDs with a shard and a sequence, decodable with [`parse`][sa_redis_ids.SnowflakeGenerator.parse]."""

    strategy = "snowflake"
    python_type = int
    max_batch: ClassVar[int] = SNOWFLAKE_MAX_BATCH
    """The most values one ``next_ids`` call may take."""

    def __init__(
        self,
        nodes: NodeSet,
        prefix: str,
        namespace: str,
        *,
        layout: str | SnowflakeLayout = "default",
        tolerance_ms: int = DEFAULT_TOLERANCE_MS,
        now: Callable[[], float] = time.time,
        floor: Callable[[], int] | None = None,
        headroom: int | None = None,
    ):
        super().__init__(nodes, prefix, namespace, floor=floor, headroom=headroom)
        self.layout = resolve_layout(layout, stacklevel=2)
        self.tolerance_ms = check_int_option(
            "tolerance_ms", tolerance_ms, low=0, high=MAX_TOLERANCE_MS
        )
        if headroom is not None and headroom > MAX_TOLERANCE_MS:
            raise ConfigError(
                f"headroom={headroom} ms is out of range; it must be from 0 to {MAX_TOLERANCE_MS}",
                namespace=self.namespace,
            )
        self.headroom = self.tolerance_ms if headroom is None else headroom
        """Milliseconds a lost or rewound state resumes after the later of the guard and the clock."""
        self.state_key = self.keys.key(self.strategy)
        self._check_time_span(int(now() * 1000))
        self._check_nodes(len(nodes))
        self._calls = [self._call_for(node) for node in nodes.nodes]
        """Per node: what every script call sends that never changes, computed once."""

    def _check_time_span(self, now_ms: int) -> None:
        layout = self.layout
        if layout.epoch_ms > now_ms:
            raise ConfigError(
                f"epoch_ms={layout.epoch_ms} ({layout.epoch:%Y-%m-%d %H:%M:%S} UTC) is in the "
                f"future; it must be at most the current time ({now_ms})",
                namespace=self.namespace,
            )
        if layout.epoch_ms + layout.max_ms < now_ms:
            raise ConfigError(
                f"time_bits={layout.time_bits} with epoch_ms={layout.epoch_ms} ran out on "
                f"{layout.runs_out_at:%Y-%m-%d}; more time_bits or a later epoch_ms would fit",
                namespace=self.namespace,
            )

    def _check_nodes(self, count: int) -> None:
        values = self.layout.max_sequence + 1
        if count > values:
            raise ConfigError(
                f"sequence_bits={self.layout.sequence_bits} gives {values} sequence values per "
                f"millisecond, fewer than the {count} nodes that split them; at least "
                f"{(count - 1).bit_length()} sequence bits fit",
                namespace=self.namespace,
            )

    @property
    def max_value(self) -> int:
        return self.layout.max_value

    @property
    def runs_out_at(self) -> datetime:
        """The first UTC instant this generator's layout cannot hold."""
        return self.layout.runs_out_at

    @property
    def config(self) -> str:
        return f"snowflake:{self.layout.describe()}"

    @property
    def local_config(self) -> str:
        # The tolerance does not shape IDs, so changing it must not trip the node claim.
        return f"tolerance_ms={self.tolerance_ms}"

    def _call_for(self, node: Node) -> _NodeCall:
        layout = self.layout
        claim = self.claim_for(node)
        slots = self.slots_per_ms(node)
        fixed = (layout.epoch_ms, layout.max_ms, slots, self.tolerance_ms)
        return _NodeCall(
            claim=claim,
            slots=slots,
            keys=(self.state_key, self.claim_key, self.identity_key),
            head=tuple(str(arg).encode() for arg in fixed),
            headroom=str(self.headroom).encode(),
        )

    def slots_per_ms(self, node: Node) -> int:
        """How many sequence values of a millisecond ``node`` owns (those ``≡ index mod count``)."""
        return node.counter_through(0, self.layout.max_sequence)

    def _next_id_plan(self, shard: int = 0) -> Plan[int]:
        """`next_id` as a plan (what the asyncio front end awaits)."""
        check_shard(shard, self.layout)
        return first(self._shared_take_plan(1) if shard == 0 else self._take_plan(1, shard))

    @planned_as(_next_id_plan)
    def next_id(self, shard: int = 0) -> int:
        """One new ID for ``shard`` (ValueError if the shard does not fit its bits)."""
        check_shard(shard, self.layout)
        return self._take(1)[0] if shard == 0 else run_plan(self._take_plan(1, shard))[0]

    def _next_ids_plan(self, n: int, shard: int = 0) -> Plan[list[int]]:
        """`next_ids` as a plan (what the asyncio front end awaits)."""
        check_shard(shard, self.layout)
        if check_count(n, most=self.max_batch) == 0:
            return now(list)
        return self._shared_take_plan(n) if shard == 0 else self._take_plan(n, shard)

    @planned_as(_next_ids_plan)
    def next_ids(self, n: int, shard: int = 0) -> list[int]:
        """``n`` new IDs for ``shard`` in one Redis round trip, increasing (``[]`` for 0)."""
        check_shard(shard, self.layout)
        if check_count(n, most=self.max_batch) == 0:
            return []
        return self._take(n) if shard == 0 else run_plan(self._take_plan(n, shard))

    def _take_plan(self, n: int, shard: int = 0) -> Plan[list[int]]:
        """``n`` (>= 1) IDs for ``shard`` (already checked) from the next node that answers."""
        return self._call_plan(lambda node: self._take_on(node, n, shard))

    def _take_on(self, node: Node, n: int, shard: int) -> Plan[list[int]]:
        """``n`` IDs of ``node``: one round trip, two when the floor must be read first."""
        if self._floor is None:
            return self._attempt(node, n, shard)
        return self._with_floor_read_once(node, lambda: self._attempt(node, n, shard))

    def _attempt(self, node: Node, n: int, shard: int) -> Plan[list[int]]:
        call = self._calls[node.index]
        slots = call.slots
        high = self.high
        index = node.index
        floor: tuple[int, int] | None = None
        # the floor argument while no floor is read: "ask" (a floor can be read) or "none"
        unread = b"none" if self._floor is None else b"ask"
        if unread == b"ask" and not high.consulted(index):
            floor = yield from self._floor_slot(slots)  # once per process and node
        for _ in range(2):
            mark = high.mark(index) or NO_GUARD
            seen = high.seen_with(index, call.claim)
            if floor is None:
                args = [n, seen, *call.head, mark[0], mark[1], unread, call.headroom]
            else:
                # The guard (what the fast path checks) is the later of the mark and the floor;
                # the mark follows alone, so a state below the floor but not below the mark is
                # raised to the floor, not healed as a loss.
                guard = max(mark, floor)
                args = [n, seen, *call.head, *guard, b"given", call.headroom, *mark]
            reply = yield Run(node, "snowflake", call.keys, args)
            if type(reply) is int:  # the fast path: sound state, the node this process saw
                first_ms, first = divmod(reply, slots)
                if floor is not None:
                    high.set_consulted(index)
                high.saw(index, divmod(reply + n - 1, slots))
                return self.layout._compose_run(first_ms, first, n, slots, shard, node.count, index)
            try:
                first_ms, first, last_ms, last, healed, identity = check_reply(
                    reply, namespace=self.namespace, node=node, claim=call.claim
                )
            except NeedsFloor:
                floor = yield from self._floor_slot(slots)
                continue
            first_ms, first = int(first_ms), int(first)
            last_ms, last = int(last_ms), int(last)
            if (first_ms * slots + first) + n - 1 != last_ms * slots + last:
                raise ScriptError(
                    f"snowflake script answered slots {first_ms}:{first} to {last_ms}:{last} "
                    f"for {n} IDs",
                    namespace=self.namespace,
                    node=node.name,
                )
            if floor is not None:
                high.set_consulted(index)
            if healed:
                high.healed(node.name, reply_text(healed), f"{first_ms} ms after the epoch")
            high.answered(index, identity, (last_ms, last))
            return self.layout._compose_run(first_ms, first, n, slots, shard, node.count, index)
        raise ScriptError(  # pragma: no cover - the second call carries the floor
            "the snowflake script asked for the floor twice",
            namespace=self.namespace,
            node=node.name,
        )

    def _floor_slot(self, slots: int) -> Plan[tuple[int, int]]:
        """The (millisecond since the epoch, slot) the floor's highest ID lies in, the whole
        millisecond counted as used; ``(-1, 0)`` (no guard) when the table holds no ID."""
        used = yield from self._highest_used(what="the highest ID already used")
        if used == 0:
            return NO_GUARD
        try:
            parts = self.layout.parse(used)
        except ValueError as exc:
            raise ConfigError(
                f"floor() returned {used}, which is not an ID of this layout: {exc}",
                namespace=self.namespace,
            ) from exc
        return parts.ms - self.layout.epoch_ms, slots - 1

    def parse(self, value: int) -> SnowflakeParts:
        """Decode an ID of this generator's layout: UTC time, milliseconds, shard, sequence."""
        return self.layout.parse(value)

    def id_range(self, start: datetime, end: datetime) -> tuple[int, int]:
        """``(low, high)``: inclusive bounds of every ID this generator can issue whose time lies
        in ``[start, end)`` (aware datetimes), so that:

        ```python
        select(Order).where(Order.id.between(*order_ids.id_range(start, end)))
        ```

        finds the rows made in that range. An ID's time is its millisecond, as [`parse`][sa_redis_ids.SnowflakeGenerator.parse]
        reads it: ``start <= parse(id).timestamp < end`` exactly when ``low <= id <= high``.
        The bounds come from the layout alone (every shard, node and sequence), with no Redis call.
        A range partly outside the layout's span is cut to it; one wholly outside it, a naive
        datetime or ``end < start`` raise [`ConfigError`][sa_redis_ids.ConfigError]; ``start == end`` (or a range within
        one millisecond) gives ``(1, 0)``, which matches nothing.
        """
        return self.layout._id_range(start, end, self.namespace)
