"""ShortId: random, unique, short numbers from a fixed pool, kept in a Redis bitmap.

The pool is ``offset … offset + pool_size − 1`` (by default the 8-digit numbers 10000000–19999999);
bit ``i`` of the pool is set once ``offset + i`` is issued. One Lua call per batch first tries a
random bit per value (48 random bits each, from `secrets`), all tries of up to 1,000 values
in one ``BITFIELD … SET u1`` whose answers say which bits were free. For a try that hit a taken
bit it searches with ``BITPOS`` from that bit's byte, wraps around to the start when nothing after
it is free, ignores answers past the pool (``BITPOS`` pads the string with zeros) and ``SETBIT``s
what it found. A batch is all or nothing: when the pool runs out, every bit the call set is
cleared again. Values are random, so they say nothing about how many users
there are or which one came next. A batch of `SPAN_MIN` or more takes runs instead: every
free position of windows of 64 positions at random bytes (one ``GETRANGE`` and one ``SETRANGE``
each), then searches value by value for the rest; its values come in runs of consecutive numbers.

With N nodes, node ``k`` owns the pool positions ``i ≡ k (mod N)`` and keeps them in its own
bitmap at bit ``i // N``: nodes never collide, and ``release``/``reserve``/``is_taken`` go to the
node that owns the value. Memory: ``pool_size / 8`` bytes in all (1.25 MB for the default pool).

A Redis that forgets: each node also keeps a running total of the positions it ever issued, and
each process remembers the positions it took (a sparse bitmap, at most ``pool_size / 8`` bytes) and
the highest total it received. A total that is missing or below what the process received means
the node lost or rewound its bitmap: before issuing anything, the process marks taken again every
position it knows of (its own, and with a floor every value the table holds: the column the
generator is bound to, or ``floor=``), so no issued value comes back while that process or the
table remembers it.

The floor is merged into a node's bitmap once per node state, not once per process: the merge is
recorded on the node (``…:sid:floor``, the node identity and bitmap generation it was made in),
and a process's first call checks that marker (one round trip) instead of reading the table. When
the state changed (a new generation after a loss, a failover, an evicted bitmap; not a restart
that kept its data), the first
process to see it claims the merge (``…:sid:floor:claim``, expiring after
``FLOOR_CLAIM_MS``) and merges; the others wait for the marker, polling every
``FLOOR_POLL_S``, and issue nothing meanwhile, since a value they issued before the merge
could be one the table holds. A waiter that is still waiting after ``FLOOR_WAIT_S`` (the
merging process died or is slow) merges itself: merges only mark positions taken, so two are as
safe as one.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from sa_redis_ids.bounds import BIGINT_MAX
from sa_redis_ids.errors import ConfigError, RedisUnavailable, SequenceExhausted
from sa_redis_ids.generators.base import IdGenerator, check_int_option
from sa_redis_ids.generators.highwater import checked_floor
from sa_redis_ids.redis.plans import CallFloor, Command, Effect, Plan, Run, Sleep, planned
from sa_redis_ids.redis.scripts import NeedsFloor, check_reply, reply_text
from sa_redis_ids.validation import check_values

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import Node, NodeSet

MAX_POOL_SIZE = 2**32
"""A Redis string holds at most 512 MB, i.e. 2^32 bits."""
SHORT_ID_MAX_BATCH = 50_000
"""The most values one ``next_ids`` (or one ``reserve`` round trip) handles."""
CHUNK_BITS = 32_768
"""Positions per chunk of a process's record of what it took (4 KB each, made when first used)."""
STALE = "?"
"""A generation no node has: the next call finds another one and heals."""
HEAL_ATTEMPTS = 12
"""Take attempts of one call: after a loss, processes that heal one after the other each start a
new generation once, and every other process marks its own positions again at most that often."""
HEAL_BYTES = 1 << 20
"""Bytes of known positions sent per heal round trip."""
FLOOR_CHUNK = 10_000
"""Values taken per step from a floor that streams asynchronously."""
FLOOR_CLAIM_MS = 30_000
"""How long one process's claim to merge the floor into a node's bitmap lasts at most."""
FLOOR_POLL_S = 0.05
"""How often a process waiting for another's floor merge checks the node's marker."""
FLOOR_WAIT_S = 10.0
"""How long a process waits for another's floor merge before it merges itself."""
SPAN_MIN = 256
"""From this many values on, one call takes runs of consecutive positions (see ``SPAN_BYTES``)."""
SPAN_BYTES = 8
"""Bytes of a run's window: a batch of ``SPAN_MIN`` or more takes every free position of windows of
64 positions that start at random bytes, instead of one random position per value. In a sparse
pool that is a tenth of the server's work per value; the values of one such batch come in runs of
consecutive pool positions (up to 64 in a row, at random places)."""


