"""Redlock: a lock over N independent Redis masters, with a fencing token per acquisition.

The algorithm of the Redis distributed-lock page:

1. Read the (monotonic) clock, pick a random token.
2. On every node at once, ``SET key token NX PX ttl`` (``lua/lock_acquire.lua``), each under a short
   per-node timeout (``node_timeout``), so a node that hangs costs at most that long. With one node
   the call runs inline and is bounded by the client's socket timeout (1 s for ``RedisIds`` clients).
3. The lock is taken when a majority (``N // 2 + 1``) granted it and time is left:
   ``validity = ttl − elapsed − drift`` with ``drift = ttl × 0.01 + 2 ms``.
4. Otherwise unlock every node (also those that did not answer: the reply may only have been lost)
   and retry after a random delay, until ``timeout``; then raise [`LockNotAcquired`][sa_redis_ids.LockNotAcquired] with each
   node's error.

Release and extend are compare-and-act scripts: they touch the key only while it holds our token.

**Fencing token.** Each node keeps a counter per lock name (``…:fence``, same hash tag as the lock
key). When ``SET NX`` succeeds the acquire script also ``INCR``-s it and returns the new value. The
token of the acquisition is the maximum over the nodes that granted it, and before the lock counts
as taken the counter of each granting node that is behind is raised to the token (set-if-greater,
``lua/set_if_greater.lua``); if fewer than a majority end up at the token or above, the attempt
fails. So when an acquisition A is granted, a majority of nodes hold a fence ``>= token(A)``. Any
acquisition B granted later needs a majority too, which shares at least one node ``n`` with A's. On
``n`` B's ``SET NX`` could only succeed after A's key was gone, hence after A's raise on ``n`` (done
while A's key was alive, before A returned), so B's ``INCR`` there yields more than ``token(A)`` and
``token(B) > token(A)``: tokens increase strictly in the order the lock is granted, across processes.

**What Redlock guarantees, and what it does not.** Mutual exclusion holds while its timing
assumptions hold: clocks of nodes and clients advance at about the same rate, network delays and
process pauses are small compared with the TTL, and a node that restarts either kept its keys
(AOF with ``appendfsync always``) or stays down for longer than the TTL. It does *not* hold when a
node's clock jumps forward (an NTP step, an operator): its key expires early and a second client can
win a majority. It does not protect a holder that is paused (GC, swap, a stopped VM) or delayed for
longer than ``validity``: the holder wakes up believing it still holds a lock that expired and
another client may hold now. That is the core of Martin Kleppmann's critique ("How to do distributed
locking", 2016): a lease based on timing cannot by itself make a critical section safe.

Use the **fencing token** for that: pass it with every write to the protected resource and have the
resource remember the highest token it has seen and reject writes carrying a lower one. A paused
holder's late write then fails instead of overwriting a newer holder's. The token's monotonicity
needs the fence counters to survive; a node that loses its data (no persistence, ``FLUSHALL``) can
hand out smaller tokens again.

A [`Redlock`][sa_redis_ids.Redlock] object is one lease for one holder; do not share it between threads (make one
per use: ``RedisIds.lock`` returns a new one on every call).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import random
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import redis

from sa_redis_ids.errors import ConfigError, LockNotAcquired, RedisUnavailable, SaRedisIdsError
from sa_redis_ids.keys import DEFAULT_PREFIX, validate_prefix
from sa_redis_ids.redis.identity import same_server, server_identity
from sa_redis_ids.redis.nodes import Node, NodeSet
from sa_redis_ids.redis.plans import Effect, Plan, Run, Sleep, run_plan, run_plan_async
from sa_redis_ids.redis.scripts import check_reply, reply_text
from sa_redis_ids.validation import check_seconds

T = TypeVar("T")

log = logging.getLogger(__name__)

MAX_NAME_LENGTH = 200
_NAME = re.compile(r"[A-Za-z0-9_.:\-]+")
DRIFT_FACTOR = 0.01
DRIFT_MS = 2
MIN_TTL = 0.01
IDENTITY_TIMEOUT = 1.0
"""Seconds to wait for a node's ``INFO server`` at its first use by a Redlock."""

