"""A strategy of its own for sa_redis_ids: counters issued in steps of a stride.

``ids.generator("stride_counter", "tickets", start=100, stride=10)`` issues 100, 110, 120 … With
N Redis nodes, node k takes every N-th step (steps k, k + N, k + 2N …), so the nodes never meet
and no coordination is needed. Importing this module registers the strategy.

What a strategy is made of (see README.md beside this package):

* an `IdGenerator` subclass: ``strategy`` (the key part),
  ``python_type``, ``max_value``, ``config`` (the options that shape values, recorded on each
  node as its claim) and ``_take_plan(n)``, which yields a ``Run`` of its own Lua script;
* the Lua script in this package, named ``"stride_ids:lua/stride_counter"``;
* abilities, by defining their members: ``ensure_at_least`` + ``start`` make it
  ``Reseedable`` (``sa-redis-ids reseed`` raises it above a table), ``parse`` makes it
  ``Parseable`` (``sa-redis-ids parse``);
* ``register_strategy`` with its build function, class and command-line options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.registry import Context, OptionSpec, register_strategy
from sa_redis_ids.redis.plans import Plan, Run
from sa_redis_ids.redis.scripts import check_reply, reply_text
from sa_redis_ids.validation import check_int_option, check_value_int

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import Node, NodeSet

__all__ = ["SCRIPT", "StrideCounterGenerator", "StrideParts"]

NAME = "stride_counter"
"""The strategy's registered name (``ids.generator(NAME, ...)``, ``--strategy stride_counter``)."""
SCRIPT = "stride_ids:lua/stride_counter"
"""Its Lua script: ``lua/stride_counter.lua`` inside this package, with ``common.lua`` prepended."""
SET_IF_GREATER = "set_if_greater"
"""The library's own script that raises a counter and never lowers it (used by reseeding)."""

BIGINT_MAX = 2**63 - 1
MAX_STRIDE = 2**32


@dataclass(frozen=True)
class StrideParts:
    """A value decoded: the node that issued it and its place in that node's counter."""

    value: int
    step: int
    """``(value - start) / stride``: the value's place among all the namespace's values."""
    node_index: int
    counter: int


class StrideCounterGenerator(IdGenerator[int]):
    """``start``, ``start + stride``, ``start + 2·stride`` … unique across nodes and processes."""

    strategy = "stride"
    """The key part: keys are ``<prefix>:{<namespace>}:stride``, ``…:stride:node`` (the claim)."""
    python_type = int

    def __init__(
        self, nodes: NodeSet, prefix: str, namespace: str, *, start: int = 1, stride: int = 10
    ):
        super().__init__(nodes, prefix, namespace)
        self.start = check_int_option("start", start, low=0, high=BIGINT_MAX)
        self.stride = check_int_option("stride", stride, low=1, high=MAX_STRIDE)
        self.counter_key = self.keys.key(self.strategy)
        self._last_step = (BIGINT_MAX - self.start) // self.stride

    @property
    def max_value(self) -> int:
        return self.start + self._last_step * self.stride

    @property
    def config(self) -> str:
        # Every option that shapes values, as "kind:name=value:…" with the factory's keyword
        # names: each node records it, and the command line rebuilds the generator from it.
        return f"{NAME}:start={self.start}:stride={self.stride}"

    # -- issuing -------------------------------------------------------------------------------

    def _take_plan(self, n: int) -> Plan[list[int]]:
        """``n`` values from the next node that answers (the library picks it, fails over, and
        runs this plan on the sync or the asyncio driver alike)."""
        values = yield from self._call_plan(lambda node: self._take_on(node, n))
        return values

    def _take_on(self, node: Node, n: int) -> Plan[list[int]]:
        claim = self.claim_for(node)
        limit = node.counter_through(0, self._last_step)
        reply = yield Run(node, SCRIPT, [self.counter_key, self.claim_key], [n, claim, str(limit)])
        (after,) = check_reply(reply, namespace=self.namespace, node=node, claim=claim)
        steps = node.values(0, int(reply_text(after)), n)  # this node's steps of those counters
        return [self.start + step * self.stride for step in steps]

    # -- abilities -----------------------------------------------------------------------------

    def ensure_at_least(self, value: int) -> list[tuple[str, int | None, int]]:
        """Reseedable: no value ``<= value`` is issued again; every node's counter is raised."""
        check_value_int("value", value, low=0, high=BIGINT_MAX)
        self.check_claims()  # refuse other options before any write
        last = (value - self.start) // self.stride  # the last step at or below value (-1: none)

        def action(node: Node) -> tuple[str, int | None, int]:
            claim = self.claim_for(node)
            needed = node.counter_through(0, last) if last >= 0 else 0
            reply = node.run(
                SET_IF_GREATER, keys=[self.counter_key, self.claim_key], args=[str(needed), claim]
            )
            before, after = check_reply(reply, namespace=self.namespace, node=node, claim=claim)
            text = reply_text(before)
            return node.name, int(text) if text else None, int(reply_text(after))

        return self._nodes.each(self.namespace, action)

    def parse(self, value: int) -> StrideParts:
        """Parseable: the step, node and counter of ``value`` (for the current node count)."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{value!r} is not a value of this generator")
        step, off = divmod(value - self.start, self.stride)
        if value < self.start or off or value > self.max_value:
            raise ValueError(
                f"{value} is not start={self.start} plus a multiple of stride={self.stride}"
            )
        count = len(self._nodes)
        return StrideParts(value, step, node_index=step % count, counter=step // count + 1)


def build(context: Context, namespace: str, **options: Any) -> StrideCounterGenerator:
    """Values from ``start`` in steps of ``stride``; with N nodes each node takes every N-th."""
    return StrideCounterGenerator(context.nodes, context.prefix, namespace, **options)


register_strategy(
    NAME,
    build,
    generator=StrideCounterGenerator,
    options=(
        OptionSpec("--start", "start", "first value", parse=int),
        OptionSpec("--stride", "stride", "step between values (default 10)", parse=int),
    ),
    from_claims=True,  # its config is "stride_counter:start=…:stride=…", the factory's keywords
)