class TakenPositions:
    """The positions of one node's share that this process took: a sparse bitmap in 4 KB chunks.

    Not locked itself: a generator uses it under its ``high.records`` lock.
    """

    def __init__(self) -> None:
        self.chunks: dict[int, bytearray] = {}

    def add_runs(self, runs: Iterable[tuple[int, int]]) -> None:
        """Add the positions of ``runs`` (``(first, count)`` each): whole bytes at once."""
        for first, count in runs:
            end = first + count
            position = first
            while position < end:
                index, bit = divmod(position, CHUNK_BITS)
                chunk = self.chunks.get(index)
                if chunk is None:
                    chunk = self.chunks[index] = bytearray(CHUNK_BITS // 8)
                stop = min(end, (index + 1) * CHUNK_BITS)
                if bit & 7 == 0 and stop - position >= 8:  # whole bytes
                    whole = (stop - position) >> 3
                    chunk[bit >> 3 : (bit >> 3) + whole] = b"\xff" * whole
                    position += whole << 3
                    continue
                chunk[bit >> 3] |= 0x80 >> (bit & 7)
                position += 1

    def add(self, positions: Iterable[int]) -> None:
        chunks = self.chunks
        for position in positions:
            index, bit = divmod(position, CHUNK_BITS)
            chunk = chunks.get(index)
            if chunk is None:
                chunk = chunks[index] = bytearray(CHUNK_BITS // 8)
            chunk[bit >> 3] |= 0x80 >> (bit & 7)  # Redis numbers bits from the top of a byte

    def discard(self, position: int) -> None:
        index, bit = divmod(position, CHUNK_BITS)
        chunk = self.chunks.get(index)
        if chunk is not None:
            chunk[bit >> 3] &= ~(0x80 >> (bit & 7)) & 0xFF

    def absorb(self, other: TakenPositions) -> None:
        """Add every position of ``other`` (a bitwise OR of the two bitmaps)."""
        for index, data in other.chunks.items():
            mine = self.chunks.get(index)
            if mine is None:
                self.chunks[index] = bytearray(data)
            else:
                merged = int.from_bytes(mine, "big") | int.from_bytes(data, "big")
                self.chunks[index] = bytearray(merged.to_bytes(len(mine), "big"))

    def pieces(self) -> list[tuple[int, bytes]]:
        """``(byte offset, bytes)`` of every chunk, in order."""
        return [
            (index * (CHUNK_BITS // 8), bytes(chunk))
            for index, chunk in sorted(self.chunks.items())
        ]


class _NodeCall:
    """What the short-ID scripts are sent on one node at every call, fixed at construction."""

    __slots__ = ("claim", "floor_keys", "head", "heal_keys", "keys", "share")

    def __init__(
        self,
        *,
        claim: str,
        keys: tuple[str, ...],
        heal_keys: tuple[str, ...],
        floor_keys: tuple[str, ...],
        head: tuple[bytes, bytes],
        share: int,
    ):
        self.claim = claim
        self.keys = keys
        """The bitmap, claim, total and generation keys (``short_id.lua``)."""
        self.heal_keys = heal_keys
        """The keys of ``short_id_heal.lua``."""
        self.floor_keys = floor_keys
        """The keys of ``short_id_floor.lua``."""
        self.head = head
        """The claim and the share size, as bytes."""
        self.share = share
        """The share size: how many positions the node's bitmap holds."""


class NextValues(Effect):
    """Up to ``most`` values from an asynchronous iterator (a floor streaming on the asyncio
    driver); fewer means it is done."""

    __slots__ = ("iterator", "most")

    def __init__(self, iterator: AsyncIterator[Any], most: int):
        self.iterator = iterator
        self.most = most

    def run(self) -> Any:
        raise ConfigError(
            "floor= returned an asynchronous iterable: it needs the asyncio front end "
            "(sa_redis_ids.asyncio.AsyncRedisIds)"
        )

    async def run_async(self) -> list[Any]:
        values: list[Any] = []
        iterator = self.iterator
        while len(values) < self.most:
            try:
                values.append(await iterator.__anext__())
            except StopAsyncIteration:
                break
        return values


@dataclass(frozen=True)
class ShortIdStats:
    """How full a pool is, summed over every node."""

    issued: int
    """Values taken: issued and not released, or reserved."""
    free: int
    fill_ratio: float
    """``issued / pool_size``, from 0.0 to 1.0."""


class ShortIdGenerator(IdGenerator[int]):
    """Random unique numbers from ``offset`` to ``offset + pool_size − 1``; freed ones come back."""

    strategy = "sid"
    python_type = int
    max_batch: ClassVar[int] = SHORT_ID_MAX_BATCH
    """The most values one ``next_ids`` call may take."""

    def __init__(
        self,
        nodes: NodeSet,
        prefix: str,
        namespace: str,
        *,
        pool_size: int = 10_000_000,
        offset: int = 10_000_000,
        floor: Callable[[], Iterable[int]] | None = None,
    ):
        super().__init__(nodes, prefix, namespace, floor=floor)
        self.pool_size = check_int_option("pool_size", pool_size, low=1, high=MAX_POOL_SIZE)
        self.offset = check_int_option("offset", offset, low=0, high=BIGINT_MAX)
        if offset + pool_size - 1 > BIGINT_MAX:
            raise ConfigError(
                f"offset={offset} with pool_size={pool_size} passes {BIGINT_MAX}, the largest "
                f"BIGINT; with this pool_size offset must be at most {BIGINT_MAX - pool_size + 1}",
                namespace=self.namespace,
            )
        if pool_size < len(nodes):
            raise ConfigError(
                f"pool_size={pool_size} is smaller than the {len(nodes)} nodes that split it; "
                f"it must be at least {len(nodes)}",
                namespace=self.namespace,
            )
        self.bitmap_key = self.keys.key(self.strategy)
        self.total_key = self.keys.key(self.strategy, "total")
        self._scratch_key = self.keys.key(self.strategy, "heal")
        self.generation_key = self.keys.key(self.strategy, "gen")
        self.floor_marker_key = self.keys.key(self.strategy, "floor")
        """Where a node records the state its bitmap last had the floor merged into."""
        self._taken = [TakenPositions() for _ in nodes.nodes]
        self._generations: list[str] = ["" for _ in nodes.nodes]
        """Per node: the bitmap generation this process last saw (changes at every heal)."""
        self._missed = [False for _ in nodes.nodes]
        """Per node: a take recorded positions after the last heal's snapshot of them."""
        self._heals = [0 for _ in nodes.nodes]
        """Per node: how many heals of this process took their snapshot of its positions."""
        self._calls = [self._call_for(node) for node in nodes.nodes]
        """Per node: what every script call sends that never changes, computed once."""

    @property
    def max_value(self) -> int:
        return self.offset + self.pool_size - 1

    @property
    def config(self) -> str:
        return f"short_id:pool_size={self.pool_size},offset={self.offset}"

    def _call_for(self, node: Node) -> _NodeCall:
        claim = self.claim_for(node)
        return _NodeCall(
            claim=claim,
            keys=(
                self.bitmap_key,
                self.claim_key,
                self.total_key,
                self.generation_key,
                self.identity_key,
            ),
            heal_keys=(
                self.bitmap_key,
                self.claim_key,
                self.total_key,
                self._scratch_key,
                self.generation_key,
                self.identity_key,
            ),
            floor_keys=(
                self.bitmap_key,
                self.generation_key,
                self.floor_marker_key,
                self.keys.key(self.strategy, "floor", "claim"),
                self.identity_key,
            ),
            head=(claim.encode(), str(self.share_size(node)).encode()),
            share=self.share_size(node),
        )

    def share_size(self, node: Node) -> int:
        """How many pool positions ``node`` owns (those ``≡ index mod count``)."""
        return node.counter_through(0, self.pool_size - 1)

    def locate(self, value: object) -> tuple[Node, int]:
        """The node owning ``value`` and its bit there; ValueError if it is not in the pool."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"a short ID is an int, not {type(value).__name__}")
        if not self.offset <= value <= self.max_value:
            raise ValueError(
                f"{value} is outside the pool {self.offset} to {self.max_value}"
                f" (namespace={self.namespace})"
            )
        position = value - self.offset
        count = len(self._nodes)
        return self._nodes.nodes[position % count], position // count

    def value_at(self, node: Node, bit: int) -> int:
        """The value of ``node``'s bit ``bit``."""
        return self.offset + bit * node.count + node.index

    def _take_plan(self, n: int, *, in_runs: bool = True) -> Plan[list[int]]:
        try:
            return (
                yield from self._call_plan(lambda node: self._take_on(node, n, in_runs=in_runs))
            )
        except SequenceExhausted:
            if len(self._nodes) == 1:
                raise
            return (yield from self._take_spread(n, in_runs=in_runs))

    def _take_batch_plan(self, sizes: list[int]) -> Plan[list[int]]:
        """One call for requests of ``sizes``: runs of consecutive positions only when every
        request asked for `SPAN_MIN` or more, so the values of requests that would each have
        drawn value by value (a single ``next_id()``) stay independent random positions."""
        return self._take_plan(sum(sizes), in_runs=min(sizes) >= SPAN_MIN)

    def _take_on(self, node: Node, n: int, *, in_runs: bool = True) -> Plan[list[int]]:
        """``n`` random free values of ``node``'s share (all or none); ``in_runs``: a batch of
        `SPAN_MIN` or more may take runs of consecutive positions (see ``SPAN_BYTES``)."""
        index = node.index
        call = self._calls[index]
        high = self.high
        has_floor = yield from self._floor_merged_first(node)
        generations = self._generations
        span = SPAN_BYTES if in_runs and n >= SPAN_MIN else 0
        tries = -(-n // (SPAN_BYTES * 8)) * 2 + 4 if span else n
        for _ in range(HEAL_ATTEMPTS):
            generation_sent = generations[index]
            heals = self._heals[index]
            reply = yield Run(
                node,
                "short_id",
                call.keys,
                [
                    high.seen_with(index, call.claim),
                    call.head[1],
                    n,
                    secrets.token_bytes(6 * tries),
                    high.mark(index) or 0,
                    b"1" if has_floor else b"0",  # report a missing total: a floor is merged first
                    generation_sent,
                    # a new generation only counts when this process saw none
                    secrets.token_hex(8) if not generation_sent else "",
                    span,
                ],
            )
            if type(reply) is int:  # the fast path: one value, the generation and node we saw
                total, position = divmod(reply, call.share)
                self._record(index, heals, generation_sent, positions=[position])
                high.saw(index, total)
                return [self.offset + index + position * node.count]
            try:
                text, total, generation, identity = check_reply(
                    reply, namespace=self.namespace, node=node, claim=call.claim
                )
            except NeedsFloor as exc:
                yield from self._recover(node, lost=exc.detail[-1] == "1", has_floor=has_floor)
                high.identities[index] = exc.detail[-2]
                continue
            first, step = self.offset + index, node.count
            values: list[int] = []
            if span:
                runs = [
                    (int(start), int(count))
                    for start, _, count in (
                        run.partition(":") for run in reply_text(text).split(",")
                    )
                ]
                for start, count in runs:
                    values += range(first + start * step, first + (start + count) * step, step)
                self._record(index, heals, reply_text(generation), runs=runs)
            else:
                positions = [int(bit) for bit in reply_text(text).split(",")]
                values = [first + position * step for position in positions]
                self._record(index, heals, reply_text(generation), positions=positions)
            high.answered(index, identity, int(total))
            return values
        raise RedisUnavailable(
            f"the node's bitmap was healed by other processes {HEAL_ATTEMPTS} times while "
            "this call tried to take values; try again",
            namespace=self.namespace,
            node=node.name,
        )

    def _record(
        self,
        index: int,
        heals: int,
        generation: str,
        *,
        positions: list[int] | None = None,
        runs: list[tuple[int, int]] | None = None,
    ) -> None:
        """Record positions this process took on node ``index`` (single ``positions`` or
        ``runs`` of them) and the node's generation seen with them; if a heal ran since the call
        began (``heals``: the count then), it may have missed them: heal again next call."""
        with self.high.records:
            if runs is not None:
                self._taken[index].add_runs(runs)
            else:
                self._taken[index].add(positions or [])
            if self._heals[index] == heals:
                self._generations[index] = generation
            else:
                self._generations[index] = STALE
                self._missed[index] = True

    def _recover(self, node: Node, *, lost: bool, has_floor: bool) -> Plan[None]:
        """Heal ``node`` after a script refused to take (or mark) there.

        ``lost``: this process found the loss; it reads the floor and starts a new generation,
        so every other process marks its own positions again at its next call. Otherwise
        another process healed (a new generation): this one marks its own positions and, with
        a floor, sees that the floor is merged into the new state too (the healer may have had
        none, e.g. a process that never flushed, or a heal that found the bitmap missing).
        """
        if has_floor:
            yield from self._merge_floor(node, rewound=lost, own=not lost)
        else:
            yield from self._heal(node, floor=False, rewound=lost)

    def _floor_merged_first(self, node: Node) -> Plan[bool]:
        """Whether a floor can be read here; if so, at this process's first use of ``node`` the
        table's values taken on the node are merged first (once per process and node)."""
        has_floor = self._floor is not None
        if has_floor and not self.high.consulted(node.index):
            yield from self._with_floor_read_once(node, lambda: self._first_merge(node))
        return has_floor

    def _first_merge(self, node: Node) -> Plan[None]:
        """The floor's values taken on ``node`` unless another call of this process saw to it."""
        if not self.high.consulted(node.index):
            yield from self._merge_floor(node, rewound=False)

    def _merge_floor(self, node: Node, *, rewound: bool, own: bool = False) -> Plan[None]:
        """See that the floor is merged into ``node``'s bitmap in its current state: merged
        already (the node's marker says so), merged by this process (it claims the merge), or
        merged by another (this process waits); see the module docstring.

        ``rewound``: this process found the node lost or rewound; it then also marks its own
        positions taken again and starts a new generation (see ``_heal``), carrying the
        marker over to it when the floor was already merged (and the bitmap it was merged
        into is still there). ``own``: another process started a new generation; this one
        marks its own positions again, with the floor when the marker does not vouch for it.
        """
        index = node.index
        keys = self._calls[index].floor_keys
        token = secrets.token_hex(8)
        waited = 0.0
        while True:
            status, identity, found = yield from self._floor_marker(
                node, keys, ["check", token, FLOOR_CLAIM_MS]
            )
            if status != "busy" or waited >= FLOOR_WAIT_S:
                break
            yield Sleep(FLOOR_POLL_S)
            waited += FLOOR_POLL_S
        if status == "merged":
            if rewound:
                generation, existed = yield from self._heal(node, floor=False, rewound=True)
                if not existed:  # the bitmap vanished since the check, and the merge with it
                    generation, _ = yield from self._heal(node, floor=True, rewound=True)
                    found = ""
                yield from self._floor_marker(
                    node, keys, ["done", token, identity, generation, found]
                )
            elif own:
                yield from self._heal(node, floor=False)
            else:
                with self.high.records:  # a process that took nothing yet starts in this state
                    if not self._generations[index]:
                        self._generations[index] = found
            self.high.set_consulted(index)
            return
        try:
            generation, _ = yield from self._heal(node, floor=True, rewound=rewound)
        except Exception:
            if status == "claimed":  # the others need not wait for a merge that failed
                with contextlib.suppress(Exception):
                    yield from self._floor_marker(node, keys, ["release", token])
            raise
        yield from self._floor_marker(node, keys, ["done", token, identity, generation, ""])

    def _floor_marker(
        self, node: Node, keys: tuple[str, ...], args: list[Any]
    ) -> Plan[tuple[str, str, str]]:
        """Run ``short_id_floor.lua``: its status, the node identity and the generation."""
        reply = yield Run(node, "short_id_floor", keys, args)
        status, identity, generation = check_reply(reply, namespace=self.namespace, node=node)
        return reply_text(status), reply_text(identity), reply_text(generation)

    def _heal(self, node: Node, *, floor: bool, rewound: bool = False) -> Plan[tuple[str, bool]]:
        """Mark taken on ``node`` every position this process took and, with ``floor``, every
        value of the floor in ``node``'s share; raise the node's total to this process's mark.

        ``rewound``: this process found the loss (the total was below its mark), so the heal
        starts a new generation and every other process marks its own positions again at its
        next call; a process that only saw another generation adopts it after marking its own.
        A heal that was not for a loss but finds the bitmap lost (missing beside a total or a
        generation) heals again as for one, with the floor if the generator has one.
        Answers the generation the node has after the heal, and whether the bitmap existed
        before it.
        """
        index = node.index
        call = self._calls[index]
        known = TakenPositions()  # this process's own positions and the floor's, OR-ed together
        if floor:
            yield from self._read_floor(node, known)
        with self.high.records:  # takes recorded after this are healed by the next heal
            known.absorb(self._taken[index])
            self._heals[index] += 1
            self._generations[index] = STALE
            self._missed[index] = False
        guard = str(self.high.mark(index) or 0)
        existed: bool | None = None
        while True:
            rotate = secrets.token_hex(8) if rewound else ""
            added = 0
            generation: Any = ""
            healed_on: Any = ""
            try:
                for batch in self._heal_batches(known):
                    reply = yield Run(
                        node,
                        "short_id_heal",
                        call.heal_keys,
                        [call.head[0], guard, rotate, secrets.token_hex(8), *batch],
                    )
                    changed, generation, was, healed_on = check_reply(
                        reply, namespace=self.namespace, node=node, claim=call.claim
                    )
                    if existed is None:
                        existed = reply_text(was) == "1"
                    added += int(changed)
                    rotate = ""
                break
            except NeedsFloor:  # lost since this process last looked: heal it as a loss
                existed, rewound = False, True
                if not floor and self._floor is not None:
                    floor = True
                    yield from self._read_floor(node, known)
        with self.high.records:
            if not self._missed[index]:
                self._generations[index] = reply_text(generation)
        if rewound and reply_text(healed_on):  # the server a loss was healed on: its next
            self.high.identities[index] = reply_text(healed_on)  # take need not heal it again
        if floor:
            self.high.set_consulted(index)
        if rewound or added:
            self.high.healed(
                node.name,
                "lost or rewound",
                f"a bitmap with {added} positions marked taken again",
            )
        return reply_text(generation), bool(existed)

    @staticmethod
    def _heal_batches(known: TakenPositions) -> list[list[Any]]:
        """The heal script's arguments for ``known``: byte offsets and bytes, about
        `HEAL_BYTES` per round trip (at least one batch, maybe empty)."""
        batches: list[list[Any]] = [[]]
        size = 0
        for offset, data in known.pieces():
            if size >= HEAL_BYTES:
                batches.append([])
                size = 0
            batches[-1] += [offset, data]
            size += len(data)
        return batches

    def _read_floor(self, node: Node, known: TakenPositions) -> Plan[None]:
        """Add to ``known`` the positions of ``node``'s share among the floor's values, streamed
        as the floor yields them (an asynchronous iterable in chunks, on the asyncio driver)."""
        assert self._floor is not None
        values = yield CallFloor(self._floor)
        if isinstance(values, (str, bytes)) or not (isinstance(values, (Iterable, AsyncIterable))):
            raise ConfigError(
                f"floor() returned {values!r}; it must return the values already used "
                "(an iterable of ints)",
                namespace=self.namespace,
            )
        if isinstance(values, Iterable):
            known.add(self._floor_positions(node, values))
            return
        iterator = values.__aiter__()
        while True:
            chunk = yield NextValues(iterator, FLOOR_CHUNK)
            known.add(self._floor_positions(node, chunk))
            if len(chunk) < FLOOR_CHUNK:
                return

    def _floor_positions(self, node: Node, values: Iterable[Any]) -> Iterator[int]:
        """The positions in ``node``'s share of the floor's ``values`` (each checked)."""
        count, index, low, high = node.count, node.index, self.offset, self.max_value
        for value in values:
            checked_floor(
                value, call="floor()", what="values already used", namespace=self.namespace
            )
            if not low <= value <= high:
                raise ConfigError(
                    f"floor() returned {value!r}, outside the pool {low}..{high}; it must return "
                    "the pool's values already used",
                    namespace=self.namespace,
                )
            if (value - low) % count == index:
                yield (value - low) // count

    def _take_spread(self, n: int, *, in_runs: bool = True) -> Plan[list[int]]:
        """Near a full pool the node in turn may have too little left: take what each node has.

        Several round trips; all or nothing: if the nodes together cannot give ``n`` values, the
        ones taken are released again and [`SequenceExhausted`][sa_redis_ids.SequenceExhausted] is raised.
        """
        taken: list[int] = []
        for node in self._nodes.nodes:
            want = n - len(taken)
            if want == 0:
                break
            try:
                used = yield from self._nodes.on_plan(node, self.namespace, self._bitcount)
                count = min(want, self.share_size(node) - used)
                if count > 0:
                    taken += yield from self._nodes.on_plan(
                        node, self.namespace, partial(self._take_on, n=count, in_runs=in_runs)
                    )
            except (SequenceExhausted, RedisUnavailable):
                continue  # taken meanwhile by another process, or down: try the next node
        if len(taken) == n:
            return taken
        if taken:
            yield from self._mark_plan(taken, 0)
            with self.high.records:  # given back: not ours to mark again after a loss
                for value in taken:
                    node, position = self.locate(value)
                    self._taken[node.index].discard(position)
        raise SequenceExhausted(
            f"the pool has fewer than {n} free values on the nodes that answered",
            namespace=self.namespace,
        )

    def _bitcount(self, node: Node) -> Plan[int]:
        """How many positions of ``node``'s share are taken."""
        used = yield Command(node, "bitcount", self.bitmap_key)
        return int(used)

    def _mark_plan(self, values: Iterable[int], bit: int) -> Plan[int]:
        """Set the bits of ``values`` to ``bit`` on their nodes; how many changed.

        Every value is located (and so validated) before anything is sent.
        """
        by_node: dict[int, list[int]] = {}
        for value in values:
            node, position = self.locate(value)
            by_node.setdefault(node.index, []).append(position)
        changed = 0
        for index, positions in by_node.items():
            node = self._nodes.nodes[index]
            for start in range(0, len(positions), SHORT_ID_MAX_BATCH):
                chunk = positions[start : start + SHORT_ID_MAX_BATCH]
                changed += yield from self._nodes.on_plan(
                    node, self.namespace, partial(self._mark_on, positions=chunk, bit=bit)
                )
        return changed

    def _mark_on(self, node: Node, positions: list[int], bit: int) -> Plan[int]:
        """Set ``positions`` of ``node`` to ``bit``; how many changed. A bitmap that was lost
        is healed first (as a take heals it), never re-created by the marks alone: a re-created
        bitmap would hide the loss from every process."""
        index = node.index
        call = self._calls[index]
        high = self.high
        has_floor = yield from self._floor_merged_first(node)
        for _ in range(HEAL_ATTEMPTS):
            reply = yield Run(
                node,
                "short_id_mark",
                (*call.keys[:2], self.identity_key, self.total_key, self.generation_key),
                [
                    call.head[0],
                    bit,
                    high.mark(index) or 0,
                    b"1" if has_floor else b"0",
                    secrets.token_hex(8),
                    *positions,
                ],
            )
            try:
                (count,) = check_reply(reply, namespace=self.namespace, node=node, claim=call.claim)
            except NeedsFloor:
                yield from self._recover(node, lost=True, has_floor=has_floor)
                continue
            return int(count)
        raise RedisUnavailable(
            f"the node's bitmap was lost again {HEAL_ATTEMPTS} times while this call healed "
            "it; try again",
            namespace=self.namespace,
            node=node.name,
        )

    @planned
    def release(self, value: int) -> Plan[bool]:
        """Give ``value`` back to the pool so it can be issued again; True if it was taken.

        Call it once per value: a release that raised may still have freed the value, which
        another process may have drawn since, so sending it again could free a value in use
        (a value never given back is only a gap)."""
        node, position = self.locate(value)
        with self.high.records:
            self._taken[node.index].discard(position)
        return self._changed(self._mark_plan([value], 0))

    @staticmethod
    def _changed(plan: Plan[int]) -> Plan[bool]:
        return (yield from plan) == 1

    @planned
    def reserve(self, values: Iterable[int]) -> Plan[int]:
        """Take ``values`` out of the pool for good (vanity numbers); how many were still free.

        Every value is checked before anything is sent, so an out-of-pool value reserves nothing,
        and so is every node's claim: a node that records another ``pool_size`` or ``offset`` (or
        another node list) raises [`ConfigError`][sa_redis_ids.ConfigError] and nothing is reserved.
        """
        chosen = check_values("values", values)
        for value in chosen:
            self.locate(value)
        return self._reserve(chosen)

    def _reserve(self, chosen: list[int]) -> Plan[int]:
        yield from self._check_claims()
        return (yield from self._mark_plan(chosen, 1))

    @planned
    def is_taken(self, value: int) -> Plan[bool]:
        """Whether ``value`` is issued or reserved (asks the node that owns it)."""
        node, position = self.locate(value)

        def action(node: Node) -> Plan[bool]:
            taken = yield Command(node, "getbit", self.bitmap_key, position)
            return bool(taken == 1)

        return self._nodes.on_plan(node, self.namespace, action)

    @planned
    def stats(self) -> Plan[ShortIdStats]:
        """Issued, free and fill ratio of the whole pool (``BITCOUNT`` on every node)."""
        counts = yield from self._nodes.each_plan(self.namespace, self._bitcount)
        issued = sum(counts)
        return ShortIdStats(
            issued=issued, free=self.pool_size - issued, fill_ratio=issued / self.pool_size
        )