#: Errors that mean "this node did not grant the lock" rather than a bug.
_NODE_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, SaRedisIdsError)


def validate_lock_name(name: object) -> str:
    """Return ``name`` if it is 1–200 characters of letters, digits, ``_ . : -``; else raise."""
    if not isinstance(name, str):
        raise ConfigError(f"lock name must be a str, not {type(name).__name__}")
    if not 1 <= len(name) <= MAX_NAME_LENGTH or not _NAME.fullmatch(name):
        shown = name if len(name) <= 40 else name[:40] + "…"
        raise ConfigError(
            f"lock name {shown!r} must be 1–{MAX_NAME_LENGTH} letters, digits, '_', '.', ':' or '-'"
        )
    return name


def lock_keys(prefix: str, name: str) -> tuple[str, str]:
    """The lock key ``prefix:lock:{name}`` and its fence counter; the name is their hash tag."""
    base = f"{prefix}:lock:{{{name}}}"
    return base, f"{base}:fence"


def drift_for(ttl: float) -> float:
    """Seconds of clock drift allowed for a lock of ``ttl`` seconds: 1 % of it plus 2 ms."""
    return ttl * DRIFT_FACTOR + DRIFT_MS / 1000


def default_node_timeout(ttl: float) -> float:
    """2 % of the TTL, at least 50 ms and at most 0.5 s (the page suggests tens of ms for 10 s)."""
    return min(max(ttl * 0.02, 0.05), 0.5)


def _seconds(option: str, value: object, *, low: float, inclusive: bool = True) -> float:
    return check_seconds(option, value, low=low, inclusive=inclusive)


def _run(node: Node, action: Callable[[Node], T]) -> T | BaseException:
    """``action(node)``, or the exception it raised (every kind; the caller sorts them out)."""
    try:
        return action(node)
    except Exception as exc:
        return exc


def fan_out(
    nodes: Sequence[Node], action: Callable[[Node], T], timeout: float
) -> list[T | BaseException]:
    """Run ``action`` on every node at once; one result or exception per node, in node order.

    A node that has not answered within ``timeout`` seconds gets a [`RedisUnavailable`][sa_redis_ids.RedisUnavailable]; its
    thread (a daemon) finishes on its own when the client's socket timeout ends the call. A single
    node runs inline, bounded by its client's socket timeout. Exceptions that are not Redis or
    library errors (bugs) are raised here.
    """
    if len(nodes) == 1:
        outcomes = [_run(nodes[0], action)]
    else:
        answers: queue.Queue[tuple[int, T | BaseException]] = queue.Queue()
        for index, node in enumerate(nodes):
            threading.Thread(
                target=lambda i=index, n=node: answers.put((i, _run(n, action))),
                name=f"sa_redis_ids-redlock-{node.name}",
                daemon=True,
            ).start()
        got: dict[int, T | BaseException] = {}
        deadline = time.monotonic() + timeout
        while len(got) < len(nodes):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                index, outcome = answers.get(timeout=left)
            except queue.Empty:
                break
            got[index] = outcome
        outcomes = [
            got[i]
            if i in got
            else RedisUnavailable(f"no answer within {timeout:g} s", node=node.name)
            for i, node in enumerate(nodes)
        ]
    return _outcomes(outcomes)


