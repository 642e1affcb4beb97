"""What every ID generator shares: its namespace and nodes, batch validation, bounds, the claim.

A generator is bound to one namespace of one [`RedisIds`][sa_redis_ids.RedisIds]. Subclasses implement
``_take(n)``: fetch ``n`` values in one Redis round trip. Everything a generator needs to know about
its limits (``max_value``, the Python type, a code's length) is fixed at construction, so the ORM
layer can check it against a column before the first insert.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from sa_redis_ids.errors import RedisUnavailable, SequenceExhausted
from sa_redis_ids.generators.highwater import (
    HighWater,
    check_floor,
    check_floor_arguments,
    check_headroom,
    checked_floor,
    default_headroom,
    drift_cap,
)
from sa_redis_ids.keys import KeySpace
from sa_redis_ids.observe import observed
from sa_redis_ids.redis.plans import CallFloor, Command, Plan, now, planned, planned_as, run_plan
from sa_redis_ids.redis.scripts import (
    STATUS_CLAIM_MISMATCH,
    UNJUDGED,
    raise_for_status,
    reply_text,
)
from sa_redis_ids.sharing import Shared
from sa_redis_ids.validation import check_int_option as check_int_option

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import Node, NodeSet

V = TypeVar("V", int, str)
T = TypeVar("T")

MAX_BATCH = 10_000_000
"""The most values one ``next_ids`` call may ask for."""


def check_count(n: object, *, most: int = MAX_BATCH) -> int:
    """Validate a batch size: an int from 0 to ``most`` (bool is refused)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"count must be an int, not {type(n).__name__}")
    if n < 0:
        raise ValueError(f"count must be 0 or more, not {n}")
    if n > most:
        raise ValueError(f"count {n} is more than the {most} one call may take")
    return n


def first(plan: Plan[list[V]]) -> Plan[V]:
    """The first value of what ``plan`` answers."""
    values = yield from plan
    return values[0]


def _taking(take_on: Callable[[Node, int], Plan[T]], n: int) -> Callable[[Node], Plan[T]]:
    """``take_on`` of ``n`` values, as an action on one node."""
    return lambda node: take_on(node, n)


class GeneratorFloor(ABC):
    """A floor that must know the generator it serves (e.g. a column floor reading its range).

    A generator given such a ``floor=`` calls `bind` once and uses the callable it returns.
    """

    @abstractmethod
    def bind(self, generator: IdGenerator[Any]) -> Callable[..., Any]:
        """This floor for ``generator``."""


class ImpliedFloor(ABC):
    """A floor a generator takes without ``floor=``: the columns the ORM binds it to.

    Whether it can be read depends on where the generator is called (inside a flush it reads
    through the flushing connection; elsewhere perhaps not at all), so the generator asks
    ``now`` at each call instead of holding one callable.
    """

    @abstractmethod
    def now(self) -> Callable[..., Any] | None:
        """The floor as a callable usable in the current context, or None when it cannot be
        read here (the generator then goes on as one without a floor, and reads it later)."""


_CARRIED: ContextVar[tuple[IdGenerator[Any], Callable[..., Any] | None] | None] = ContextVar(
    "sa_redis_ids_carried_floor", default=None
)
"""The floor a shared call runs under: the generator it is for, and the floor its requests
carried (None: none of them could read one). Set only while a call for queued requests runs."""


class _RequestFloor:
    """What a request to a generator's shared calls carries (see `sa_redis_ids.sharing`): the
    floor its caller can read where it runs, e.g. through its own flush's connection."""

    __slots__ = ("generator",)

    def __init__(self, generator: IdGenerator[Any]):
        self.generator = generator

    def capture(self) -> object:
        return self.generator._floor

    @contextmanager
    def serving(self, captured: list[object]) -> Iterator[None]:
        """Run a call for requests under the floor of the first that carried one: every request
        of one generator reads the same columns (through different connections; a request's
        own rows not committed yet are values this process already took). ``floor=`` is the
        same wherever it is read (`_floor` answers it before what was carried)."""
        floor = next((each for each in captured if each is not None), None)
        token = _CARRIED.set((self.generator, floor))  # type: ignore[arg-type]
        try:
            yield
        finally:
            _CARRIED.reset(token)


