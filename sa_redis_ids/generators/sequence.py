"""Sequence: 1, 2, 3 … from one ``INCRBY`` per call.

With N nodes, node ``k`` (0-based) keeps its own counter ``c`` and issues
``start + (c − 1)·N + k``: the nodes' residue classes modulo N never meet, so no initialisation
step is needed and none can silently fail. The script compares the
counter with its limit as text, so values up to 2^63 − 1 stay exact although Lua numbers are doubles.

With ``block=`` the generator takes a block of counters with one ``INCRBY`` and hands the values out
from memory (see `sa_redis_ids.buffering`); each block is one node's residue class, so
multi-node uniqueness is unchanged. Values buffered when the process exits are gaps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sa_redis_ids.bounds import BIGINT_MAX, limit_for
from sa_redis_ids.buffering import (
    RANGE_MAX_BLOCK,
    BufferedGenerator,
    Buffering,
    Segment,
)
from sa_redis_ids.errors import ScriptError
from sa_redis_ids.generators.base import check_int_option
from sa_redis_ids.generators.highwater import heal_args
from sa_redis_ids.redis.plans import Commands, Plan, Run, Transact, planned, run_plan
from sa_redis_ids.redis.scripts import NeedsFloor, check_reply, reply_text
from sa_redis_ids.validation import check_bool, check_value_int

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import Node, NodeSet


@dataclass(frozen=True)
class SequenceParts:
    """A sequence value decoded: which node issued it and its place in that node's counter."""

    value: int
    node_index: int
    counter: int


