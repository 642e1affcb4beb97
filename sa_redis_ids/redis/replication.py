"""Acknowledged writes: a script and ``WAIT`` (or ``WAITAOF``) in one round trip, so only replicated
(or persisted) values go out.

Redis replicates asynchronously: a master can run a script, answer, and die before any replica
received the write; the replica promoted in its place then issues the same values again. With
``replicas=N`` every script is sent together with ``WAIT N timeout_ms`` in one non-transactional
pipeline on one connection (``WAIT`` counts the replicas that received the writes *of its own
connection*), and the caller hands the values out only when ``N`` replicas acknowledged them.

With ``durable=True`` the script goes with ``WAITAOF 1 0 timeout_ms`` instead: its values are handed
out only once the server's append-only file on disk holds the write, so a crash and a restart from
that file cannot issue them again.

redis-py's ``Script`` is not used inside the pipeline: there it sends ``SCRIPT EXISTS`` before every
execute, a second round trip. The pipeline sends ``EVALSHA`` with the script's digest and, on
``NOSCRIPT``, loads the script and sends it again once.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import AskError, NoScriptError, RedisClusterException

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.redis.connect import socket_timeout_of

#: Seconds ``WAIT`` waits for the replicas by default: below the default socket timeout (1 s), so a
#: missing replica shows as `ReplicasNotAcknowledged`, not as a socket timeout.
DEFAULT_REPLICA_TIMEOUT = 0.5

#: Seconds ``WAITAOF`` waits for the server's fsync by default (``durable=True``), below the default
#: socket timeout for the same reason.
DEFAULT_DURABLE_TIMEOUT = 0.5


MAX_REPLICAS = 1000
"""The most replicas ``replicas=`` may ask to acknowledge (far beyond any real deployment; the
bound keeps ``WAIT``'s argument a number Redis takes)."""


def check_replica_options(replicas: object, replica_timeout: object) -> tuple[int, float]:
    """Validate ``replicas`` (an int from 0 to `MAX_REPLICAS`) and ``replica_timeout``
    (finite seconds > 0)."""
    if (
        isinstance(replicas, bool)
        or not isinstance(replicas, int)
        or not 0 <= replicas <= MAX_REPLICAS
    ):
        raise ConfigError(f"replicas must be an int from 0 to {MAX_REPLICAS}, not {replicas!r}")
    return replicas, _seconds("replica_timeout", replica_timeout)


def _seconds(name: str, value: object) -> float:
    """``value`` as seconds, if a finite number > 0; else a `ConfigError` naming option ``name``."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value <= 0
    ):
        raise ConfigError(f"{name} must be a finite number of seconds > 0, not {value!r}")
    return float(value)


def check_wait_fits(
    client: Any,
    replica_timeout: float,
    *,
    node: str,
    option: str = "replica_timeout",
    command: str = "WAIT",
) -> None:
    """Refuse a ``replica_timeout`` (or another ``option`` for ``command``: ``durable_timeout``
    for ``WAITAOF``) the client's socket timeout would cut short.

    ``WAIT`` answers only after up to ``replica_timeout``; a socket that gives up first turns
    "replicas did not acknowledge" into a connection timeout and a needlessly dropped connection.
    """
    socket_timeout = socket_timeout_of(client)
    if socket_timeout is not None and replica_timeout >= socket_timeout:
        raise ConfigError(
            f"{option} ({replica_timeout:g} s) must be shorter than the client's "
            f"socket_timeout ({socket_timeout:g} s), or the socket gives up before {command} "
            "answers",
            node=node,
        )


def wait_milliseconds(replica_timeout: float) -> int:
    """``replica_timeout`` as the whole milliseconds ``WAIT`` takes (at least 1: 0 waits forever)."""
    return max(1, math.ceil(replica_timeout * 1000))


def run_acknowledged(
    client: Any,
    script: Script,
    keys: Sequence[Any],
    args: Sequence[Any],
    *,
    replicas: int,
    timeout_ms: int,
) -> tuple[Any, int]:
    """Run ``script`` and ``WAIT replicas timeout_ms`` in one round trip.

    Returns the script's reply and the number of replicas that acknowledged. On a ``RedisCluster``
    the pipeline runs on the master that owns the first key's slot; a ``MOVED``/``ASK`` answer or a
    lost connection refreshes the slot map (so the next call finds the new owner) and is raised.
    """
    if not isinstance(client, RedisCluster):
        return _pipelined(client, script, keys, args, replicas, timeout_ms)
    cluster: Any = client  # redis-py's cluster methods are untyped
    master = cluster.get_redis_connection(cluster.get_node_from_key(keys[0]))
    try:
        return _pipelined(master, script, keys, args, replicas, timeout_ms)
    except (AskError, redis.ConnectionError, redis.TimeoutError):
        _refresh_slots(client)
        raise


def _pipelined(
    client: Any,
    script: Script,
    keys: Sequence[Any],
    args: Sequence[Any],
    replicas: int,
    timeout_ms: int,
) -> tuple[Any, int]:
    reply, acknowledged = _with(client, script, keys, args, ("WAIT", replicas, timeout_ms))
    return reply, int(acknowledged)


def run_with_role(
    client: Any, script: Script, keys: Sequence[Any], args: Sequence[Any]
) -> tuple[Any, dict[str, Any]]:
    """Run ``script`` and ``INFO replication`` in one round trip, on one connection: the reply
    and what the server that ran it says of itself (its replication ID, its replicas)."""
    reply, info = _with(client, script, keys, args, ("INFO", "replication"))
    return reply, dict(info)


async def run_with_role_async(
    client: Any, script: Any, keys: Sequence[Any], args: Sequence[Any]
) -> tuple[Any, dict[str, Any]]:
    """`run_with_role` on a ``redis.asyncio.Redis``."""
    reply, info = await _with_async(client, script, keys, args, ("INFO", "replication"))
    return reply, dict(info)


def _with(
    client: Any, script: Script, keys: Sequence[Any], args: Sequence[Any], then: tuple[Any, ...]
) -> tuple[Any, Any]:
    """The script's reply and that of the command ``then`` sent after it on the same connection."""
    for attempt in (1, 2):
        with client.pipeline(transaction=False) as pipe:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.execute_command(*then)
            reply, after = pipe.execute(raise_on_error=False)
        if isinstance(reply, NoScriptError) and attempt == 1:
            client.script_load(script.script)
            continue
        return _results(reply, after)
    raise AssertionError("unreachable: the second attempt returns or raises")


def check_durable_options(durable: object, durable_timeout: object) -> tuple[bool, float]:
    """Validate ``durable`` (True or False) and ``durable_timeout`` (finite seconds > 0)."""
    if not isinstance(durable, bool):
        raise ConfigError(f"durable must be True or False, not {durable!r}")
    return durable, _seconds("durable_timeout", durable_timeout)


def run_durable(
    client: Any, script: Script, keys: Sequence[Any], args: Sequence[Any], *, timeout_ms: int
) -> tuple[Any, int]:
    """Run ``script`` and ``WAITAOF 1 0 timeout_ms`` in one round trip: the script's reply and
    whether (1) or not (0) the server's append-only file on disk holds its write. On a
    ``RedisCluster`` it runs on the master that owns the first key's slot, as
    `run_acknowledged` does."""
    then = ("WAITAOF", 1, 0, timeout_ms)
    if not isinstance(client, RedisCluster):
        reply, counts = _with(client, script, keys, args, then)
        return reply, int(counts[0])
    cluster: Any = client  # redis-py's cluster methods are untyped
    master = cluster.get_redis_connection(cluster.get_node_from_key(keys[0]))
    try:
        reply, counts = _with(master, script, keys, args, then)
    except (AskError, redis.ConnectionError, redis.TimeoutError):
        _refresh_slots(client)
        raise
    return reply, int(counts[0])


async def run_durable_async(
    client: Any, script: Any, keys: Sequence[Any], args: Sequence[Any], *, timeout_ms: int
) -> tuple[Any, int]:
    """`run_durable` on a ``redis.asyncio.Redis`` (a cluster is refused when the node is
    made, as for ``replicas=``)."""
    reply, counts = await _with_async(client, script, keys, args, ("WAITAOF", 1, 0, timeout_ms))
    return reply, int(counts[0])


async def run_acknowledged_async(
    client: Any,
    script: Any,
    keys: Sequence[Any],
    args: Sequence[Any],
    *,
    replicas: int,
    timeout_ms: int,
) -> tuple[Any, int]:
    """`run_acknowledged` on a ``redis.asyncio.Redis`` (a cluster is refused when the
    node is made: its pipelines cannot carry a keyless ``WAIT``)."""
    then = ("WAIT", replicas, timeout_ms)
    reply, acknowledged = await _with_async(client, script, keys, args, then)
    return reply, int(acknowledged)


async def _with_async(
    client: Any, script: Any, keys: Sequence[Any], args: Sequence[Any], then: tuple[Any, ...]
) -> tuple[Any, Any]:
    """`_with` on a ``redis.asyncio.Redis``."""
    for attempt in (1, 2):
        async with client.pipeline(transaction=False) as pipe:
            pipe.evalsha(script.sha, len(keys), *keys, *args)
            pipe.execute_command(*then)
            reply, after = await pipe.execute(raise_on_error=False)
        if isinstance(reply, NoScriptError) and attempt == 1:
            await client.script_load(script.script)
            continue
        return _results(reply, after)
    raise AssertionError("unreachable: the second attempt returns or raises")


def _results(reply: Any, after: Any) -> tuple[Any, Any]:
    """The script's reply and the next command's of a pipeline, raising an error either holds."""
    for result in (reply, after):
        if isinstance(result, BaseException):
            raise result
    return reply, after


def _refresh_slots(client: RedisCluster) -> None:
    """Re-read the cluster's slot map; a cluster that cannot answer now keeps the old one."""
    with contextlib.suppress(redis.RedisError, RedisClusterException):
        client.nodes_manager.initialize()
