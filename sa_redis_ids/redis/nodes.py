"""Redis nodes: one client each, rotation over them, and skipping the ones that are down.

With N independent nodes, node ``k`` only ever issues values of its own residue class (``k`` modulo
``N``), so any node can answer any call and the union never collides. A node that fails with a
connection or timeout error is marked down for ``retry_after`` seconds and skipped; only when every
node fails does a call raise [`RedisUnavailable`][sa_redis_ids.RedisUnavailable]. A failed call never produces a value, and a
value a node issued but whose reply was lost is merely a gap: no other node can issue it.

A node may also be a master with replicas (one server, a Sentinel service, a cluster). With
``replicas=N`` every script waits for ``N`` replicas to acknowledge its write before its values are
handed out (`sa_redis_ids.redis.replication`); answers that mean "a failover is under way"
(``READONLY``, ``NOREPLICAS``, ``MOVED``, ``TRYAGAIN``, ``MASTERDOWN`` …) count as the node being
unavailable, never as a script error. At its first use a node's capabilities are probed
(`sa_redis_ids.redis.capabilities`): what its server lets the library rely on, and its eviction
policy (`sa_redis_ids.redis.eviction`).

Logging: the ``sa_redis_ids.nodes`` logger says, once per transition and not once per failed call,
when a node goes down (WARNING, with the node's name and the error) and when it answers again
(INFO). With metrics enabled (`sa_redis_ids.metrics`) every error that marks a node down is
also reported to the node set's `NodeSet.observer`.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import redis
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ClusterError,
    MaxConnectionsError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.sentinel import MasterNotFoundError, SentinelConnectionPool

from sa_redis_ids.errors import (
    ConfigError,
    ConnectionPoolFull,
    NotDurable,
    RedisUnavailable,
    ReplicasNotAcknowledged,
    SaRedisIdsError,
    ScriptError,
    SequenceExhausted,
)
from sa_redis_ids.forksafe import ForkSafe, renew_client_locks
from sa_redis_ids.observe import Observer
from sa_redis_ids.redis.capabilities import Capabilities, probe, probe_async
from sa_redis_ids.redis.connect import (
    is_async_client,
    is_embedded,
    refuse_foreign_client,
    socket_timeout_of,
)
from sa_redis_ids.redis.eviction import logger, risk_of
from sa_redis_ids.redis.fastlane import AsyncLane, FastLane
from sa_redis_ids.redis.loops import OnLoop, PerLoop
from sa_redis_ids.redis.plans import Commands, Plan, now, run_plan
from sa_redis_ids.redis.refusals import refusal_of
from sa_redis_ids.redis.replication import (
    DEFAULT_DURABLE_TIMEOUT,
    DEFAULT_REPLICA_TIMEOUT,
    check_durable_options,
    check_replica_options,
    check_wait_fits,
    run_acknowledged,
    run_acknowledged_async,
    run_durable,
    run_durable_async,
    run_with_role,
    run_with_role_async,
    wait_milliseconds,
)
from sa_redis_ids.redis.scripts import script_source
from sa_redis_ids.redis.switchover import MasterWatch

T = TypeVar("T")

node_log = logging.getLogger("sa_redis_ids.nodes")
"""Node transitions: down (WARNING, once until it answers again) and back (INFO)."""

#: Errors that mean "this node cannot answer now": skip it and try another. Besides lost
#: connections: a master demoted to replica (``READONLY``, also what Redis 7 answers before running a
#: writing script on a replica), a cluster slot that moved or is migrating (``MOVED``, ``ASK``,
#: ``TRYAGAIN``), a cluster or master that is down (``CLUSTERDOWN``, ``MASTERDOWN``), and a full
#: server under ``noeviction`` (``OOM``): another node can still answer.
NODE_DOWN_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,  # includes MasterNotFoundError (no sentinel knows a master)
    redis.TimeoutError,
    ClusterDownError,  # includes MasterDownError
    ClusterError,
    SlotNotCoveredError,
    ReadOnlyError,
    AskError,  # includes MovedError
    TryAgainError,
    OutOfMemoryError,
    ConnectionResetError,
    BrokenPipeError,
)

#: Error replies without a redis-py class that also mean "not the master now": ``NOREPLICAS``
#: (``min-replicas-to-write`` not met, e.g. during a failover) and ``UNBLOCKED`` (a ``WAIT`` cut
#: short because its master was demoted). Redis 6 wraps errors of ``redis.call`` in "Error running
#: script … -CODE …", hence the second form.
FAILOVER_REPLIES = ("NOREPLICAS", "UNBLOCKED", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN")


DB_OUT_OF_RANGE = "DB index is out of range"
"""What Redis answers the SELECT of a connection whose URL names a database it does not have."""


def is_failover_reply(error: redis.ResponseError) -> bool:
    """Whether an error reply says the node is not (or not yet) a master that can take writes."""
    text = str(error)
    return text.startswith(FAILOVER_REPLIES) or any(
        f"-{code} " in text for code in FAILOVER_REPLIES
    )


def master_may_have_moved(error: BaseException) -> bool:
    """Whether a failed call may mean the master was replaced: no acknowledgement from its
    replicas, a lost connection, or a reply of a node that is not (or not yet) a master."""
    if isinstance(error, (ReplicasNotAcknowledged, *NODE_DOWN_ERRORS)):
        return True
    return isinstance(error, redis.ResponseError) and is_failover_reply(error)


#: Error replies of a node that is up but cannot serve a script now, before running any of it:
#: ``BUSY`` (another client's script runs past ``busy-reply-threshold``), ``MISCONF`` (writes
#: stopped after a failed RDB save: a script fails at its first write, so nothing was written),
#: ``LOADING`` (still loading its data set). Another node can answer the call.
BUSY_REPLIES = ("BUSY", "MISCONF", "LOADING")


def is_unavailable_reply(error: redis.ResponseError) -> bool:
    """Whether an error reply means the node cannot answer now (a failover, or one of
    ``BUSY_REPLIES``), so the call goes to another node and this one is marked down."""
    if is_failover_reply(error):
        return True
    text = str(error)
    return any(text.startswith(f"{code} ") or f"-{code} " in text for code in BUSY_REPLIES)


CALL_DEADLINE_TIMEOUTS = 2
"""A call's deadline in socket timeouts: a reply that timed out is asked for once more (on
another node, or on the same one), a server that hangs costs a call two socket timeouts."""

POOL_WAIT_TIMED_OUT = "No connection available."
"""What redis-py's ``BlockingConnectionPool`` raises (a plain ``ConnectionError``) when no
connection came free within its timeout."""


def is_pool_limit(error: BaseException) -> bool:
    """Whether ``error`` is the client's own pool refusing a connection (every one in use), which
    says nothing about the node: ``MaxConnectionsError``, or a blocking pool's wait that ran out."""
    return isinstance(error, MaxConnectionsError) or (
        type(error) is redis.ConnectionError and str(error) == POOL_WAIT_TIMED_OUT
    )