class IdGenerator(ABC, Generic[V]):
    """Base of all strategies. ``next_id()`` is ``next_ids(1)[0]``: one round trip either way."""

    strategy: ClassVar[str]
    """Short name of the strategy; also the key part that separates strategies of one namespace."""
    python_type: ClassVar[type]
    """``int`` for numeric IDs, ``str`` for codes."""
    floor_arguments: ClassVar[tuple[str, ...]] = ()
    """What the generator calls its floor with (a date-keyed one: the day)."""
    max_batch: ClassVar[int] = MAX_BATCH
    """The most values one ``next_ids`` call may take (strategies whose script loops per value
    set less; the ORM splits bigger reservations into calls of this size)."""

    def __init__(
        self,
        nodes: NodeSet,
        prefix: str,
        namespace: str,
        *,
        floor: Callable[..., Any] | None = None,
        headroom: int | None = None,
    ):
        self.keys = KeySpace(prefix, namespace)
        self.namespace = self.keys.namespace
        self.identity_key = self.keys.key("identity")
        """Where a node caches its identity for this namespace's issuing scripts, a second at a
        time, never replicated (see ``node_identity_since`` in ``common.lua``)."""
        self._nodes = nodes
        self.redis_clock = nodes.clock
        """The Redis clock this generator's scripts see (moved only by tests)."""
        self.floor = check_floor(floor)
        """The floor as given (compared when the factory is asked again); None: no floor."""
        self._given_floor: Callable[..., Any] | None = (
            floor.bind(self) if isinstance(floor, GeneratorFloor) else floor
        )
        self.implied_floor: ImpliedFloor | None = None
        """The floor taken when ``floor=`` is not given (the ORM sets it to the bound columns)."""
        if self._given_floor is not None:
            check_floor_arguments(self._given_floor, self.floor_arguments, namespace=self.namespace)
        self.headroom_option = check_headroom(headroom)
        """``headroom=`` as given (None: the default, see `headroom`)."""
        self.headroom = 0
        """Counter steps a heal leaves above the guard (see `highwater`)."""
        self.drift_most = 0
        """The most counter steps a heal adds for the age of a mark (*Drift* in `highwater`;
        counter strategies only)."""
        self.high: HighWater[Any] = HighWater(len(nodes), self.namespace)
        self.share_calls = True
        """Whether concurrent callers share round trips (see `sa_redis_ids.sharing`); set it to
        False to give each call a round trip of its own."""
        self._shared: Shared[V] = Shared(
            self._take_batch_plan, _RequestFloor(self), most=self.max_batch, slots=len(nodes)
        )

    @property
    def _floor(self) -> Callable[..., Any] | None:
        """The floor to read now: ``floor=`` when given, else the implied floor: the one the
        requests of a shared call carried while that call runs, else the one that can be read
        here, else None."""
        given = self._given_floor
        if given is not None:
            return given
        implied = self.implied_floor
        if implied is None:
            return None
        carried = _CARRIED.get()
        if carried is not None and carried[0] is self:
            return carried[1]
        return implied.now()

    def _set_headroom(self, capacity: int, max_block: int | None = None) -> None:
        """Fix `headroom` once the per-node ``capacity`` and the largest block are known."""
        chosen = self.headroom_option
        self.headroom = default_headroom(capacity, max_block) if chosen is None else chosen
        self.drift_most = drift_cap(self.headroom, capacity)

    def _highest_used(self, *day: Any, what: str) -> Plan[int]:
        """Call the floor (with ``day`` for date-keyed generators) and check its answer: the
        highest value (or day's counter) already used, a non-negative int."""
        assert self._floor is not None
        call = f"floor({', '.join(map(str, day))})"
        used = yield CallFloor(self._floor, *day)
        return checked_floor(used, call=call, what=what, namespace=self.namespace)

    def _with_floor_read_once(self, node: Node, attempt: Callable[[], Plan[T]]) -> Plan[T]:
        """Run plan ``attempt`` (a call on ``node`` that reads the floor at first use) so that one
        thread per process and node reads it; the others wait, then find it read. (On the asyncio
        driver concurrent first calls may each read the floor: harmless, as each heal only rises.)
        """
        first = self._floor is not None and not self.high.consulted(node.index)
        if first and not node.asynchronous:
            with self.high.first_use(node.index):
                return (yield from attempt())
        return (yield from attempt())

    @property
    def rewinds(self) -> int:
        """How often this process found a node's state below what it had issued, and healed it."""
        return self.high.rewinds

    @property
    @abstractmethod
    def max_value(self) -> int:
        """The largest numeric value this generator can ever produce (codes: their counter)."""

    @property
    def max_length(self) -> int:
        """The longest text of a value (digits for numbers, characters for codes)."""
        return len(str(self.max_value))

    @property
    @abstractmethod
    def config(self) -> str:
        """The options that shape values; recorded on each node so a changed one is caught."""

    @property
    def local_config(self) -> str:
        """Options that only shape this process (buffering), not the values; never on a node."""
        return ""

    def claim_for(self, node: Node) -> str:
        """The claim this generator records on ``node`` for its namespace."""
        return node.claim(self.config)

    @property
    def claim_key(self) -> str:
        return self.keys.key(self.strategy, "node")

    @planned
    def recorded_claims(self) -> Plan[list[tuple[Node, str | None]]]:
        """Each node with the claim it records for this namespace (None: none yet)."""
        return self._recorded_claims()

    def _recorded_claims(self) -> Plan[list[tuple[Node, str | None]]]:
        def action(node: Node) -> Plan[tuple[Node, str | None]]:
            found = yield Command(node, "get", self.claim_key)
            return node, None if found is None else reply_text(found)

        return self._nodes.each_plan(self.namespace, action)

    @planned
    def check_claims(self) -> Plan[None]:
        """Raise `ConfigError` if a node records another claim than ours; change nothing.

        Writes that do not issue values (``ensure_at_least``, ``reserve``) call it first, so a run
        with other options than the application's (or another node list) stops before it touches
        any node. A node without a claim passes: the write that follows records ours atomically,
        together with the counter it qualifies.
        """
        return self._check_claims()

    def _check_claims(self) -> Plan[None]:
        for node, recorded in (yield from self._recorded_claims()):
            ours = self.claim_for(node)
            if recorded is not None and recorded not in (ours, ours + UNJUDGED):
                raise_for_status(
                    STATUS_CLAIM_MISMATCH,
                    [recorded],
                    namespace=self.namespace,
                    node=node,
                    claim=ours,
                )

    def _next_id_plan(self) -> Plan[V]:
        """`next_id` as a plan (what the asyncio front end awaits)."""
        return first(self._shared_take_plan(1))

    @planned_as(_next_id_plan)
    def next_id(self) -> V:
        """One new value."""
        return self._take(1)[0]

    def _next_ids_plan(self, n: int) -> Plan[list[V]]:
        """`next_ids` as a plan (what the asyncio front end awaits)."""
        if check_count(n, most=self.max_batch) == 0:
            return now(list)
        return self._shared_take_plan(n)

    @planned_as(_next_ids_plan)
    def next_ids(self, n: int) -> list[V]:
        """``n`` new values in one Redis round trip (``[]`` for 0)."""
        if check_count(n, most=self.max_batch) == 0:
            return []
        return self._take(n)

    def _shared_take_plan(self, n: int) -> Plan[list[V]]:
        """`_take_plan` (``n`` >= 1), its round trip shared with concurrent callers (threads,
        or tasks on the asyncio front end) unless `share_calls` is off."""
        if self.share_calls:
            return self._shared.plan(n)
        return self._take_plan(n)

    @abstractmethod
    def _take_plan(self, n: int) -> Plan[list[V]]:
        """The plan fetching ``n`` (>= 1) values in one round trip (see
        `plans`); what a strategy implements."""

    def _take_batch_plan(self, sizes: list[int]) -> Plan[list[V]]:
        """The plan of one round trip serving requests of ``sizes`` (a shared call, see
        `sa_redis_ids.sharing`): each request gets its slice of the values, in order. By default
        ``_take_plan(sum(sizes))``; a strategy whose values of one call are related where those
        of separate calls are not (short IDs taken in runs) takes them as separate calls would."""
        return self._take_plan(sum(sizes))

    def _take(self, n: int) -> list[V]:
        """Fetch ``n`` (>= 1) values in one round trip (sync), shared with concurrent callers
        unless `share_calls` is off (the threads' shared calls directly: no plan in between)."""
        if self.share_calls:
            return self._shared.threads.take(n)
        return run_plan(self._take_plan(n))

    def _spread_plan(self, n: int, take_on: Callable[[Node, int], Plan[list[V]]]) -> Plan[list[V]]:
        """``n`` values by ``take_on(node, n)`` on the next node that can answer; a batch that
        fits in no single node's remainder takes what is left on each node in turn, so a
        namespace's whole capacity is reachable over N nodes whatever the sizes of its calls.

        Only when every node said "exhausted": each is asked again for ``n`` (one of them may
        have answered for a new day meanwhile) and says how many values it has left. Fewer than
        ``n`` over the nodes that answered raises [`SequenceExhausted`][sa_redis_ids.SequenceExhausted]
        with nothing taken; otherwise the batch takes them. A remainder another process took
        between the two passes also raises it: the values already taken are gaps.
        """
        try:
            return (yield from self._call_plan(lambda node: take_on(node, n)))
        except SequenceExhausted:
            if n == 1 or len(self._nodes) == 1:
                raise
        nodes = self._nodes
        left: list[tuple[Node, int]] = []
        for node in nodes.nodes:
            try:
                return (yield from nodes.on_plan(node, self.namespace, lambda on: take_on(on, n)))
            except SequenceExhausted as exc:
                if exc.left:
                    left.append((node, exc.left))
            except RedisUnavailable:
                continue
        total = sum(count for _, count in left)
        if total < n:
            raise SequenceExhausted(
                f"{total} value(s) left over the nodes that answered, fewer than the {n} asked for",
                namespace=self.namespace,
            )
        values: list[V] = []
        for node, count in left:
            want = min(count, n - len(values))
            values += yield from nodes.on_plan(node, self.namespace, _taking(take_on, want))
            if len(values) == n:
                break
        return values

    def _call_plan(self, action: Callable[[Node], Plan[T]]) -> Plan[T]:
        """Plan ``action`` on the next node that can answer (see ``NodeSet.call_plan``); reported
        to the node set's observer when metrics are enabled (`sa_redis_ids.metrics`)."""
        nodes = self._nodes
        plan = nodes.call_plan(self.namespace, action)
        observer = nodes.observer
        if observer is None:
            return plan
        return observed(observer, self.namespace, self.strategy, plan)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.namespace!r}, {self.config})"
