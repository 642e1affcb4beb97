"""ShortId: random, unique, short numbers from a fixed pool, kept in a Redis bitmap (seed 001).

The pool is ``offset … offset + pool_size − 1`` (by default the 8-digit numbers 10000000–19999999);
bit ``i`` of the pool is set once ``offset + i`` is issued. One Lua call per batch first tries a
random bit per value (48 random bits each, from :mod:`secrets`), all tries of up to 1,000 values
in one ``BITFIELD … SET u1`` whose answers say which bits were free. For a try that hit a taken
bit it searches with ``BITPOS`` from that bit's byte, wraps around to the start when nothing after
it is free, ignores answers past the pool (``BITPOS`` pads the string with zeros) and ``SETBIT``s
what it found. A batch is all or nothing: when the pool runs out, every bit the call set is
cleared again. Values are random, so they say nothing about how many users
there are or which one came next.

With N nodes, node ``k`` owns the pool positions ``i ≡ k (mod N)`` and keeps them in its own
bitmap at bit ``i // N``: nodes never collide, and ``release``/``reserve``/``is_taken`` go to the
node that owns the value. Memory: ``pool_size / 8`` bytes in all (1.25 MB for the default pool).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from sa_redis_ids.backend.scripts import check_reply
from sa_redis_ids.bounds import BIGINT_MAX
from sa_redis_ids.errors import ConfigError, RedisUnavailable, SequenceExhausted
from sa_redis_ids.strategies.base import IdGenerator, check_int_option

if TYPE_CHECKING:
    from sa_redis_ids.backend.nodes import Node, NodeSet

MAX_POOL_SIZE = 2**32
"""A Redis string holds at most 512 MB, i.e. 2^32 bits."""
MAX_BATCH = 50_000
"""The most values one ``next_ids`` (or one ``reserve`` round trip) handles."""


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
    max_batch: ClassVar[int] = MAX_BATCH
    """The most values one ``next_ids`` call may take."""

    def __init__(
        self,
        nodes: NodeSet,
        prefix: str,
        namespace: str,
        *,
        pool_size: int = 10_000_000,
        offset: int = 10_000_000,
    ):
        super().__init__(nodes, prefix, namespace)
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

    @property
    def max_value(self) -> int:
        return self.offset + self.pool_size - 1

    @property
    def config(self) -> str:
        return f"short_id:pool_size={self.pool_size},offset={self.offset}"

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

    def _taker(self, n: int) -> Callable[[Node], list[int]]:
        """An action taking ``n`` random free values of one node's share (all or none)."""

        def action(node: Node) -> list[int]:
            claim = self.claim_for(node)
            bits = self.share_size(node)
            reply = node.run(
                "short_id",
                keys=[self.bitmap_key, self.claim_key],
                args=[claim, bits, n, secrets.token_bytes(6 * n)],
            )
            (positions,) = check_reply(reply, namespace=self.namespace, node=node, claim=claim)
            first, step = self.offset + node.index, node.count
            return [first + int(bit) * step for bit in positions.split(b",")]

        return action

    def _take(self, n: int) -> list[int]:
        try:
            values: list[int] = self._call(self._taker(n))
        except SequenceExhausted:
            if len(self._nodes) == 1:
                raise
            return self._take_spread(n)
        return values

    def _take_spread(self, n: int) -> list[int]:
        """Near a full pool the node in turn may have too little left: take what each node has.

        Several round trips; all or nothing: if the nodes together cannot give ``n`` values, the
        ones taken are released again and :class:`SequenceExhausted` is raised.
        """
        taken: list[int] = []
        for node in self._nodes.nodes:
            want = n - len(taken)
            if want == 0:
                break
            try:
                used = self._nodes.on(
                    node, self.namespace, lambda node: int(node.client.bitcount(self.bitmap_key))
                )
                count = min(want, self.share_size(node) - used)
                if count > 0:
                    taken += self._nodes.on(node, self.namespace, self._taker(count))
            except (SequenceExhausted, RedisUnavailable):
                continue  # taken meanwhile by another process, or down: try the next node
        if len(taken) == n:
            return taken
        if taken:
            self._mark(taken, 0)
        raise SequenceExhausted(
            f"the pool has fewer than {n} free values on the nodes that answered",
            namespace=self.namespace,
        )

    def _mark(self, values: Iterable[int], bit: int) -> int:
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
            for start in range(0, len(positions), MAX_BATCH):
                chunk = positions[start : start + MAX_BATCH]

                def action(node: Node, chunk: list[int] = chunk) -> int:
                    claim = self.claim_for(node)
                    reply = node.run(
                        "short_id_mark",
                        keys=[self.bitmap_key, self.claim_key],
                        args=[claim, bit, *chunk],
                    )
                    (count,) = check_reply(reply, namespace=self.namespace, node=node, claim=claim)
                    return int(count)

                changed += self._nodes.on(node, self.namespace, action)
        return changed

    def release(self, value: int) -> bool:
        """Give ``value`` back to the pool so it can be issued again; True if it was taken."""
        return self._mark([value], 0) == 1

    def reserve(self, values: Iterable[int]) -> int:
        """Take ``values`` out of the pool for good (vanity numbers); how many were still free.

        Every value is checked before anything is sent, so an out-of-pool value reserves nothing,
        and so is every node's claim: a node that records another ``pool_size`` or ``offset`` (or
        another node list) raises :class:`~sa_redis_ids.ConfigError` and nothing is reserved.
        """
        chosen = list(values)
        for value in chosen:
            self.locate(value)
        self.check_claims()
        return self._mark(chosen, 1)

    def is_taken(self, value: int) -> bool:
        """Whether ``value`` is issued or reserved (asks the node that owns it)."""
        node, position = self.locate(value)
        taken: int = self._nodes.on(
            node, self.namespace, lambda n: n.client.getbit(self.bitmap_key, position)
        )
        return taken == 1

    def stats(self) -> ShortIdStats:
        """Issued, free and fill ratio of the whole pool (``BITCOUNT`` on every node)."""
        counts = self._nodes.each(
            self.namespace, lambda node: int(node.client.bitcount(self.bitmap_key))
        )
        issued = sum(counts)
        return ShortIdStats(
            issued=issued, free=self.pool_size - issued, fill_ratio=issued / self.pool_size
        )
