"""One ``AsyncRedisIds`` on several event loops: a ``redis.asyncio`` client per running loop.

A ``redis.asyncio`` client, its connection pool and every connection in it belong to the event
loop that first used them: redis-py's pool lock and each connection's stream are bound to that
loop, and another loop that touches them fails with ``RuntimeError`` ("... is bound to a
different event loop", "attached to a different loop", "Event loop is closed"). redis-py's answer
is one client per loop. An asyncio node does that for its user: the first loop that calls uses
the client the node was given, and every other loop a *twin*, a client built with the same
connection settings and pool class (a Sentinel service's twin asks twins of its Sentinels, a
Redis Cluster's starts from the nodes the client knows), made at that loop's first call and
closed as the loop shuts down (see `AtLoopEnd`). So a sync application that runs
``asyncio.run()`` per request, test suites with a loop per test, and threads that each run their
own loop all work with one ``AsyncRedisIds``.

Each loop keeps its own `OnLoop`: the client, the scripts registered on it, its fast lane, the
lock first calls wait on and its Sentinel watch. Finding it costs one ``get_running_loop()``
and one identity check while the same loop keeps calling (the common case).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import sys
import threading
import weakref
from collections.abc import AsyncGenerator, Callable
from typing import Any

from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.connection import BlockingConnectionPool, SSLConnection
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.commands.core import Script

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.redis.fastlane import AsyncLane
from sa_redis_ids.redis.scripts import script_source
from sa_redis_ids.redis.switchover import MasterWatch

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT = 2.0
"""Seconds a loop's end waits for its connections to close (a TLS close to a server that hangs
could wait much longer); what is not closed by then is left to the garbage collector."""

#: Connection options a pool adds for itself (they name the pool they belong to).
_POOL_OWN = ("maint_notifications_pool_handler", "connection_pool")


def twin_client(client: Any, *, node: str) -> Any:
    """A new ``redis.asyncio`` client like ``client`` (same pool class, connection class and
    settings, no connection yet) for another event loop; a cluster client's twin starts from
    the nodes the client knows."""
    if hasattr(client, "nodes_manager"):
        return _cluster_twin(client, node=node)
    pool = client.connection_pool
    kwargs = {key: value for key, value in pool.connection_kwargs.items() if key not in _POOL_OWN}
    kwargs["connection_class"] = pool.connection_class
    kwargs["max_connections"] = pool.max_connections
    twin: Any
    if isinstance(pool, SentinelConnectionPool):
        manager = pool.sentinel_manager
        sentinels = AsyncSentinel.__new__(AsyncSentinel)
        sentinels.__dict__.update(manager.__dict__)
        sentinels.sentinels = [twin_client(each, node=node) for each in manager.sentinels]
        twin = SentinelConnectionPool(  # type: ignore[no-untyped-call]
            pool.service_name,
            sentinels,
            is_master=pool.is_master,
            check_connection=pool.check_connection,
            **kwargs,
        )
    elif isinstance(pool, BlockingConnectionPool):
        twin = type(pool)(timeout=pool.timeout, **kwargs)
    else:
        twin = type(pool)(**kwargs)
    made = AsyncRedis(connection_pool=twin)
    made.auto_close_connection_pool = True  # the twin's pool is the library's: closed with it
    return made


def _cluster_twin(client: AsyncRedisCluster, *, node: str) -> AsyncRedisCluster:
    """`twin_client` of an asyncio ``RedisCluster``: its connection options (those its
    constructor takes), retry policy and routing options, from every node it knows."""
    taken = inspect.signature(AsyncRedisCluster.__init__).parameters
    options = {
        key: value
        for key, value in client.connection_kwargs.items()
        if key in taken and key not in ("host", "port", "startup_nodes")
    }
    if issubclass(client.connection_kwargs.get("connection_class", object), SSLConnection):
        options["ssl"] = True
    if client.read_from_replicas:  # (deprecated by redis-py: passed only when set)
        options["read_from_replicas"] = True
    known = client.get_nodes() or list(client.nodes_manager.startup_nodes.values())
    if not known:
        raise ConfigError("the Redis Cluster client knows no node to start from", node=node)
    return AsyncRedisCluster(
        startup_nodes=[ClusterNode(each.host, each.port) for each in known],
        require_full_coverage=client.nodes_manager.require_full_coverage,
        load_balancing_strategy=client.load_balancing_strategy,
        reinitialize_steps=client.reinitialize_steps,
        retry=client.retry,
        **options,
    )


class AtLoopEnd:
    """Closes an `OnLoop`'s connections on its event loop as asyncio shuts that loop down.

    asyncio has no hook for a loop's end, but the runners that end a loop properly
    (``asyncio.run``, ``asyncio.Runner``, pytest-asyncio, uvicorn) first call
    ``loop.shutdown_asyncgens()``, which closes every async generator still suspended on the
    loop. This one waits suspended and, closed that way, closes the connections on the loop,
    while that can still be done cleanly (any later, their transports are bound to a closed loop
    and the garbage collector reports them: ``ResourceWarning: unclosed Connection``). A loop
    without async-generator hooks (one not run by ``run_forever``) gets nothing, and a forked
    child closes nothing of its parent's.

    The generator holds the `OnLoop` weakly. When its node is let go while the loop still runs
    (an ``AsyncRedisIds`` dropped), asyncio closes the generator too, on that loop: then only
    what the library made is closed (the lane's connections, a twin client), never the client
    the application gave, which others may be using.
    """

    __slots__ = ("_waiting",)

    def __init__(self, state: OnLoop):
        self._waiting: AsyncGenerator[None, bool | None] | None = None
        if sys.get_asyncgen_hooks().firstiter is None:
            return  # nothing would close it: the loop's end cannot be seen
        if getattr(asyncio.get_running_loop(), "_asyncgens_shutdown_called", False):
            return  # the loop is ending already (asyncio would warn, too late to be closed)
        made = state.client if state.twin else None
        waiting = self._wait(weakref.ref(state), state.lane, made, os.getpid())
        try:
            waiting.asend(None).send(None)  # registers it with the running loop, and suspends
        except StopIteration:
            self._waiting = waiting
        except Exception:  # a loop's hook that refused it: nothing will close the connections
            logger.debug("the event loop's end cannot be watched", exc_info=True)

    @staticmethod
    async def _wait(
        whole: weakref.ref[OnLoop], lane: AsyncLane | None, made: Any, pid: int
    ) -> AsyncGenerator[None, bool | None]:
        try:
            yield  # until closed (the loop shuts down, or the node was let go) or `cancel`
        except GeneratorExit:
            if os.getpid() != pid:  # a forked child's loop: the connections are its parent's
                raise
            twin = made is not None  # the node was let go: only what the library made
            state = whole()
            if state is not None:  # the loop shuts down: every connection of it
                lane, made, twin = state.lane, state.client, state.twin
            try:
                await asyncio.wait_for(close_connections(lane, made, twin=twin), CLOSE_TIMEOUT)
            except Exception:  # the loop or the node is done with them: nothing to serve
                logger.debug("closing an event loop's connections failed", exc_info=True)
            raise

    def cancel(self) -> None:
        """End the wait without closing anything (from any thread; once is enough)."""
        waiting, self._waiting = self._waiting, None
        if waiting is None:
            return
        with contextlib.suppress(StopIteration, StopAsyncIteration, RuntimeError):
            waiting.asend(True).send(None)  # returns at once; RuntimeError: it is closing now


class OnLoop:
    """What an asyncio node keeps for one event loop: its client and what is bound to it."""

    __slots__ = (
        "__weakref__",
        "client",
        "end",
        "first_use",
        "lane",
        "loaded",
        "ready",
        "scripts",
        "twin",
        "watch",
    )

    def __init__(self, client: Any, *, lanes: bool, twin: bool = False):
        self.client = client
        self.twin = twin
        """Whether the library made ``client`` (and so owns its Sentinel clients too)."""
        self.scripts: dict[str, Script] = {}
        """Scripts registered on this client, by name (and clock shift)."""
        self.loaded: set[str] = set()
        """Digests of the scripts loaded before their first call (general path)."""
        self.lane = AsyncLane(client) if lanes else None
        self.watch = MasterWatch.of(client)
        self.first_use: asyncio.Lock | None = None
        """The lock this loop's first calls and script loads wait on (made on the loop)."""
        self.ready = False
        """Whether this loop's client was set up (a cluster's slot map) and the node probed."""
        self.end = AtLoopEnd(self)
        """Closes the connections as the loop shuts down."""

    def script(self, name: str, shift_ms: int) -> Script:
        """The registered script ``name`` on this loop's client."""
        key = name if not shift_ms else f"{name}@{shift_ms}"
        found = self.scripts.get(key)
        if found is None:
            found = self.scripts[key] = self.client.register_script(script_source(name, shift_ms))
        return found

    def lock(self) -> asyncio.Lock:
        """`first_use`, made at the first need (on this loop)."""
        if self.first_use is None:
            self.first_use = asyncio.Lock()
        return self.first_use

    async def close_connections(self) -> None:
        """Close every connection of this loop (run on it): those the fast lane keeps, the
        client's pool and, for a twin, its Sentinel clients."""
        self.end.cancel()
        await close_connections(self.lane, self.client, twin=self.twin)


async def close_connections(lane: AsyncLane | None, client: Any, *, twin: bool) -> None:
    """Close the connections ``lane`` keeps for the running loop, then ``client``'s (if any)
    and, for a ``twin`` the library made, those of its Sentinel clients."""
    if lane is not None:
        await lane.let_go()
    if client is None:
        return
    await close_client(client)
    if twin:
        pool = getattr(client, "connection_pool", None)  # (a cluster has none)
        manager = getattr(pool, "sentinel_manager", None)
        for sentinel in getattr(manager, "sentinels", ()):
            await close_client(sentinel)


async def close_client(client: Any) -> None:
    """Close a ``redis.asyncio`` client's connections (``aclose``, or ``close`` before 5.0.1)."""
    closing = getattr(client, "aclose", None) or client.close
    await closing()


class PerLoop:
    """The `OnLoop` of each running event loop for one asyncio node's ``client``: the client
    itself for the first loop that calls, a `twin_client` for each other (see the module)."""

    def __init__(self, client: Any, *, name: Callable[[], str], lanes: bool):
        self.client = client
        self.name = name
        """The node's name (for errors), asked when needed."""
        self.lanes = lanes
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, OnLoop] = (
            weakref.WeakKeyDictionary()
        )
        self._last: tuple[asyncio.AbstractEventLoop | None, OnLoop | None] = (None, None)
        self._home_taken = False
        self._lock = threading.Lock()
        self._pid = os.getpid()

    def here(self) -> OnLoop:
        """The running loop's `OnLoop` (made at its first call)."""
        loop = asyncio.get_running_loop()
        last = self._last
        if last[0] is loop:
            return last[1]  # type: ignore[return-value]
        return self._find(loop)

    def _find(self, loop: asyncio.AbstractEventLoop) -> OnLoop:
        """`here` past its fast check: ``loop``'s `OnLoop`, made at its first call (the
        node's own client for the first loop, a twin for each other; closed loops dropped)."""
        with self._lock:
            if self._pid != os.getpid():  # a forked child: nothing of its parent's loops
                for old_state in self._states.values():
                    old_state.end.cancel()  # the parent closes them, not the child
                self._states = weakref.WeakKeyDictionary()
                self._pid = os.getpid()
            state = self._states.get(loop)
            if state is None:
                for old in [old for old in list(self._states) if old.is_closed()]:
                    self._states.pop(old).end.cancel()  # closed at its end, if asyncio ended it
                twin = self._home_taken
                client = twin_client(self.client, node=self.name()) if twin else self.client
                state = self._states[loop] = OnLoop(client, lanes=self.lanes, twin=twin)
                self._home_taken = True
            self._last = (loop, state)
            return state

    async def aclose(self) -> None:
        """Close the running loop's connections and forget them: the next call of this loop
        opens new ones. When this loop has none: the node's own client if no loop took it yet;
        else nothing (it belongs to another loop, running or closed, which this one cannot
        close: redis-py raises ``RuntimeError``)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._states.pop(loop, None)
            if self._last[0] is loop:
                self._last = (None, None)
            unused = state is None and not self._home_taken
        if state is not None:
            await state.close_connections()
        elif unused:
            await close_client(self.client)