class SequenceGenerator(BufferedGenerator[int]):
    """Increasing integers, unique across every node and process of one namespace.

    ``block`` (an int or [`Buffering`][sa_redis_ids.Buffering]) turns on segment
    buffering. ``floor()`` returns the highest value already used (e.g. ``MAX(id)`` of the table,
    see [`floor_from_column`][sa_redis_ids.floor_from_column]); ``headroom`` is how far above what is
    known a lost counter resumes (see `highwater`).
    """

    strategy = "seq"
    python_type = int

    def __init__(
        self,
        nodes: NodeSet,
        prefix: str,
        namespace: str,
        *,
        start: int = 1,
        js_safe: bool = False,
        block: int | Buffering | None = None,
        floor: Callable[[], int] | None = None,
        headroom: int | None = None,
    ):
        super().__init__(nodes, prefix, namespace, floor=floor, headroom=headroom)
        js_safe = check_bool("js_safe", js_safe)
        self.start = check_int_option("start", start, low=0, high=limit_for(js_safe))
        # One node's counter ``c`` issues ``start + c - 1``, and a Redis counter holds at most
        # BIGINT_MAX: with start=0 the last value is one below BIGINT_MAX.
        limit = min(limit_for(js_safe), self.start + BIGINT_MAX - 1)
        self.js_safe = js_safe
        self._limit = limit
        self.counter_key = self.keys.key(self.strategy)
        self._per_node: dict[int, tuple[str, int, str, list[str], Commands]] = {}
        self._use_buffer(
            block, self._take_block, capacity=limit - self.start + 1, default_max=RANGE_MAX_BLOCK
        )
        self._set_headroom(
            (limit - self.start) // len(nodes) + 1,
            None if self.buffer is None else self.buffer.options.max_block,
        )

    @property
    def max_value(self) -> int:
        return self._limit

    @property
    def config(self) -> str:
        return f"sequence:start={self.start}"

    def _take_plan(self, n: int) -> Plan[list[int]]:
        return self._spread_plan(n, self._values_on)

    def _values_on(self, node: Node, n: int) -> Plan[list[int]]:
        values: range = yield from self._take_on(node, n)
        return list(values)

    def _take_block_plan(self, n: int) -> Plan[Segment[int]]:
        """``n`` values from one node in one ``INCRBY`` (a ``range``: nothing materialised); the
        fetch of a buffer, sync or asyncio."""
        values: range = yield from self._call_plan(lambda node: self._take_on(node, n))
        return Segment(values)

    def _take_block(self, n: int) -> Segment[int]:
        return run_plan(self._take_block_plan(n))

    def _take_on(self, node: Node, n: int) -> Plan[range]:
        """``n`` values of ``node``: one round trip, two when the floor must be read first."""
        return self._with_floor_read_once(node, lambda: self._attempt(node, n))

    def _fixed(self, node: Node) -> tuple[str, int, str, list[str], Commands]:
        """What every call on ``node`` sends unchanged: the claim, the counter limit (as an int
        and as text), the keys and the transaction of one value; computed once per node."""
        found = self._per_node.get(node.index)
        if found is None:
            limit = node.counter_through(self.start, self._limit)
            found = (
                self.claim_for(node),
                limit,
                str(limit),
                [self.counter_key, self.claim_key, self.identity_key],
                self._transaction(1),
            )
            self._per_node[node.index] = found
        return found

    def _transaction(self, n: int) -> Commands:
        """The transaction taking ``n`` values: the identity marker and the claim read with the
        ``INCRBY``."""
        return ((b"MGET", self.identity_key, self.claim_key), (b"INCRBY", self.counter_key, n))

    def _attempt(self, node: Node, n: int) -> Plan[range]:
        """``n`` values of ``node``. A sound call is one transaction (``MULTI``, ``MGET`` of the
        identity marker and the claim, ``INCRBY``, ``EXEC``) where the node allows it (see
        ``Node.transactions``): the server's work of an ``INCR`` or two. Its values stand when
        the marker vouches for the node and the claim, the counter was at or above the guard and
        within the limit: the checks of the script's fast path, made here on what the
        transaction read at the moment it took. Otherwise the script judges what the transaction
        found (its ``pre`` argument): it keeps the values, or drops them (a gap, never a value
        issued twice) and heals as usual. A claim missing at the transaction means the
        namespace's keys were lost (a flush) or cleared: the counter it found may be one another
        process's transaction recreated a moment before, so it is judged as missing."""
        claim, limit, limit_text, keys, one = self._fixed(node)
        high = self.high
        index = node.index
        floor = None
        has_floor = self._floor is not None  # asked once per call: it may ask the ORM
        # a floor this call cannot read yet (a direct draw before the process's first flush):
        # a claim it records is recorded unjudged (see ``sequence.lua``)
        later = b"-" if not has_floor and self.implied_floor is not None else b""
        if has_floor and not high.consulted(index):
            floor = yield from self._floor_counter(node)  # once per process and node
        for _ in range(2):
            guard = max(high.mark(index) or 0, floor or 0)
            ask = has_floor and floor is None
            seen = high.seen_with(index, claim)
            pre = taken = None
            # (A transaction past the limit would leave the last values unissued: near the top, as
            # far as this process knows, the script takes or refuses them atomically.)
            if not ask and guard + n <= limit and node.transactions and high.identities[index]:
                done = yield Transact(
                    node, self.counter_key, one if n == 1 else self._transaction(n)
                )
                if done is not None and type(done[1]) is int:
                    (marker, recorded), taken = done
                    if recorded is None:
                        pre = "0"  # judged as missing
                    elif (
                        taken <= limit
                        and taken - n >= guard
                        and marker is not None
                        and reply_text(marker) == seen
                    ):
                        after = taken
                        high.saw(index, after)
                        break
                    else:
                        pre = str(taken - n)
            guard_text, heal_text, _ = heal_args(
                guard, self.headroom + high.drift(index, self.drift_most), limit, ask=ask
            )
            args = [n, seen, limit_text, guard_text, b"ask" if ask else later + heal_text.encode()]
            if pre is not None:
                args += [pre, str(taken)]
            reply = yield Run(node, "sequence", keys, args)
            if type(reply) is int:  # the fast path: sound counter, the node this process saw
                after = reply
                high.saw(index, after)
                break
            if taken is not None and type(reply) is list and reply[:1] == [0]:
                after = taken  # the transaction's values stand
                high.answered(index, reply[1], after)
                break
            try:
                after_text, healed, identity = check_reply(
                    reply, namespace=self.namespace, node=node, claim=claim, limit=limit
                )
            except NeedsFloor:
                floor = yield from self._floor_counter(node)
                continue
            after = int(after_text)
            if healed and after == n:  # lost, and this process knows nothing above it
                high.healed(
                    node.name,
                    "",
                    "0",
                    why="the counter was lost beside its claim, and this process has neither "
                    "a mark nor a floor to heal it from: values may repeat; give the generator "
                    "a floor",
                )
            elif healed:
                high.healed(node.name, reply_text(healed), str(after - n))
            high.answered(index, identity, after)
            break
        else:  # pragma: no cover - the second call carries the floor
            raise ScriptError(
                "the sequence script asked for the floor twice",
                namespace=self.namespace,
                node=node.name,
            )
        if floor is not None:
            high.set_consulted(index)
        high.pace(index, after)
        return node.values(self.start, after, n)

    def _floor_counter(self, node: Node) -> Plan[int]:
        """The counter of ``node`` above which every value is above the floor's highest value."""
        used = yield from self._highest_used(what="the highest value already used")
        return node.counter_through(self.start, used)

    @planned
    def ensure_at_least(self, value: int) -> Plan[list[tuple[str, int | None, int]]]:
        """Make sure no value ``<= value`` is ever issued again (counters only move forward).

        Used to reseed Redis from a table's current maximum. Every node is raised (all must be
        reachable). Returns ``(node, counter before or None, counter after)`` per node.
        ``value`` is an int from 0 to `max_value` (``TypeError``/``ValueError`` otherwise).

        A node that records another claim (other ``start``, another node list) raises
        [`ConfigError`][sa_redis_ids.ConfigError] before any node changes; a node without a claim records
        ours together with its counter.
        """
        check_value_int("value", value, low=0, high=self._limit)
        return self._raise_to(value)

    def _raise_to(self, value: int) -> Plan[list[tuple[str, int | None, int]]]:
        yield from self._check_claims()

        def action(node: Node) -> Plan[tuple[str, int | None, int]]:
            claim = self.claim_for(node)
            needed = node.counter_through(self.start, value)
            limit = node.counter_through(self.start, self._limit)
            # a counter lost beside its claim is raised above the value by the headroom, as a heal
            _, lost, _ = heal_args(needed, self.headroom, limit, ask=False)
            reply = yield Run(
                node,
                "set_if_greater",
                [self.counter_key, self.claim_key, self.identity_key],
                [str(needed), claim, lost],
            )
            before, after = check_reply(reply, namespace=self.namespace, node=node, claim=claim)
            text = reply_text(before)
            if not text and int(after) > needed:
                self.high.healed(node.name, "", str(after), why="the counter was lost")
            return node.name, int(text) if text else None, int(after)

        return (yield from self._nodes.each_plan(self.namespace, action))

    def parse(self, value: int) -> SequenceParts:
        """Which node issued ``value`` and at which counter (for the current node count)."""
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= self._limit:
            raise ValueError(f"{value!r} is not a value of this sequence")
        offset = value - self.start
        if offset < 0:
            raise ValueError(f"{value} is below the sequence start {self.start}")
        count = len(self._nodes)
        return SequenceParts(value=value, node_index=offset % count, counter=offset // count + 1)
