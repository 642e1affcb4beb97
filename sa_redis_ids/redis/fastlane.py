"""The fast path of a script call: ``EVALSHA`` on a connection each thread keeps.

redis-py's general call path checks a connection out of the pool and back in on every command,
polling the socket for stray data each time, and its ``Script`` wrapper adds a layer of its own;
together they cost about as much as the server's work. A `FastLane` keeps one connection
per thread and pool (a plain client's pool, or a cluster node's; every lane of the process
together within a share of the pool, `SHARES`) and sends ``EVALSHA`` on it directly, so a
script call costs little more than a ``PING``.

It stays correct where the general path is: a forked child never uses its parent's connection;
``NOSCRIPT`` loads the script and retries once; on any connection trouble, a ``MOVED``/``ASK``
redirect or a cluster that is not ready, the held connection is dropped and the call goes the
general way (a timeout drops the connection and is raised) (with redis-py's own retries and redirect handling), so reconnects, failovers and
cluster resharding behave exactly as without the fast path. A connection goes back to its pool
when its thread ends.

A lane also runs a short transaction (``MULTI`` … ``EXEC``, `FastLane.transact`) in one round
trip: a generator's sound call needs no script (see `sa_redis_ids.generators.sequence`), and a
transaction costs the server about a third of a script call. A transaction goes out only on a
connection where a script on the same first key has answered since the connection opened: a
transaction writes without judging what it finds, so after a restart (a new connection) each
process's first call of a namespace is its script, which judges the state atomically, before any
of its transactions writes.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import inspect
import os
import threading
import weakref
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import AskError, ClusterDownError, NoScriptError, TryAgainError

from sa_redis_ids.redis.plans import Commands

#: Errors after which the held connection is dropped and the call retried the general way (a
#: timeout is not among them: the server was reached and did not answer in time, and waiting a
#: second time would double what a call spends on a hung node).
FALLBACK_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    ConnectionResetError,
    BrokenPipeError,
    AskError,  # includes MovedError
    TryAgainError,
    ClusterDownError,
)


@functools.cache
def _names_command(pool_type: Any) -> bool:
    """Whether ``pool_type.get_connection`` requires a command name: redis-py before 5.3 (sync and
    asyncio pools alike) does; later releases take none and warn when given one."""
    parameter = inspect.signature(pool_type.get_connection).parameters.get("command_name")
    return parameter is not None and parameter.default is inspect.Parameter.empty


def checkout(pool: Any) -> Any:
    """A connection of ``pool`` (sync), or for an asyncio pool the awaitable of one, called the
    way the installed redis-py wants it."""
    pool_type: Any = type(pool)
    if _names_command(pool_type):
        return pool.get_connection("EVALSHA")
    return pool.get_connection()


_BULK: dict[str, bytes] = {}
"""Text parts already packed as bulk strings in UTF-8 (keys, claims, labels recur on every call);
emptied when it reaches `_BULK_MOST` entries (changing parts such as guards pass through too)."""
_BULK_MOST = 4096


def pack(encoder: Any, *parts: Any) -> bytes:
    """One command in the Redis protocol, as redis-py would send it for these argument types
    (``bytes``, ``str`` in the client's encoding, ``int``; anything else through redis-py's own
    encoder), without redis-py's general-purpose packing. Text parts are packed once (`_BULK`)
    where the client encodes text as UTF-8, as redis-py does by default."""
    encoding, errors = encoder.encoding, encoder.encoding_errors
    cache = _BULK if encoding in ("utf-8", "utf8") and errors == "strict" else None
    out = [b"*%d\r\n" % len(parts)]
    append = out.append
    for part in parts:
        kind = type(part)
        if kind is str:
            found = None if cache is None else cache.get(part)
            if found is None:
                data = part.encode(encoding, errors)
                found = b"$%d\r\n%s\r\n" % (len(data), data)
                if cache is not None:
                    if len(cache) >= _BULK_MOST:
                        cache.clear()
                    cache[part] = found
            append(found)
            continue
        if kind is bytes:
            data = part
        elif kind is int:
            data = b"%d" % part
        else:
            data = encoder.encode(part)
        append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


MULTI = b"*1\r\n$5\r\nMULTI\r\n"
EXEC = b"*1\r\n$4\r\nEXEC\r\n"


class Transactions:
    """Transactions packed for one lane, each once: a generator sends the same few again and
    again (its ``MGET`` and ``INCRBY`` of one value). Bounded: past `MOST` packed, the oldest
    half is forgotten."""

    MOST = 64

    def __init__(self) -> None:
        self._packed: dict[Commands, bytes] = {}

    def packed(self, encoder: Any, commands: Commands) -> bytes:
        """``MULTI``, ``commands`` and ``EXEC`` as one write."""
        found = self._packed.get(commands)
        if found is None:
            found = b"".join([MULTI, *(pack(encoder, *command) for command in commands), EXEC])
            if len(self._packed) >= self.MOST:
                for old in list(self._packed)[: self.MOST // 2]:
                    self._packed.pop(old, None)  # another thread may trim at once
            self._packed[commands] = found
        return found


def replies_or_errors(count: int, read: Any) -> list[Any]:
    """``count`` replies of ``read()``, an error reply as its exception (the connection stays in
    step: each error reply is read whole)."""
    replies: list[Any] = []
    for _ in range(count):
        try:
            replies.append(read())
        except redis.ResponseError as error:  # a redirect, a refused write, a command's error
            replies.append(error)
    return replies


def executed(replies: list[Any]) -> list[Any] | None:
    """``EXEC``'s replies (the last of ``replies``), or None when the transaction did not run
    whole: an error reply to ``MULTI``, to a queued command (``EXEC`` then aborts), to ``EXEC``,
    or inside ``EXEC``'s reply."""
    result = replies[-1]
    if not isinstance(result, list):
        return None
    for reply in result:
        if isinstance(reply, BaseException):
            return None
    return result