#: Connection errors that a new connection would not cure: a refused password or permission, a
#: server still loading its data, no Sentinel naming a master, the pool's own limit.
NOT_STALE: tuple[type[BaseException], ...] = (
    redis.AuthenticationError,
    redis.exceptions.AuthorizationError,
    redis.BusyLoadingError,
    MasterNotFoundError,
    MaxConnectionsError,
)


def is_stale(error: BaseException) -> bool:
    """Whether ``error`` says the connection a call went on was closed under it (a server
    restart, a server or proxy that closes idle connections): the call may go once more on a new
    connection. redis-py's asyncio pool hands out such connections without noticing, and a
    sync pool may too when the close comes as it checks one out. A timeout is not one (the server
    was reached and did not answer in time)."""
    return (
        isinstance(error, (redis.ConnectionError, ConnectionResetError, BrokenPipeError))
        and not isinstance(error, NOT_STALE)
        and not is_pool_limit(error)
    )


def drop_idle_connections(client: Any) -> None:
    """Close the idle connections of a sync client's pool: opened before the server closed them,
    each would fail its next call (a cluster client renews its own)."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        pool.disconnect(inuse_connections=False)


async def drop_idle_connections_async(client: Any) -> None:
    """`drop_idle_connections` of a ``redis.asyncio`` client."""
    pool = getattr(client, "connection_pool", None)
    if pool is not None:
        await pool.disconnect(inuse_connections=False)


#: What a call's error may be when the server refused the library's user (a permission, its
#: password, a TLS certificate): see `sa_redis_ids.redis.refusals`.
REFUSABLE: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException)


def timed_out(error: BaseException) -> bool:
    """Whether a call failed because its reply did not come within the socket timeout (the
    server may be alive but slow, or the host loaded): such a call may be sent again."""
    return isinstance(error, (redis.TimeoutError, TimeoutError))


CONNECT_TIMED_OUT = "Timeout connecting to server"
"""How redis-py (sync and asyncio) words a connection not made within its timeout; a TLS
handshake that stalls on a slow server is reported the same way."""


def was_slow(node: Node, error: BaseException) -> bool:
    """Whether ``error`` says ``node`` was slow rather than out of reach, so that a call may be
    sent to it again within its deadline: a reply that timed out (`timed_out`). A plain TCP
    connection not made in time is not one: nothing reached the server (a host that is down, a
    route that drops packets), and trying again would only multiply the wait. Over TLS the same
    words may mean a handshake a busy server did not finish in time: that one is slow."""
    if not timed_out(error):
        return False
    return not (node.plain_tcp and str(error).startswith(CONNECT_TIMED_OUT))


def plain_tcp(client: Any) -> bool:
    """Whether ``client`` connects over plain TCP (no TLS) to one server, as far as can be told:
    a ``redis.Redis`` (or asyncio or Sentinel-managed) connection class that is not TLS. A
    cluster client, a Unix socket or anything unknown counts as not (its connect timeouts keep
    their retry)."""
    if hasattr(client, "nodes_manager") or hasattr(client, "get_nodes"):
        return False
    pool = getattr(client, "connection_pool", None)
    kind = getattr(pool, "connection_class", None)
    if kind is None or "path" in getattr(pool, "connection_kwargs", {}):
        return False
    tls = (redis.connection.SSLConnection, redis.asyncio.connection.SSLConnection)
    plain = (redis.connection.Connection, redis.asyncio.connection.Connection)
    return issubclass(kind, plain) and not issubclass(kind, tls)


def describe_client(client: Any) -> str:
    """A short human name for a client: ``host:port/db``, a socket path, ``cluster@host:port`` or
    ``sentinel:service@host:port,…`` (the sentinels asked for the master of ``service``)."""
    if client.__class__.__module__.startswith("fakeredis"):
        return "embedded"
    if hasattr(client, "get_nodes"):  # RedisCluster
        nodes = client.get_nodes()
        first = nodes[0] if nodes else None
        return f"cluster@{first.host}:{first.port}" if first else "cluster"
    pool = client.connection_pool
    if isinstance(pool, (SentinelConnectionPool, AsyncSentinelConnectionPool)):
        sentinels = ",".join(
            "{host}:{port}".format_map(sentinel.connection_pool.connection_kwargs)
            for sentinel in pool.sentinel_manager.sentinels
        )
        return f"sentinel:{pool.service_name}@{sentinels}"
    kwargs = pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


def _is_ok(reply: Any) -> bool:
    """Whether a script reply says the script did what it was asked: an issuing script's fast
    answer (one integer), its ok reply (one string, see ``ok_reply`` in ``common.lua``) or a table
    ``{0, …}``. Values must never be handed out from a reply this misses: it decides whether a
    missing ``WAIT`` acknowledgement drops them."""
    if type(reply) is int or isinstance(reply, (bytes, str)):
        return True
    return isinstance(reply, list) and bool(reply) and reply[0] == 0


def _hash_tag(key: Any) -> str | None:
    """The namespace a key belongs to: its Redis Cluster hash tag (``prefix:{namespace}:…``)."""
    text = key.decode() if isinstance(key, bytes) else str(key)
    start = text.find("{")
    end = text.find("}", start + 1)
    return text[start + 1 : end] if 0 <= start < end else None


class RedisClock:
    """How far the Redis clock the scripts of a set of nodes see is moved from Redis ``TIME``.

    Always 0 in production. A test moves it ([`sa_redis_ids.testing.shift_time`][sa_redis_ids.testing.shift_time]) to cross
    midnight or step the clock back without touching the server: scripts then run in a variant
    whose time function adds `shift_ms`, and Python code that predicts Redis time (day
    windows, buffer deadlines) reads `monotonic`.
    """

    __slots__ = ("shift_ms",)

    def __init__(self) -> None:
        self.shift_ms = 0

    def monotonic(self) -> float:
        """``time.monotonic()`` moved by the shift, in seconds."""
        shift = self.shift_ms
        return time.monotonic() + shift * 0.001 if shift else time.monotonic()


class Node(ForkSafe):
    """One independent Redis deployment (a server, a Sentinel service or a whole cluster) and its
    position in the set.

    ``replicas``/``replica_timeout``: how many replicas must acknowledge each script's write, and how
    long to wait for them. ``durable``/``durable_timeout``: whether each script's write must be in
    the server's append-only file on disk (``WAITAOF``) before its values go out, and how long to
    wait for that. ``strict``: refuse, rather than warn about, an eviction policy that can
    evict the library's keys, or a guarantee the server cannot give (see
    `sa_redis_ids.redis.capabilities`).
    """

    def __init__(
        self,
        client: Any,
        *,
        index: int,
        count: int,
        name: str | None = None,
        replicas: int = 0,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        strict: bool = False,
        clock: RedisClock | None = None,
        durable: bool = False,
        durable_timeout: float = DEFAULT_DURABLE_TIMEOUT,
    ):
        refuse_foreign_client(client)
        self.client = client
        self.plain_tcp = plain_tcp(client)
        """Whether the client connects over plain TCP (see `was_slow`)."""
        self.clock = RedisClock() if clock is None else clock
        """The (test-movable) Redis clock the node's scripts see, shared by a node set."""
        self.index = index
        self.count = count
        self._name = name
        self.down_until = 0.0
        self.replicas, self.replica_timeout = check_replica_options(replicas, replica_timeout)
        if not isinstance(strict, bool):
            raise ConfigError(f"strict must be True or False, not {strict!r}")
        self.strict = strict
        if self.replicas and is_embedded(client):
            raise ConfigError(
                "the embedded Redis has no replicas: replicas must be 0", node="embedded"
            )
        if self.replicas:
            check_wait_fits(client, self.replica_timeout, node=self.name)
        self._wait_ms = wait_milliseconds(self.replica_timeout)
        self.durable, self.durable_timeout = check_durable_options(durable, durable_timeout)
        self._aof_ms = wait_milliseconds(self.durable_timeout)
        if self.durable:
            self._check_durable(client)
        self._scripts: dict[str, Script] = {}
        self._lock = threading.Lock()
        self._checked = False
        self._may_evict = True
        """Whether the eviction check found (or could not rule out) a policy that can evict the
        library's keys; until the check, assumed."""
        self._refusal: str | None = None
        self.capabilities: Capabilities | None = None
        """What the server lets the library rely on, probed at the node's first use (None
        before it)."""
        self.asynchronous = is_async_client(client)
        """Whether the client is a ``redis.asyncio`` one (run by the asyncio driver)."""
        if self.asynchronous and self.replicas and hasattr(client, "get_primaries"):
            raise ConfigError(
                "replicas= needs a sync RedisCluster: an asyncio cluster pipeline cannot carry "
                "WAIT",
                node=self.name,
            )
        waits = bool(self.replicas) or self.durable  # WAIT/WAITAOF go the pipelined way
        self._lane = FastLane(client) if not waits and FastLane.supports(client) else None
        self._loops = PerLoop(
            client,
            name=lambda: self.name,
            lanes=not waits and AsyncLane.supports(client),
        )
        """An asyncio node's client, scripts, fast lane and watch per running event loop
        (`sa_redis_ids.redis.loops`)."""
        self._watch = MasterWatch.of(client)
        """For a Sentinel client: after a failed call, ask the Sentinels whether the master moved
        and close the connections to the old one ([`sa_redis_ids.redis.switchover`][sa_redis_ids.redis.switchover])."""
        self.watch_forks()

    def _check_durable(self, client: Any) -> None:
        """Refuse ``durable=True`` where it cannot be served: the embedded Redis (no append-only
        file), together with ``replicas=N``, an asyncio cluster, a ``durable_timeout`` the
        socket timeout would cut short."""
        if is_embedded(client):
            raise ConfigError(
                "the embedded Redis has no append-only file: durable must be False",
                node="embedded",
            )
        if self.replicas:
            raise ConfigError(
                f"durable=True and replicas={self.replicas} cannot be combined: choose one "
                "(replicas=N covers a failover, durable=True a crash and restart of the server)",
                node=self.name,
            )
        if is_async_client(client) and hasattr(client, "get_primaries"):
            raise ConfigError(
                "durable=True needs a sync RedisCluster: an asyncio cluster pipeline cannot carry "
                "WAITAOF",
                node=self.name,
            )
        check_wait_fits(
            client,
            self.durable_timeout,
            node=self.name,
            option="durable_timeout",
            command="WAITAOF",
        )

    def after_fork_in_child(self) -> None:
        """A forked child renews the node's locks and its client's pool locks: a thread of the
        parent may have held one (a first use probing the server, a connection being made)."""
        self._lock = threading.Lock()
        renew_client_locks(self.client)

    @property
    def name(self) -> str:
        """``host:port/db``, ``unix:path``, ``cluster@host:port``, ``sentinel:service@…`` or
        ``embedded``."""
        if self._name is None:
            self._name = describe_client(self.client)
        return self._name

    def script(self, name: str) -> Script:
        """The registered script ``name`` for this node's client (registered once; see
        `script_source` for names of a user's own scripts)."""
        shift = self.clock.shift_ms
        key = name if not shift else f"{name}@{shift}"
        found = self._scripts.get(key)
        if found is None:
            with self._lock:
                found = self._scripts.get(key)
                if found is None:
                    found = self.client.register_script(script_source(name, shift))
                    self._scripts[key] = found
        return found

    def run(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run script ``lua/<name>.lua`` on this node and return its raw reply.

        Every script call of the library goes through here, so how a call reaches the node (and
        what it waits for after the write) is decided in one place. With ``replicas=0`` it is
        redis-py's ``Script`` call; otherwise the script and ``WAIT`` share one round trip, and an ok
        reply that fewer than ``replicas`` replicas acknowledged raises
        [`ReplicasNotAcknowledged`][sa_redis_ids.ReplicasNotAcknowledged] (its values are never
        handed out). On a Sentinel client a failure that may mean a switch-over asks the Sentinels
        where the master is now. A refusal of the server (a permission, the password, TLS)
        raises [`ConfigError`][sa_redis_ids.ConfigError] naming what to grant or fix
        (`sa_redis_ids.redis.refusals`).
        """
        watch = self._watch
        try:
            if watch is None:
                return self._reconnecting(self._run, name, keys, args)
            try:
                return self._reconnecting(self._run, name, keys, args)
            except BaseException as exc:
                if master_may_have_moved(exc):
                    watch.recheck()
                raise
        except REFUSABLE as exc:
            refusal = self._refusal_of(exc, name, keys)
            if refusal is None:
                raise
            raise refusal from exc

    def _refusal_of(self, exc: BaseException, name: str, keys: Sequence[Any]) -> ConfigError | None:
        """The `ConfigError` that ``exc``, raised by script ``name``'s call, stands for."""
        key = keys[0] if keys else None
        return refusal_of(
            exc,
            script=name,
            source=script_source(name, self.clock.shift_ms),
            key=key,
            namespace=None if key is None else _hash_tag(key),
            node=self.name,
        )

    def _run(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        if not self._checked:
            self.first_use(_hash_tag(keys[0]) if keys else None)
        script = self.script(name)
        lane = self._lane  # None with replicas: their WAIT goes the pipelined way below
        if lane is not None:
            return lane.call(script, keys, args)
        if self.durable:
            reply, fsynced = run_durable(self.client, script, keys, args, timeout_ms=self._aof_ms)
            return self._persisted(reply, fsynced, keys)
        if not self.replicas:
            return script(keys=keys, args=args)
        watch = self._watch
        if watch is not None:
            if watch.expired():
                watch.judge()  # its time ran out: still a master without a replica?
            identity = watch.without_wait()
            if identity is not None:
                reply, info = run_with_role(self.client, script, keys, args)
                return self._as_successor(watch, identity, reply, info, keys)
        reply, acknowledged = run_acknowledged(
            self.client,
            script,
            keys,
            args,
            replicas=self.replicas,
            timeout_ms=self._wait_ms,
        )
        if watch is not None and acknowledged < self.replicas and watch.successor_due():
            watch.judge()  # a master without a replica to wait for? (this reply is dropped)
        return self._acknowledged(reply, acknowledged, keys)

    @property
    def transactions(self) -> bool:
        """Whether `transact` can run here: a fast lane (a real server, without ``replicas``)
        and an eviction policy that cannot evict the library's keys (a transaction could
        recreate an evicted key before a script judges it)."""
        lanes = self._loops.lanes if self.asynchronous else self._lane is not None
        return lanes and not self._may_evict

    def transact(self, key: Any, commands: Commands) -> list[Any] | None:
        """Run ``commands`` (keys of ``key``'s namespace) between ``MULTI`` and ``EXEC`` in one
        round trip on the fast lane: ``EXEC``'s replies, or None when they did not run so, or
        not whole (no lane, no script with ``key`` first answered on the connection yet, a
        connection problem, an error reply; see `FastLane.transact`): the caller then calls its
        script, which reports any error."""
        lane = self._lane
        if lane is None or self._may_evict:  # (assumed until the first script call's check)
            return None
        watch = self._watch
        if watch is None:
            return lane.transact(key, commands)
        try:
            return lane.transact(key, commands)
        except BaseException as exc:
            if master_may_have_moved(exc):
                watch.recheck()
            raise

    async def transact_async(self, key: Any, commands: Commands) -> list[Any] | None:
        """`transact` on a ``redis.asyncio`` client (the running event loop's)."""
        on = self._loops.here()
        lane = on.lane
        if lane is None or self._may_evict:
            return None
        watch = on.watch
        if watch is None:
            return await lane.transact(key, commands)
        try:
            return await lane.transact(key, commands)
        except BaseException as exc:
            if master_may_have_moved(exc):
                await watch.recheck_async()
            raise

    async def run_async(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """`run` on a ``redis.asyncio`` client: the running event loop's (see
        `sa_redis_ids.redis.loops`)."""
        on = self._loops.here()
        watch = on.watch
        try:
            if watch is None:
                return await self._reconnecting_async(on, self._run_async, on, name, keys, args)
            try:
                return await self._reconnecting_async(on, self._run_async, on, name, keys, args)
            except BaseException as exc:
                if master_may_have_moved(exc):
                    await watch.recheck_async()
                raise
        except REFUSABLE as exc:
            refusal = self._refusal_of(exc, name, keys)
            if refusal is None:
                raise
            raise refusal from exc

    async def _run_async(
        self, on: OnLoop, name: str, keys: Sequence[Any], args: Sequence[Any]
    ) -> Any:
        if not on.ready:
            await self.first_use_async(_hash_tag(keys[0]) if keys else None)
        script = on.script(name, self.clock.shift_ms)
        lane = on.lane  # None with replicas, as for the sync lane
        if lane is not None:
            return await lane.call(script, keys, args)
        if script.sha not in on.loaded:
            await self._load_async(on, script)
        if self.durable:
            reply, fsynced = await run_durable_async(
                on.client, script, keys, args, timeout_ms=self._aof_ms
            )
            return self._persisted(reply, fsynced, keys)
        if not self.replicas:
            return await script(keys=keys, args=args)
        watch = on.watch
        if watch is not None:
            if watch.expired():
                await watch.judge_async()
            identity = watch.without_wait()
            if identity is not None:
                reply, info = await run_with_role_async(on.client, script, keys, args)
                return self._as_successor(watch, identity, reply, info, keys)
        reply, acknowledged = await run_acknowledged_async(
            on.client,
            script,
            keys,
            args,
            replicas=self.replicas,
            timeout_ms=self._wait_ms,
        )
        if watch is not None and acknowledged < self.replicas and watch.successor_due():
            await watch.judge_async()
        return self._acknowledged(reply, acknowledged, keys)

    def _as_successor(
        self, watch: MasterWatch, identity: str, reply: Any, info: dict[str, Any], keys: Any
    ) -> Any:
        """``reply`` of a call without ``WAIT``, if the server that ran it is the master found
        without a replica (``identity``, its replication ID) and still has none. From another
        server (a connection still open to the old master) the values are dropped; so are they
        when a replica connected meanwhile (it may not have the write, and could be promoted
        without it), and the next calls go back to ``WAIT``."""
        if info.get("role") != "master" or info.get("master_replid") != identity:
            why = "the write ran on a server other than the master the Sentinels name"
        elif int(info.get("connected_slaves", 0)):
            watch.stop_without_wait()  # a replica connected: WAIT for it again
            why = "a replica connected to the master, which did not wait for it to have the write"
        else:
            return reply
        raise ReplicasNotAcknowledged(
            f"{why}; its values are dropped",
            namespace=_hash_tag(keys[0]) if keys else None,
            node=self.name,
            required=self.replicas,
            acknowledged=0,
        )

    async def _load_async(self, on: OnLoop, script: Any) -> None:
        """Load ``script`` once before its first call: redis-py's asyncio cluster client can fail
        when several tasks answer the same ``NOSCRIPT`` at once."""
        async with on.lock():
            if script.sha not in on.loaded:
                await on.client.script_load(script.script)
                on.loaded.add(script.sha)

    async def aclose(self) -> None:
        """Close the running event loop's connections (an asyncio node; the node's own client's
        if no loop used it yet), and forget them: a later call of this loop opens new ones.
        Another loop's connections are left to that loop (see `PerLoop.aclose`)."""
        await self._loops.aclose()

    def command(self, method: str, *args: Any) -> Any:
        """The reply of the client's read command ``method`` (``"get"``, ``"bitcount"`` …) on
        this node, sent once more on a fresh connection if the first one was stale."""
        client = self.client
        return self._reconnecting(lambda: getattr(client, method)(*args))

    async def command_async(self, method: str, *args: Any) -> Any:
        """`command` on a ``redis.asyncio`` client (the running event loop's)."""
        on = self._loops.here()
        return await self._reconnecting_async(on, lambda: getattr(on.client, method)(*args))

    def _reconnecting(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)``; after an error of a stale connection (`is_stale`: the server
        restarted, or closed an idle connection), the client's idle connections are closed and
        the call is made once more, on a new connection. Every call of a node goes through here
        (scripts, transactions fall back to their script, reads), so each reconnects alike."""
        try:
            return call(*args)
        except BaseException as exc:
            if not is_stale(exc):
                raise
        drop_idle_connections(self.client)
        return call(*args)

    async def _reconnecting_async(
        self, on: OnLoop, call: Callable[..., Awaitable[T]], *args: Any
    ) -> T:
        """`_reconnecting` on the running event loop's client."""
        try:
            return await call(*args)
        except BaseException as exc:
            if not is_stale(exc):
                raise
        await drop_idle_connections_async(on.client)
        return await call(*args)

    def _acknowledged(self, reply: Any, acknowledged: int, keys: Sequence[Any]) -> Any:
        """``reply``, unless fewer than ``replicas`` replicas acknowledged its write."""
        if acknowledged < self.replicas and _is_ok(reply):
            raise ReplicasNotAcknowledged(
                f"{acknowledged} of {self.replicas} replicas acknowledged the write within "
                f"{self._wait_ms} ms; its values are dropped",
                namespace=_hash_tag(keys[0]) if keys else None,
                node=self.name,
                required=self.replicas,
                acknowledged=acknowledged,
            )
        return reply

    def _persisted(self, reply: Any, fsynced: int, keys: Sequence[Any]) -> Any:
        """``reply``, unless ``WAITAOF`` found its write not in the append-only file on disk."""
        if fsynced < 1 and _is_ok(reply):
            raise NotDurable(
                f"the server did not confirm within {self._aof_ms} ms that its append-only file "
                "on disk holds the write; its values are dropped",
                namespace=_hash_tag(keys[0]) if keys else None,
                node=self.name,
            )
        return reply

    def first_use(self, namespace: str | None = None) -> None:
        """Probe, once per node, what the server allows (`capabilities`), and check that Redis
        will not evict the library's keys.

        Runs before the node's first script. A policy that can evict, or a guarantee the server
        cannot give (`Capabilities.lost`), logs a warning on the ``sa_redis_ids`` logger, or
        with ``strict=True`` raises [`ConfigError`][sa_redis_ids.ConfigError] now and on every
        later call; so does ``replicas=N`` on a server that refuses ``WAIT``, strict or not. A
        connection error leaves the node unchecked until its next use.
        """
        with self._lock:
            if not self._checked and self._refusal is None:
                self._judge(probe(self.client, self.name))
        if self._refusal is not None:
            raise ConfigError(self._refusal, namespace=namespace, node=self.name)

    async def first_use_async(self, namespace: str | None = None) -> None:
        """`first_use` on a ``redis.asyncio`` client, at each event loop's first call (its
        client is set up there); concurrent first calls of a loop wait for the one that sets
        the client up. The server is probed once, whichever loop comes first."""
        on = self._loops.here()
        async with on.lock():  # one task sets the client up (a cluster's slot map)
            if not on.ready and self._refusal is None:
                initialize = getattr(on.client, "initialize", None)
                if initialize is not None:
                    await initialize()
                if not self._checked:
                    found = await probe_async(on.client, self.name)
                    with self._lock:  # another loop's thread may have judged meanwhile
                        if not self._checked and self._refusal is None:
                            self._judge(found)
                on.ready = self._checked
        if self._refusal is not None:
            raise ConfigError(self._refusal, namespace=namespace, node=self.name)

    def _judge(self, found: Capabilities) -> None:
        """Record what the probe ``found``: refuse (``strict``, or ``replicas`` without
        ``WAIT``), warn, or pass. Transactions (`transact`) need every policy known to be safe:
        a policy not known (neither ``CONFIG GET`` nor ``INFO memory`` answered) counts as one
        that may evict."""
        self.capabilities = found
        risk = risk_of(found.eviction_policies)
        self._may_evict = risk is not None or not found.eviction_known
        if self.durable and not (found.waitaof and found.aof is not False):
            why = (
                f"its append-only file is off: set appendonly yes on Redis node {self.name}"
                if found.waitaof
                else f"Redis node {self.name} refused it "
                f"({found.refused.get('WAITAOF', 'not allowed')}): it needs Redis 7.2+ or "
                "Valkey, and +waitaof in the library's ACL user"
            )
            self._refusal = f"durable=True needs WAITAOF, and {why}"
            return
        if self.replicas and not found.wait:
            self._refusal = (
                f"replicas={self.replicas} needs WAIT, which Redis node {self.name} refused "
                f"({found.refused.get('WAIT', 'not allowed')}): grant +wait to the library's "
                "ACL user"
            )
            return
        problems = [lost.describe(self.name, warning=not self.strict) for lost in found.lost]
        if risk is not None:
            problems.insert(0, risk)
        if problems and self.strict:
            self._refusal = "; and ".join(problems) if len(problems) > 1 else problems[0]
            return
        for problem in problems:
            logger.warning("%s (node=%s)", problem, self.name)
        self._checked = True

    # Residue classes: node ``index`` of ``count`` turns its counter ``c`` (1, 2, 3 …) into the value
    # ``start + (c − 1)·count + index``, so the nodes' values never meet.

    def counter_through(self, start: int, value: int) -> int:
        """How many of this node's values are ``<= value``: the counter of its last such value.

        As a limit, the highest counter that keeps values ``<= value``; as a reseed target, the
        counter after which every value of this node is ``> value``.
        """
        return max(0, (value - start - self.index) // self.count + 1)

    def values(self, start: int, after: int, n: int) -> range:
        """This node's values of counters ``after − n + 1 … after``."""
        first = start + (after - n) * self.count + self.index
        return range(first, first + n * self.count, self.count)

    def claim(self, config: str) -> str:
        """The claim this node records for a namespace: its index, the node count and the config."""
        return f"{self.index}/{self.count}|{config}"

    def __repr__(self) -> str:
        return f"Node({self.name!r}, index={self.index}, count={self.count})"


class NodeSet(ForkSafe):
    """The nodes of a [`RedisIds`][sa_redis_ids.RedisIds], with round-robin rotation and failover."""

    def __init__(
        self,
        clients: Sequence[Any],
        *,
        names: Sequence[str] | None = None,
        retry_after: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        replicas: int = 0,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        strict: bool = False,
        durable: bool = False,
        durable_timeout: float = DEFAULT_DURABLE_TIMEOUT,
    ):
        if not clients:
            raise ValueError("at least one Redis client is needed")
        count = len(clients)
        self.clock = RedisClock()
        """The Redis clock every node of the set shows its scripts (moved by tests only)."""
        self.nodes = [
            Node(
                client,
                index=i,
                count=count,
                name=names[i] if names else None,
                replicas=replicas,
                replica_timeout=replica_timeout,
                strict=strict,
                clock=self.clock,
                durable=durable,
                durable_timeout=durable_timeout,
            )
            for i, client in enumerate(clients)
        ]
        if len({node.asynchronous for node in self.nodes}) > 1:
            raise ConfigError("the Redis clients mix redis.asyncio and sync ones; use one kind")
        self.retry_after = retry_after
        timeouts = [socket_timeout_of(node.client) for node in self.nodes]
        known = [timeout for timeout in timeouts if timeout is not None]
        self.call_timeout: float | None = max(known) if known else None
        """The longest socket timeout of the clients (None when no client has one): a call's
        deadline is `CALL_DEADLINE_TIMEOUTS` of them."""
        self._clock = clock
        self._turn = itertools.count()
        self._transitions = threading.Lock()
        self._down_since: dict[int, float] = {}
        self.observer: Observer | None = None
        """Where calls and node errors are reported when metrics are enabled (see
        `sa_redis_ids.metrics`); None (the default) costs one check per call."""
        self.watch_forks()

    def after_fork_in_child(self) -> None:
        self._transitions = threading.Lock()

    @property
    def call_deadline(self) -> float:
        """Seconds one call may spend on nodes (`CALL_DEADLINE_TIMEOUTS` times `call_timeout`;
        ``inf`` without a socket timeout): past it no further node is tried, nor a node whose
        reply timed out tried again, and the call raises."""
        timeout = self.call_timeout
        return math.inf if timeout is None else CALL_DEADLINE_TIMEOUTS * timeout

    def __len__(self) -> int:
        return len(self.nodes)

    def call(self, namespace: str, action: Callable[[Node], T]) -> T:
        """`call_plan` of a sync ``action`` (admin work: claims, reseeding, statistics)."""
        return run_plan(self.call_plan(namespace, lambda node: now(action, node)))

    def call_plan(self, namespace: str, action: Callable[[Node], Plan[T]]) -> Plan[T]:
        """Run plan ``action`` on the next node in turn, moving on to the others if it cannot
        answer.

        Nodes marked down are tried only after every healthy node failed. A node whose share is
        used up ([`SequenceExhausted`][sa_redis_ids.SequenceExhausted]: capacity is over all nodes, and calls of uneven sizes
        drain the nodes unevenly) hands the call on too; the call raises ``SequenceExhausted`` only
        when every node said so. Other errors (a script status, a wrong key type) propagate at once.

        One call spends about `call_deadline` (two `call_timeout`) at most waiting on nodes: a
        node whose reply timed out is tried again (the one node there is, included) while time
        is left, and once it is spent no further node is tried, so nodes that all hang cost two
        socket timeouts, not one each, while one slow reply or one hung node that is not yet
        known down never fails a call another try can answer. When every node failed only for
        want of replica acknowledgements, the error raised is
        [`ReplicasNotAcknowledged`][sa_redis_ids.ReplicasNotAcknowledged]. The error of the last
        node tried is the ``__cause__``.
        """
        nodes = self.nodes
        start = next(self._turn) % len(nodes) if len(nodes) > 1 else 0
        first = nodes[start]
        now = self._clock()
        if first.down_until == 0.0:  # the node in turn answered last time: no bookkeeping
            try:
                return (yield from self.on_plan(first, namespace, action))
            except (RedisUnavailable, SequenceExhausted) as exc:
                if len(nodes) == 1 and isinstance(exc, SequenceExhausted):
                    raise
                failure: BaseException | None = exc
        else:
            failure = None
        return (yield from self._call_others(namespace, action, start, now, failure))

    def _call_others(
        self,
        namespace: str,
        action: Callable[[Node], Plan[T]],
        start: int,
        now: float,
        failure: BaseException | None,
    ) -> Plan[T]:
        """`call_plan` after the node in turn failed with ``failure`` (or was down).

        Each node is tried once, the healthy ones first. Then, while the call's deadline (see
        `call_deadline`) allows, the nodes whose reply timed out are tried again, the one node
        there is included: a slow reply (a loaded server or host) is not a dead node. A call that
        timed out can be sent again safely: if it ran and only its reply was lost, what it took
        (a counter's values, a snowflake's milliseconds, a pool's bits) is a gap, never handed
        out by another call."""
        order = self.nodes[start:] + self.nodes[:start]
        deadline = None if self.call_timeout is None else now + self.call_deadline
        errors: dict[str, BaseException] = {}
        """Each node tried, by name, with its last error."""
        labels: dict[int, str] = {}
        failed: list[BaseException] = []
        slow: list[Node] = []
        """The nodes whose last try timed out (tried again within the deadline)."""

        def record(node: Node, error: BaseException) -> None:
            failed.append(error)
            label = labels.get(node.index)
            if label is None:
                label = node.name if node.name not in errors else f"{node.name}#{node.index}"
                labels[node.index] = label
            errors[label] = error
            if was_slow(node, error):
                if node not in slow:
                    slow.append(node)
            elif node in slow:
                slow.remove(node)

        if failure is not None:
            record(
                order.pop(0),
                failure.__cause__ or failure if isinstance(failure, RedisUnavailable) else failure,
            )
        healthy = [node for node in order if node.down_until <= now]
        resting = [node for node in order if node.down_until > now]
        tries = healthy + resting
        while True:
            for node in tries:
                waited = any(not isinstance(e, SequenceExhausted) for e in failed)
                if waited and deadline is not None and self._clock() >= deadline:
                    break
                try:
                    return (yield from self.on_plan(node, namespace, action))
                except RedisUnavailable as exc:
                    record(node, exc.__cause__ or exc)
                except SequenceExhausted as exc:
                    if len(self.nodes) == 1:
                        raise
                    record(node, exc)
            if not slow or deadline is None or self._clock() >= deadline:
                break
            tries = list(slow)  # again, while the deadline allows
        last = failed[-1]
        exhausted = [e for e in failed if isinstance(e, SequenceExhausted)]
        if exhausted:  # every node that answered is used up (the others cannot answer now)
            down = len(self.nodes) - len(exhausted)
            raise SequenceExhausted(
                f"every node's share is used up ({exhausted[-1]})"
                if not down
                else f"the share of every node that answered is used up ({exhausted[-1]}); "
                f"{down} node(s) could not answer",
                namespace=namespace,
            ) from exhausted[-1]
        if all(is_pool_limit(e) for e in failed):
            raise ConnectionPoolFull(
                "every connection of the clients' pools was in use (their max_connections)",
                namespace=namespace,
                errors=errors,
            ) from last
        unacknowledged = [e for e in failed if isinstance(e, ReplicasNotAcknowledged)]
        if len(unacknowledged) == len(failed):
            raise ReplicasNotAcknowledged(
                "no Redis node had its write acknowledged by enough replicas",
                namespace=namespace,
                errors=errors,
                required=unacknowledged[0].required,
                acknowledged=max(e.acknowledged for e in unacknowledged),
            ) from last
        if all(isinstance(e, NotDurable) for e in failed):
            raise NotDurable(
                "no Redis node confirmed the write in its append-only file on disk",
                namespace=namespace,
                errors=errors,
            ) from last
        message = "no Redis node could answer"
        if deadline is not None:
            untried = len(self.nodes) - len(labels)
            if untried > 0:
                message += f" within {deadline - now:g} s ({untried} not tried)"
            elif len(failed) > len(labels):
                message += (
                    f" within the call's deadline of {deadline - now:g} s ({len(failed)} tries, "
                    "the ones that timed out tried again)"
                )
        raise RedisUnavailable(message, namespace=namespace, errors=errors) from last

    def on(self, node: Node, namespace: str, action: Callable[[Node], T]) -> T:
        """`on_plan` of a sync ``action``."""
        return run_plan(self.on_plan(node, namespace, lambda node: now(action, node)))

    def on_plan(self, node: Node, namespace: str, action: Callable[[Node], Plan[T]]) -> Plan[T]:
        """Run plan ``action`` on one given node, translating redis-py errors to the library's.

        Connection failures and the answers of a node in the middle of a failover become
        [`RedisUnavailable`][sa_redis_ids.RedisUnavailable] and mark the node down for ``retry_after`` seconds.
        A refusal (a permission, the password, TLS) is a [`ConfigError`][sa_redis_ids.ConfigError]
        instead: the node is not marked down, and no other node is tried.
        """
        try:
            result = yield from action(node)
        except ReplicasNotAcknowledged as exc:
            self._mark_down(node, exc)
            raise
        except SaRedisIdsError:
            raise
        except NODE_DOWN_ERRORS as exc:
            refusal = refusal_of(exc, namespace=namespace, node=node.name)
            if refusal is not None:  # a wrong password, a TLS certificate: not an outage
                raise refusal from exc
            if is_pool_limit(exc):  # a local limit: the node is fine
                raise ConnectionPoolFull(
                    f"every connection of the client's pool is in use: {exc}",
                    namespace=namespace,
                    node=node.name,
                ) from exc
            raise self._unavailable(node, namespace, exc) from exc
        except redis.ResponseError as exc:
            if is_unavailable_reply(exc):
                raise self._unavailable(node, namespace, exc) from exc
            refusal = refusal_of(exc, namespace=namespace, node=node.name)
            if refusal is not None:  # NOPERM: a command or key the ACL user lacks
                raise refusal from exc
            if DB_OUT_OF_RANGE in str(exc):
                raise ConfigError(
                    f"the database index of the Redis URL is more than the server has ({exc}): "
                    "use a db from 0 to the server's 'databases' setting minus 1",
                    namespace=namespace,
                    node=node.name,
                ) from exc
            if "overflow" in str(exc):
                raise SequenceExhausted(
                    "counter would pass a signed 64-bit integer",
                    namespace=namespace,
                    node=node.name,
                ) from exc
            raise ScriptError(f"Redis refused: {exc}", namespace=namespace, node=node.name) from exc
        if node.down_until:
            self._came_back(node)
        return result

    def _unavailable(self, node: Node, namespace: str, exc: BaseException) -> RedisUnavailable:
        self._mark_down(node, exc)
        return RedisUnavailable(
            f"Redis node is unavailable: {type(exc).__name__}: {exc}",
            namespace=namespace,
            node=node.name,
        )

    def _mark_down(self, node: Node, exc: BaseException) -> None:
        """Skip ``node`` for ``retry_after`` seconds; log the transition if it was up."""
        with self._transitions:
            was_up = node.down_until == 0.0
            node.down_until = self._clock() + self.retry_after
            if was_up:
                self._down_since[node.index] = time.monotonic()
        if was_up:
            node_log.warning(
                "Redis node %s is down (%s: %s); %s",
                node.name,
                type(exc).__name__,
                exc,
                self._what_now(node, exc),
            )
        observer = self.observer
        if observer is not None:
            observer.node_error(node.name, type(exc).__name__)

    def _what_now(self, node: Node, exc: BaseException) -> str:
        """What calls do while a node is down, with the nodes configured (for the log)."""
        again = (
            f"; a call whose reply timed out tries it again within its deadline of "
            f"{self.call_deadline:g} s"
            if was_slow(node, exc) and self.call_timeout is not None
            else ""
        )
        others = len(self.nodes) - 1
        if not others:
            return f"it is the only node: every call still tries it{again}"
        nodes = "node" if others == 1 else f"{others} nodes"
        return (
            f"calls go to the other {nodes} and try it only when they fail, until "
            f"{self.retry_after:g} s have passed{again}"
        )

    def _came_back(self, node: Node) -> None:
        """``node`` answered after it was marked down: take it back into the rotation."""
        with self._transitions:
            if not node.down_until:
                return  # another thread saw it answer first
            node.down_until = 0.0
            since = self._down_since.pop(node.index, None)
        node_log.info(
            "Redis node %s answers again%s",
            node.name,
            "" if since is None else f" after {time.monotonic() - since:.1f} s",
        )

    def each(self, namespace: str, action: Callable[[Node], T]) -> list[T]:
        """Run ``action`` on every node (maintenance, stats); raise if any node fails."""
        return [self.on(node, namespace, action) for node in self.nodes]

    def each_plan(self, namespace: str, action: Callable[[Node], Plan[T]]) -> Plan[list[T]]:
        """`each` of plan ``action``."""
        results = []
        for node in self.nodes:
            results.append((yield from self.on_plan(node, namespace, action)))
        return results

    @property
    def asynchronous(self) -> bool:
        """Whether the nodes' clients are ``redis.asyncio`` ones."""
        return self.nodes[0].asynchronous