def _outcomes(outcomes: list[T | BaseException]) -> list[T | BaseException]:
    """``outcomes``, after raising the first exception that is not a Redis or library error."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, _NODE_ERRORS):
            raise outcome
    return outcomes


class FanOut(Effect):
    """Run plan ``action(node)`` on every node of ``nodes`` at once; the effect's result is one
    result or exception per node, in node order (see `fan_out`).

    The sync driver runs each node's plan in a thread (a single node inline); the asyncio driver
    runs them as tasks, each cut off after ``timeout`` seconds when there are several nodes.
    """

    __slots__ = ("action", "nodes", "timeout")

    def __init__(self, nodes: Sequence[Node], action: Callable[[Node], Plan[Any]], timeout: float):
        self.nodes = nodes
        self.action = action
        self.timeout = timeout

    def run(self) -> list[Any]:
        action = self.action
        return fan_out(self.nodes, lambda node: run_plan(action(node)), self.timeout)

    async def run_async(self) -> list[Any]:
        action, timeout, several = self.action, self.timeout, len(self.nodes) > 1

        async def one(node: Node) -> Any:
            try:
                if several:
                    return await asyncio.wait_for(run_plan_async(action(node)), timeout)
                return await run_plan_async(action(node))
            except asyncio.TimeoutError:
                return RedisUnavailable(f"no answer within {timeout:g} s", node=node.name)
            except Exception as exc:
                return exc

        return _outcomes(list(await asyncio.gather(*(one(node) for node in self.nodes))))


class _Pause(Effect):
    """Wait ``seconds`` with an injected ``sleep`` (tests); on the asyncio driver an injected
    sleep is called as it is (it answers at once in tests), the real one becomes
    ``asyncio.sleep``."""

    __slots__ = ("seconds", "sleep")

    def __init__(self, sleep: Callable[[float], None], seconds: float):
        self.sleep = sleep
        self.seconds = seconds

    def run(self) -> None:
        self.sleep(self.seconds)

    async def run_async(self) -> None:
        if self.sleep is time.sleep:
            await asyncio.sleep(self.seconds)
        else:
            self.sleep(self.seconds)


@dataclass
class _Attempt:
    """The outcome of one round of SET NX over the nodes."""

    fencing_token: int = 0
    validity: float = 0.0
    """Seconds left from ``end``, the clock reading after the last reply."""
    end: float = 0.0
    errors: dict[str, BaseException] = field(default_factory=dict)
    reason: str = ""


class Redlock:
    """A distributed lock over the independent Redis masters ``clients`` (or a ``NodeSet``, or a list
    of some of its ``Node``s).

    ``with Redlock(clients, "name") as lease:`` acquires (waiting up to ``timeout`` seconds) and
    releases; ``lease.fencing_token`` and ``lease.validity`` are set while it is held. A Redis
    Cluster client counts as one node. ``node_timeout`` bounds the wait for each node (default
    `default_node_timeout`); failed attempts are retried after ``retry_delay`` × U(0.5, 1) s.
    ``fence_ttl`` (default: never) lets the fence counter of a lock name that falls out of use
    expire that many seconds after its last acquisition; tokens are monotonic only while it
    lives. ``clock``, ``sleep`` and ``jitter`` (a ``random.random`` stand-in) are injectable so
    tests of the retry loop need not sleep.
    """

    def __init__(
        self,
        clients: NodeSet | Sequence[Any] | Any,
        name: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        ttl: float = 10.0,
        timeout: float = 10.0,
        node_timeout: float | None = None,
        retry_delay: float = 0.2,
        fence_ttl: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
    ):
        self.name = validate_lock_name(name)
        self.prefix = validate_prefix(prefix)
        self.ttl = _seconds("ttl", ttl, low=MIN_TTL)
        self.timeout = _seconds("timeout", timeout, low=0.0)
        self.node_timeout = (
            default_node_timeout(self.ttl)
            if node_timeout is None
            else _seconds("node_timeout", node_timeout, low=0.0, inclusive=False)
        )
        self.retry_delay = _seconds("retry_delay", retry_delay, low=0.0, inclusive=False)
        self.fence_ttl = (
            None if fence_ttl is None else _seconds("fence_ttl", fence_ttl, low=self.ttl)
        )
        if isinstance(clients, NodeSet):
            self._nodes = clients.nodes
        elif isinstance(clients, list) and clients and all(isinstance(n, Node) for n in clients):
            self._nodes = list(clients)  # some nodes of a NodeSet
        else:
            found = list(clients) if isinstance(clients, (list, tuple)) else [clients]
            if not found:
                raise ConfigError("a Redlock needs at least one Redis client")
            self._nodes = NodeSet(found).nodes
        names = [node.name for node in self._nodes]
        self._labels = [
            name if names.count(name) == 1 else f"{name}#{node.index}"
            for name, node in zip(names, self._nodes, strict=True)
        ]
        self.quorum = len(self._nodes) // 2 + 1
        self.key, self.fence_key = lock_keys(self.prefix, self.name)
        self._clock = clock
        self._sleep = sleep
        self._jitter = jitter
        self._token = ""
        self._held = False
        self.fencing_token = 0
        """The fencing token of the current (or last) acquisition; 0 before the first."""
        self.validity = 0.0
        """Seconds the lock was known to be valid for when it was acquired or last extended."""
        self.valid_until = 0.0
        """The ``clock()`` reading at which that validity ends."""

    @property
    def nodes(self) -> list[Node]:
        """The independent nodes the lock is taken on."""
        return list(self._nodes)

    @property
    def held(self) -> bool:
        """Acquired, not released, and (by the local clock) still within its validity."""
        return self._held and self._clock() < self.valid_until

    @property
    def remaining(self) -> float:
        """Seconds of validity left (0 when not held)."""
        return max(0.0, self.valid_until - self._clock()) if self._held else 0.0

    def acquire(self, *, timeout: float | None = None) -> Redlock:
        """Take the lock, retrying until ``timeout`` (default: the lock's); return ``self``.

        ``timeout=0`` makes a single attempt. Raises [`LockNotAcquired`][sa_redis_ids.LockNotAcquired] (with each node's
        error from the last attempt) when no attempt won a majority with validity left, and at
        once the [`ConfigError`][sa_redis_ids.ConfigError] of a node that refused the attempt
        (a permission, the password, TLS) when it failed.
        """
        self._refuse_asyncio("acquire()")
        return run_plan(self.acquire_plan(timeout=timeout))

    def release(self) -> bool:
        """Delete the lock on every node where it still holds our token.

        Returns whether it was still ours on a majority (``False`` if it had expired or was not
        held). Nodes that cannot be reached are logged and left to expire; this never raises
        (except `ConfigError` for a lock on ``redis.asyncio`` clients).
        """
        self._refuse_asyncio("release()")
        return run_plan(self.release_plan())

    def extend(self, ttl: float | None = None) -> float:
        """Reset the lock's TTL to ``ttl`` (default: the lock's) on every node that still holds it.

        Returns the new validity in seconds. When fewer than a majority still held our token, or
        no validity would be left, the lock is lost: it is released and [`LockNotAcquired`][sa_redis_ids.LockNotAcquired]
        raised.
        """
        self._refuse_asyncio("extend()")
        return run_plan(self.extend_plan(ttl))

    def _refuse_asyncio(self, call: str) -> None:
        """Raise `ConfigError` when the nodes are ``redis.asyncio`` clients: the sync
        ``call`` could never finish on them (``async with`` runs the same plans awaited)."""
        if self._nodes[0].asynchronous:
            raise ConfigError(
                f"{call} of lock {self.name!r} is sync, but its Redis clients are redis.asyncio "
                f"ones: take the lock with 'async with ids.lock({self.name!r}):'"
            )

    def __enter__(self) -> Redlock:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    async def __aenter__(self) -> Redlock:
        """``async with lock:`` on ``redis.asyncio`` clients (the plans of [`acquire`][sa_redis_ids.Redlock.acquire])."""
        return await run_plan_async(self.acquire_plan())

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await run_plan_async(self.release_plan())

    # -- the lock's logic, as plans (see sa_redis_ids.redis.plans): run sync or on asyncio ------

    def acquire_plan(self, *, timeout: float | None = None) -> Plan[Redlock]:
        """The plan of [`acquire`][sa_redis_ids.Redlock.acquire]."""
        if self._held:
            raise LockNotAcquired(
                f"lock {self.name!r} is already held by this Redlock; release() it first",
                name=self.name,
            )
        wait = self.timeout if timeout is None else _seconds("timeout", timeout, low=0.0)
        deadline = self._clock() + wait
        yield from self._check_distinct_plan()
        attempts = 0
        while True:
            attempts += 1
            # A token per attempt: a failed attempt's unlock that reaches a node late must not
            # delete the key a later attempt set there.
            token = secrets.token_hex(16)
            attempt = yield from self._try_plan(token)
            if not attempt.reason:
                self._token = token
                self._held = True
                self.fencing_token = attempt.fencing_token
                self.validity = attempt.validity
                self.valid_until = attempt.end + attempt.validity
                return self
            yield from self._unlock_plan(token, level=logging.DEBUG)
            refused = next((e for e in attempt.errors.values() if isinstance(e, ConfigError)), None)
            if refused is not None:  # a permission, a password, TLS: retrying cannot help
                raise refused
            left = deadline - self._clock()
            if left <= 0:
                raise LockNotAcquired(
                    f"could not lock {self.name!r} on {self.quorum} of {len(self._nodes)} nodes "
                    f"within {wait:g} s ({attempts} attempts; last: {attempt.reason})",
                    name=self.name,
                    errors=attempt.errors,
                )
            delay = min(left, self.retry_delay * (0.5 + 0.5 * self._jitter()))
            yield Sleep(delay) if self._sleep is time.sleep else _Pause(self._sleep, delay)

    def release_plan(self) -> Plan[bool]:
        """The plan of [`release`][sa_redis_ids.Redlock.release]."""
        if not self._held:
            return False
        self._held = False
        self.valid_until = 0.0
        return (yield from self._unlock_plan(self._token)) >= self.quorum

    def extend_plan(self, ttl: float | None = None) -> Plan[float]:
        """The plan of [`extend`][sa_redis_ids.Redlock.extend]."""
        if not self._held:
            raise LockNotAcquired(
                f"lock {self.name!r} is not held by this Redlock; nothing to extend", name=self.name
            )
        new_ttl = self.ttl if ttl is None else _seconds("ttl", ttl, low=MIN_TTL)
        start = self._clock()
        token = self._token
        args = [token, str(self._ms(new_ttl))]
        outcomes = yield FanOut(
            self._nodes, lambda node: self._flag("lock_extend", node, args), self.node_timeout
        )
        extended, errors = self._tally(outcomes, "our lock is gone (expired or taken)")
        end = self._clock()
        validity = new_ttl - (end - start) - drift_for(new_ttl)
        if extended < self.quorum or validity <= 0:
            self._held = False
            self.valid_until = 0.0
            yield from self._unlock_plan(token)
            raise LockNotAcquired(
                f"lock {self.name!r} was lost: extended on {extended} of {len(self._nodes)} nodes "
                f"(needs {self.quorum}), validity left {validity:.3f} s",
                name=self.name,
                errors=errors,
            )
        self.validity = validity
        self.valid_until = end + validity
        return validity

    def holding(self, body: Callable[[], Plan[T]]) -> Plan[T]:
        """The plan that acquires the lock, runs plan ``body()`` and releases the lock (also when
        the body raises), answering what the body answers: ``with lock:`` for plans."""
        yield from self.acquire_plan()
        try:
            result = yield from body()
        except GeneratorExit:  # the plan was abandoned: no I/O is possible now; the TTL ends it
            raise
        except BaseException:
            yield from self.release_plan()
            raise
        yield from self.release_plan()
        return result

    def _check_distinct_plan(self) -> Plan[None]:
        """Refuse nodes that are one server under several names (see
        ``sa_redis_ids.redis.identity``): its grants would count as a majority of one.
        Each node's server is read at its first use; a node that does not answer is checked on a
        later acquisition."""
        if len(self._nodes) < 2:
            return
        identities = yield FanOut(
            self._nodes, server_identity, max(self.node_timeout, IDENTITY_TIMEOUT)
        )
        same = same_server(self._labels, identities)
        if same is not None:
            first, second, identity = same
            raise ConfigError(
                f"lock {self.name!r}: nodes {first} and {second} are the same Redis server "
                f"({identity}); a Redlock needs independent servers, each listed once (databases "
                "of one server are not independent)"
            )

    def _try_plan(self, token: str) -> Plan[_Attempt]:
        """One round: SET NX on all nodes, raise the fence on a majority, compute the validity."""
        start = self._clock()
        fence_ms = 0 if self.fence_ttl is None else self._ms(self.fence_ttl)
        args = [token, str(self._ms(self.ttl)), str(fence_ms)]
        outcomes = yield FanOut(
            self._nodes, lambda node: self._lock_node(node, args), self.node_timeout
        )
        attempt = _Attempt()
        fences: dict[int, int] = {}
        for index, outcome in enumerate(outcomes):
            if isinstance(outcome, BaseException):
                attempt.errors[self._labels[index]] = outcome
            else:
                fences[index] = outcome
        if len(fences) < self.quorum:
            attempt.reason = f"granted by {len(fences)} of {len(self._nodes)} nodes"
            return attempt
        attempt.fencing_token = max(fences.values())
        behind = [index for index, fence in fences.items() if fence < attempt.fencing_token]
        if behind:
            raise_args = [str(attempt.fencing_token)]
            raised = yield FanOut(
                [self._nodes[index] for index in behind],
                lambda node: self._raise_fence(node, raise_args),
                self.node_timeout,
            )
            for index, outcome in zip(behind, raised, strict=True):
                if isinstance(outcome, BaseException):
                    attempt.errors[self._labels[index]] = outcome
                    del fences[index]
            if len(fences) < self.quorum:
                attempt.reason = (
                    f"fencing token raised on only {len(fences)} of {len(self._nodes)} nodes"
                )
                return attempt
        attempt.end = self._clock()
        attempt.validity = self.ttl - (attempt.end - start) - drift_for(self.ttl)
        if attempt.validity <= 0:
            attempt.reason = f"granted too late (validity {attempt.validity:.3f} s)"
        return attempt

    def _lock_node(self, node: Node, args: list[str]) -> Plan[int]:
        reply = yield Run(node, "lock_acquire", [self.key, self.fence_key], args)
        (fence,) = check_reply(reply, namespace=self.name, node=node)
        return int(reply_text(fence))

    def _raise_fence(self, node: Node, args: list[str]) -> Plan[int]:
        reply = yield Run(node, "set_if_greater", [self.fence_key], args)
        _before, after = check_reply(reply, namespace=self.name, node=node)
        return int(reply_text(after))

    def _flag(self, script: str, node: Node, args: list[str]) -> Plan[bool]:
        reply = yield Run(node, script, [self.key], args)
        (flag,) = check_reply(reply, namespace=self.name, node=node)
        return int(flag) == 1

    def _unlock_plan(self, token: str, *, level: int = logging.WARNING) -> Plan[int]:
        """Release ``token``'s key on every node; the number of nodes where it was still ours."""
        outcomes = yield FanOut(
            self._nodes, lambda node: self._flag("lock_release", node, [token]), self.node_timeout
        )
        released, errors = self._tally(outcomes, "")
        for label, error in errors.items():
            log.log(level, "could not release lock %r on %s: %s", self.name, label, error)
        return released

    def _tally(
        self, outcomes: list[bool | BaseException], refused: str
    ) -> tuple[int, dict[str, BaseException]]:
        """How many nodes answered ``True``; errors (and, if ``refused``, refusals) by node."""
        count = 0
        errors: dict[str, BaseException] = {}
        for label, outcome in zip(self._labels, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                errors[label] = outcome
            elif outcome:
                count += 1
            elif refused:
                errors[label] = LockNotAcquired(refused, name=self.name)
        return count, errors

    @staticmethod
    def _ms(seconds: float) -> int:
        return max(1, round(seconds * 1000))

    def __repr__(self) -> str:
        state = f"held, token {self.fencing_token}" if self._held else "not held"
        return f"Redlock({self.name!r}, nodes={len(self._nodes)}, ttl={self.ttl:g}, {state})"