def lane_share(pool: Any) -> int:
    """How many connections of ``pool`` a lane may keep: half of its ``max_connections`` (at most
    32), so the application's own commands on the same client always find connections; none for a
    ``BlockingConnectionPool``, whose callers wait for connections rather than fail."""
    if "Blocking" in type(pool).__name__:
        return 0
    most = getattr(pool, "max_connections", None)
    if not isinstance(most, int):
        return 32
    return max(0, min(32, most // 2))


class PoolShares:
    """How many connections of each pool the lanes hold, counted over every lane of the process.

    A lane belongs to one node of one ``RedisIds``, and several of them may share a client (two
    ``RedisIds`` on one connection pool, a cluster's node pools): counted per lane, each could
    keep `lane_share` of the pool and together leave the application's own commands none. A
    forked child starts from zero (it holds none of its parent's connections).
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()  # re-entered by a held connection freed during a take
        self._held: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def take(self, pool: Any) -> bool:
        """Count one more connection of ``pool`` held by a lane, if within its share."""
        with self._lock:
            holding = self._held.get(pool, 0)
            if holding >= lane_share(pool):
                return False
            self._held[pool] = holding + 1
            return True

    def give_back(self, pool: Any) -> None:
        """Count one connection of ``pool`` fewer held by a lane."""
        with self._lock:
            holding = self._held.get(pool, 0)
            if holding > 0:
                self._held[pool] = holding - 1

    def _forked(self) -> None:
        self._lock = threading.RLock()  # one held by another thread at the fork stays held
        self._held = weakref.WeakKeyDictionary()


SHARES = PoolShares()
"""The connections every lane of the process holds, per pool."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SHARES._forked)


class _Held:
    """A connection one thread holds; given back to its pool when the thread ends."""

    __slots__ = ("connection", "judged", "pid", "pool", "socket")

    def __init__(self, pool: Any, connection: Any):
        self.pool = pool
        self.connection = connection
        self.pid = os.getpid()
        self.judged: set[Any] = set()
        """First keys of the scripts that answered on this connection (see `FastLane.transact`)."""
        self.socket: Any = None
        """The socket those scripts answered on: redis-py reconnects a closed connection at its
        next command (after ``pool.disconnect()``, say), and a new socket has judged nothing."""

    def judged_now(self) -> set[Any]:
        """`judged`, emptied first if the connection's socket is not the one it was kept for."""
        socket = getattr(self.connection, "_sock", None)
        if socket is not self.socket:
            self.judged = set()
            self.socket = socket
        return self.judged

    def drop(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None and self.pid == os.getpid():
            try:
                connection.disconnect()
                self.pool.release(connection)
            finally:
                SHARES.give_back(self.pool)

    def __del__(self) -> None:  # the thread ended
        connection, self.connection = self.connection, None
        if connection is not None and self.pid == os.getpid():
            if not isinstance(getattr(self.pool, "_lock", None), _RLOCK):
                # older redis-py (5.0) guards its pool with a plain lock, which this very thread
                # may hold right now (a collection run inside the pool's make_connection): give
                # the connection back at the next lane checkout instead of deadlocking here
                _ORPHANS.append((self.pool, connection))
                return
            with contextlib.suppress(Exception):  # interpreter shutdown
                self.pool.release(connection)
                SHARES.give_back(self.pool)


_RLOCK = type(threading.RLock())

_ORPHANS: collections.deque[tuple[Any, Any]] = collections.deque()
"""Connections of ended threads waiting to go back to a pool that may not be entered from a
finalizer (see `_Held.__del__`); `_release_orphans` gives them back."""

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ORPHANS.clear)  # the parent's connections


def _release_orphans() -> None:
    """Give the connections in `_ORPHANS` back to their pools (outside any pool lock)."""
    while _ORPHANS:
        try:
            pool, connection = _ORPHANS.popleft()
        except IndexError:  # another thread took the last one
            return
        try:
            with contextlib.suppress(Exception):
                pool.release(connection)
        finally:
            SHARES.give_back(pool)


class FastLane:
    """Per-thread ``EVALSHA`` for one client: a plain ``redis.Redis`` or a ``RedisCluster``."""

    def __init__(self, client: Any):
        self.client = client
        self.cluster = isinstance(client, RedisCluster)
        self._local = threading.local()
        self._transactions = Transactions()

    @staticmethod
    def supports(client: Any) -> bool:
        """Whether ``client`` can take the fast path (sync redis-py clients of real servers)."""
        if client.__class__.__module__.startswith("fakeredis"):
            return False
        return isinstance(client, (redis.Redis, RedisCluster))

    def _pool(self, key: Any) -> Any:
        if self.cluster:
            node = self.client.get_node_from_key(key)
            return node.redis_connection.connection_pool
        return self.client.connection_pool

    def _held(self, pool: Any) -> _Held | None:
        """This thread's connection of ``pool``, or None when the lanes hold their share of the
        pool already (`SHARES`; the call then goes the general way)."""
        held: dict[int, _Held] | None = getattr(self._local, "held", None)
        if held is None:
            held = self._local.held = {}
        found = held.get(id(pool))
        if found is not None and found.connection is not None and found.pid == os.getpid():
            return found
        if _ORPHANS:
            _release_orphans()
        if not SHARES.take(pool):
            return None
        try:
            connection = checkout(pool)
        except BaseException:
            SHARES.give_back(pool)
            raise
        found = held[id(pool)] = _Held(pool, connection)
        return found

    def call(self, script: Script, keys: Any, args: Any) -> Any:
        """Run ``script`` with ``keys`` and ``args``; the reply as redis-py would return it."""
        key = keys[0] if keys else None
        try:
            held = self._held(self._pool(key))
        except FALLBACK_ERRORS:
            return script(keys=keys, args=args)
        if held is None:
            return script(keys=keys, args=args)
        connection = held.connection
        try:
            packed = pack(connection.encoder, b"EVALSHA", script.sha, len(keys), *keys, *args)
            try:
                connection.send_packed_command([packed], check_health=False)
                reply = connection.read_response()
            except NoScriptError:
                connection.send_command("SCRIPT", "LOAD", script.script)
                connection.read_response()
                connection.send_packed_command([packed], check_health=False)
                reply = connection.read_response()
            if key is not None:
                held.judged_now().add(key)
            return reply
        except FALLBACK_ERRORS:
            held.drop()
            return script(keys=keys, args=args)
        except redis.ResponseError:
            raise  # an error reply leaves the connection in step
        except BaseException:
            held.drop()  # interrupted mid-reply: the connection is out of step
            raise

    def transact(self, key: Any, commands: Commands) -> list[Any] | None:
        """Run ``commands`` (their keys in ``key``'s slot) as one transaction in one round trip:
        ``EXEC``'s replies; or None when they could not run so (no connection within the lanes'
        share, a connection problem: the connection is dropped), or did not run whole (an error
        reply, a redirect), or no script with ``key`` first has answered on this thread's
        connection yet (nothing is sent then). After None the commands may have run: the caller
        goes the script way. A timeout drops the connection and is raised."""
        try:
            held = self._held(self._pool(key))
        except FALLBACK_ERRORS:
            return None
        if held is None or key not in held.judged_now():
            return None
        connection = held.connection
        try:
            packed = self._transactions.packed(connection.encoder, commands)
            connection.send_packed_command([packed], check_health=False)
            replies = replies_or_errors(len(commands) + 2, connection.read_response)
        except FALLBACK_ERRORS:
            held.drop()
            return None
        except BaseException:
            held.drop()  # interrupted mid-reply: the connection is out of step
            raise
        return executed(replies)


class AsyncLane:
    """The fast path of a script call on a ``redis.asyncio.Redis``: ``EVALSHA`` packed here and
    sent on a connection the lane keeps, without redis-py's per-command layers (retries, hooks,
    the ``Script`` wrapper, the pool's lock and stray-data check on every checkout).

    Per event loop the lanes together keep up to their share of the pool (`lane_share`, counted
    in `SHARES`) of the connections they finished with, in step, for its next calls; the others go back to the pool at
    once; a forked child keeps none of its parent's. A connection that broke, or whose reply a
    cancellation cut off, is closed and handed back to the pool; a broken connection or a redirect
    retries the call the general way (redis-py's own reconnection), a timeout is raised.

    A ``redis.asyncio`` client (its pool, its connections) serves one event loop at a time, and so
    does the lane. Connections the lane kept for a loop that has since closed are closed and
    handed back when another loop first calls.
    """

    def __init__(self, client: Any):
        self.client = client
        self.pool = client.connection_pool
        self._kept: dict[Any, list[Any]] = {}
        """Connections kept per event loop."""
        self._pid = os.getpid()
        self._transactions = Transactions()
        self._judged: weakref.WeakKeyDictionary[Any, tuple[Any, set[Any]]] = (
            weakref.WeakKeyDictionary()
        )
        """First keys of the scripts that answered on each connection while the lane held it
        (forgotten when it goes back to the pool: see `FastLane.transact`)."""

    @staticmethod
    def supports(client: Any) -> bool:
        """Whether ``client`` can take the asyncio fast path (a plain ``redis.asyncio.Redis`` of a
        real server; a cluster and the embedded Redis go the general way)."""
        from redis.asyncio import Redis as AsyncRedis

        if client.__class__.__module__.startswith("fakeredis"):
            return False
        return isinstance(client, AsyncRedis)

    async def _connection(self) -> tuple[Any, list[Any]]:
        """A connection kept for this event loop, or a new one from the pool; and the loop's list
        of kept connections."""
        if self._pid != os.getpid():  # a forked child: the kept connections are its parent's
            self._kept = {}
            self._judged = weakref.WeakKeyDictionary()
            self._pid = os.getpid()
        loop = asyncio.get_running_loop()
        kept = self._kept.get(loop)
        if kept is None:
            await self._release_closed()
            kept = self._kept.setdefault(loop, [])
        if kept:
            SHARES.give_back(self.pool)
            return kept.pop(), kept
        return await checkout(self.pool), kept

    async def _release_closed(self) -> None:
        """Close and hand back the connections kept for event loops that have closed."""
        for loop in [loop for loop in list(self._kept) if loop.is_closed()]:
            await self._close_kept(self._kept.pop(loop, []))

    async def let_go(self) -> None:
        """Close and hand back the connections kept for the running event loop (its client is
        being closed). The loop's list stays, emptied: a call still running keeps its connection
        there as usual, for the loop's later calls or the sweep of closed loops."""
        kept = self._kept.get(asyncio.get_running_loop(), [])
        connections = kept[:]
        kept.clear()
        await self._close_kept(connections)

    async def _close_kept(self, connections: list[Any]) -> None:
        """Close kept ``connections`` without waiting for their close to complete (a server that
        hangs cannot hold this up) and hand them back to the pool."""
        for connection in connections:
            SHARES.give_back(self.pool)
            self._judged.pop(connection, None)
            with contextlib.suppress(Exception):  # its transport may have died with its loop
                await connection.disconnect(nowait=True)
            with contextlib.suppress(Exception):
                await self.pool.release(connection)

    async def _keep(self, connection: Any, kept: list[Any]) -> None:
        """Keep an in-step connection for the next call, or hand it back beyond the share."""
        if SHARES.take(self.pool):
            kept.append(connection)
        else:
            self._judged.pop(connection, None)
            await self.pool.release(connection)

    async def _drop(self, connection: Any) -> None:
        """Close a connection that is out of step and hand it back to the pool."""
        self._judged.pop(connection, None)
        try:
            await connection.disconnect()
        finally:
            await self.pool.release(connection)

    async def call(self, script: Any, keys: Any, args: Any) -> Any:
        """Run ``script`` with ``keys`` and ``args``; the reply as redis-py would return it."""
        try:
            connection, kept = await self._connection()
        except FALLBACK_ERRORS:
            return await script(keys=keys, args=args)
        try:
            packed = pack(connection.encoder, b"EVALSHA", script.sha, len(keys), *keys, *args)
            try:
                await connection.send_packed_command([packed], check_health=False)
                reply = await connection.read_response()
            except NoScriptError:
                await connection.send_command("SCRIPT", "LOAD", script.script)
                await connection.read_response()
                await connection.send_packed_command([packed], check_health=False)
                reply = await connection.read_response()
        except FALLBACK_ERRORS:  # before ResponseError: redirects are error replies too
            await self._drop(connection)
            return await script(keys=keys, args=args)
        except redis.ResponseError:
            await self._keep(connection, kept)  # an error reply leaves the connection in step
            raise
        except BaseException:
            await asyncio.shield(self._drop(connection))  # cut off mid-reply: out of step
            raise
        if keys:
            self._judged_now(connection).add(keys[0])
        await self._keep(connection, kept)
        return reply

    def _judged_now(self, connection: Any) -> set[Any]:
        """First keys of the scripts that answered on ``connection``'s current socket (its
        stream writer: redis-py reconnects a closed connection at its next command)."""
        writer = getattr(connection, "_writer", None)
        found = self._judged.get(connection)
        if found is None or found[0] is not writer:
            found = self._judged[connection] = (writer, set())
        return found[1]

    async def transact(self, key: Any, commands: Commands) -> list[Any] | None:
        """`FastLane.transact` on the asyncio client (no cluster here: ``key`` only names the
        script that must have answered on the connection first)."""
        try:
            connection, kept = await self._connection()
        except FALLBACK_ERRORS:
            return None
        if key not in self._judged_now(connection):
            await self._keep(connection, kept)
            return None
        try:
            packed = self._transactions.packed(connection.encoder, commands)
            await connection.send_packed_command([packed], check_health=False)
            replies: list[Any] = []
            for _ in range(len(commands) + 2):
                try:
                    replies.append(await connection.read_response())
                except redis.ResponseError as error:
                    replies.append(error)
        except FALLBACK_ERRORS:
            await self._drop(connection)
            return None
        except BaseException:
            await asyncio.shield(self._drop(connection))  # cut off mid-reply: out of step
            raise
        await self._keep(connection, kept)
        return executed(replies)
