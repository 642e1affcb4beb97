"""What a Redis node lets the library rely on, learnt once at its first use.

Production Redis is often not a default ``redis-server``: managed services rename or deny
``CONFIG``, and a cautious ACL (``-@dangerous``) denies ``INFO``. Some of the library's defences
read those commands, so instead of assuming them, a node's first use asks each of its servers (a
cluster: every master) in one pipelined round trip:

* ``HELLO`` (no arguments): the flavour (``redis``, ``valkey``) and version;
* ``INFO replication``: the node's identity (its replication ID), which the issuing scripts read to
  notice a failover to a replica that missed the last writes;
* ``INFO memory`` and ``CONFIG GET maxmemory-policy``: the eviction policy (``CONFIG`` first; where
  it is renamed or denied, ``INFO memory``'s ``maxmemory_policy`` says the same);
* ``INFO persistence``: whether the append-only file is on (``aof_enabled``);
* ``WAIT 0 0`` and ``WAITAOF 0 0 0``: whether ``replicas=N`` and a durable write can be confirmed
  (both answer at once with these arguments);
* a script calling ``TIME`` and ``INFO replication`` with ``redis.pcall``: what the scripts
  themselves may run (date-keyed strategies and snowflakes read ``TIME``).

The answer is a `Capabilities`. A guarantee the server cannot give is a `Lost` (which
command is missing, what that costs, what to grant): the node logs it once as a warning, counts it
in the metrics (``sa_redis_ids_guarantee_lost``), ``sa-redis-ids status`` shows it, and under
``strict=True`` the node is refused with a [`ConfigError`][sa_redis_ids.ConfigError]. A connection
error during the probe, or an answer that says the node cannot serve now (``BUSY``,
``LOADING``, ``CLUSTERDOWN`` …), propagates and leaves the node to be probed at its next use.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, NoPermissionError, TryAgainError

from sa_redis_ids.redis.connect import is_embedded
from sa_redis_ids.redis.eviction import policy_of

#: One script that tells what scripts may call: ``{TIME ran, INFO replication ran}`` as 1 or 0.
PROBE_SCRIPT = (
    "local t = redis.pcall('TIME') "
    "local i = redis.pcall('INFO', 'replication') "
    "return {(type(t) == 'table' and t.err == nil) and 1 or 0, type(i) == 'string' and 1 or 0}"
)

#: The probe's commands, in the order of its replies (see the module's docstring).
PROBE: tuple[tuple[Any, ...], ...] = (
    ("HELLO",),
    ("INFO", "replication"),
    ("INFO", "memory"),
    ("INFO", "persistence"),
    ("CONFIG", "GET", "maxmemory-policy"),
    ("WAIT", 0, 0),
    ("WAITAOF", 0, 0, 0),
    ("EVAL", PROBE_SCRIPT, 0),
)

#: How each probed command is named in messages (the commands to grant).
PROBE_NAMES = (
    "HELLO",
    "INFO replication",
    "INFO memory",
    "INFO persistence",
    "CONFIG GET maxmemory-policy",
    "WAIT",
    "WAITAOF",
    "EVAL",
)

FAILOVER_DETECTION = "failover_detection"
"""The guarantee ``INFO replication`` gives: a failover to a replica that missed writes is seen."""
EVICTION_CHECK = "eviction_check"
"""The guarantee ``CONFIG GET`` or ``INFO memory`` gives: an evicting policy is reported."""


@dataclass(frozen=True)
class Lost:
    """A guarantee a node cannot give, and why."""

    guarantee: str
    """`FAILOVER_DETECTION` or `EVICTION_CHECK` (the metric's ``guarantee`` label)."""
    missing: str
    """The command(s) the server refused or does not know."""
    cost: str
    """What goes undetected without it."""
    grant: str
    """What to allow so the guarantee holds."""

    def describe(self, node: str, *, warning: bool = False) -> str:
        """One sentence for an error (or, ``warning``, a log line that also names
        ``strict=True``): the node, what is missing, what it costs and what to grant."""
        text = f"Redis node {node} does not answer {self.missing}: {self.cost}; {self.grant}"
        return text + (", or pass strict=True to refuse such a node" if warning else "")

    def short(self) -> str:
        """What ``sa-redis-ids status`` prints: the guarantee, the command and the cost."""
        return f"{self.guarantee}: without {self.missing}, {self.cost}"


LOST_IDENTITY = Lost(
    FAILOVER_DETECTION,
    "INFO replication",
    "a failover to a replica that missed the last writes is not detected, and processes whose "
    "last values lie below those writes hand them out again",
    "grant +info to the library's ACL user (or keep the INFO command's name)",
)

LOST_EVICTION = Lost(
    EVICTION_CHECK,
    "CONFIG GET maxmemory-policy or INFO memory",
    "a maxmemory-policy that can evict the library's keys goes unnoticed (an evicted counter "
    "starts again and re-issues IDs), and sequences take no transaction fast path",
    "grant +info or +config|get to the library's ACL user",
)


@dataclass(frozen=True)
class Capabilities:
    """What one node (a server, a Sentinel service's master, or every master of a cluster)
    allows. A flag is True only when every master of the node allows it."""

    flavour: str
    """``redis``, ``valkey``, ``embedded``, or ``unknown`` (``HELLO`` refused, Redis < 6.2)."""
    version: tuple[int, ...] | None
    """The server's version (the lowest of a cluster's masters); None when unknown."""
    identity: bool
    """``INFO replication`` answers, at top level and inside scripts: failovers are detected."""
    info_memory: bool
    """``INFO memory`` answers (its ``maxmemory_policy`` stands in for ``CONFIG GET``)."""
    config_get: bool
    """``CONFIG GET`` answers."""
    wait: bool
    """``WAIT`` may run (needed by ``replicas=N``)."""
    script_time: bool
    """Scripts may call ``TIME`` (needed by date-keyed strategies, daily codes and snowflakes)."""
    waitaof: bool
    """``WAITAOF`` exists (Redis 7.2+, Valkey) and may run."""
    aof: bool | None
    """The append-only file is on (``INFO persistence``); None when it cannot be read."""
    eviction_policies: Mapping[str, str] = field(default_factory=dict)
    """``maxmemory-policy`` of each master whose policy could be read, by its name."""
    eviction_known: bool = True
    """Every master's policy could be read."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Probed commands the server refused, with its answer (``NOPERM …``, ``unknown command``)."""

    @property
    def lost(self) -> tuple[Lost, ...]:
        """The guarantees this node cannot give (see `Lost`)."""
        found = []
        if not self.identity:
            found.append(LOST_IDENTITY)
        if not self.eviction_known:
            found.append(LOST_EVICTION)
        return tuple(found)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready view (``sa-redis-ids status --json``)."""
        return {
            "flavour": self.flavour,
            "version": None if self.version is None else ".".join(map(str, self.version)),
            "identity": self.identity,
            "info_memory": self.info_memory,
            "config_get": self.config_get,
            "wait": self.wait,
            "script_time": self.script_time,
            "waitaof": self.waitaof,
            "aof": self.aof,
            "lost": [lost.guarantee for lost in self.lost],
            "refused": dict(self.refused),
        }


EMBEDDED = Capabilities(
    flavour="embedded",
    version=None,
    identity=True,  # one in-process server: it cannot fail over
    info_memory=False,
    config_get=False,
    wait=False,
    script_time=True,
    waitaof=False,
    aof=False,
)
"""The in-process fakeredis: never evicts, never fails over, has no replicas nor AOF."""


def read_replies(label: str, replies: Sequence[Any]) -> Capabilities:
    """The capabilities of one server from the replies to `PROBE` (an exception where a
    command failed), in order. Connection errors must have been raised before."""
    refused = {
        name: " ".join(str(reply).split())
        for name, reply in zip(PROBE_NAMES, replies, strict=True)
        if isinstance(reply, BaseException)
    }
    hello, replication, memory, persistence, config, _wait, _waitaof, script = (
        None if isinstance(reply, BaseException) else reply for reply in replies
    )
    about = _pairs(hello)
    flavour = _text(about.get("server")) or "unknown"
    version = _version(_text(about.get("version")))
    in_scripts = list(script) if isinstance(script, (list, tuple)) else []
    script_time = len(in_scripts) == 2 and int(in_scripts[0]) == 1
    script_info = len(in_scripts) == 2 and int(in_scripts[1]) == 1
    replication_info = _info(replication)
    memory_info = _info(memory)
    persistence_info = _info(persistence)
    policy = policy_of(config) if config is not None else None
    if policy is None and memory_info:
        found = memory_info.get("maxmemory_policy")
        policy = _text(found) or None
    aof = persistence_info.get("aof_enabled")
    return Capabilities(
        flavour=flavour,
        version=version,
        identity=bool(replication_info) and (script is None or script_info),
        info_memory=bool(memory_info),
        config_get=config is not None,
        wait=not _denied(replies[5]),
        script_time=script_time,
        waitaof=not _denied(replies[6]),
        aof=None if aof is None else str(_text(aof)) == "1",
        eviction_policies={label: policy} if policy else {},
        eviction_known=policy is not None,
        refused=refused,
    )


def combine(found: Sequence[tuple[str, Capabilities]]) -> Capabilities:
    """The capabilities of a node made of several masters (a cluster), each ``(name,
    capabilities)``: a flag holds when it holds on every master; policies and refusals are
    gathered (refusals named by master)."""
    if len(found) == 1:
        return found[0][1]
    if not found:  # a cluster that named no master: nothing known
        return replace(EMBEDDED, flavour="unknown", identity=False, eviction_known=False)
    each = [capabilities for _, capabilities in found]
    versions = [one.version for one in each if one.version is not None]
    flavours = {one.flavour for one in each}
    aofs = [one.aof for one in each]
    return Capabilities(
        flavour=flavours.pop() if len(flavours) == 1 else "unknown",
        version=min(versions) if len(versions) == len(each) else None,
        identity=all(one.identity for one in each),
        info_memory=all(one.info_memory for one in each),
        config_get=all(one.config_get for one in each),
        wait=all(one.wait for one in each),
        script_time=all(one.script_time for one in each),
        waitaof=all(one.waitaof for one in each),
        aof=None if None in aofs else all(aofs),
        eviction_policies={k: v for one in each for k, v in one.eviction_policies.items()},
        eviction_known=all(one.eviction_known for one in each),
        refused={
            f"{command} ({master})": text
            for master, one in found
            for command, text in one.refused.items()
        },
    )


def probe(client: Any, name: str) -> Capabilities:
    """The capabilities of a sync client's node (see the module's docstring): one pipelined
    round trip per server."""
    if is_embedded(client):
        return EMBEDDED
    if isinstance(client, RedisCluster):
        cluster: Any = client  # redis-py's cluster methods are untyped
        targets = [
            (node.name, cluster.get_redis_connection(node)) for node in cluster.get_primaries()
        ]
    else:
        targets = [(name, client)]
    return combine([(label, read_replies(label, _pipelined(target))) for label, target in targets])


async def probe_async(client: Any, name: str) -> Capabilities:
    """`probe` of a ``redis.asyncio`` client (a cluster's masters are asked command by command:
    its node objects have no pipeline of their own)."""
    if is_embedded(client):
        return EMBEDDED
    if hasattr(client, "get_primaries"):  # redis.asyncio.RedisCluster
        found = []
        for node in client.get_primaries():
            replies = [await _one(node.execute_command, command) for command in PROBE]
            found.append((node.name, read_replies(node.name, replies)))
        return combine(found)
    async with client.pipeline(transaction=False) as pipe:
        for command in PROBE:
            pipe.execute_command(*command)
        replies = await pipe.execute(raise_on_error=False)
    return read_replies(name, _raising_lost_connections(replies))


def _pipelined(client: Any) -> list[Any]:
    """The replies of one sync server to `PROBE`, in one round trip (an error as its
    exception, but one that says the node cannot answer now is raised)."""
    with client.pipeline(transaction=False) as pipe:
        for command in PROBE:
            pipe.execute_command(*command)
        return _raising_lost_connections(pipe.execute(raise_on_error=False))


async def _one(call: Callable[..., Any], command: tuple[Any, ...]) -> Any:
    """The reply of ``call(*command)``, or its error (raised when it says the node cannot
    answer now, see `_not_now`)."""
    try:
        return await call(*command)
    except redis.RedisError as exc:
        if _not_now(exc):
            raise
        return exc


def _denied(reply: Any) -> bool:
    """Whether a reply says the command may not run here at all (``NOPERM``, or a command the
    server does not know or renamed away), rather than not now (``WAIT`` on a replica)."""
    if not isinstance(reply, BaseException):
        return False
    text = str(reply)
    return isinstance(reply, NoPermissionError) or "unknown command" in text or "NOPERM" in text


#: Errors that say the node cannot answer now (lost connection, ``LOADING``, a cluster or master
#: that is down, a slot migrating), not that a command is missing: the probe raises them, so the
#: node counts as unavailable and is probed again at its next use.
NOT_NOW: tuple[type[BaseException], ...] = (
    redis.ConnectionError,  # includes BusyLoadingError (LOADING) and AuthenticationError
    redis.TimeoutError,
    ClusterDownError,  # includes MasterDownError
    TryAgainError,
)


def _not_now(reply: Any) -> bool:
    """Whether ``reply`` is one of `NOT_NOW`, or ``BUSY`` (another client's script runs past
    ``busy-reply-threshold``: every command but a few is refused until it ends)."""
    return isinstance(reply, NOT_NOW) or (
        isinstance(reply, redis.ResponseError) and str(reply).startswith("BUSY ")
    )


def _raising_lost_connections(replies: list[Any]) -> list[Any]:
    """``replies``, raising the first that says the node cannot answer now (not a refusal)."""
    for reply in replies:
        if _not_now(reply):
            raise reply
    return replies


def _text(value: Any) -> str | None:
    """A reply part as text (bytes decoded), or None."""
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _pairs(reply: Any) -> dict[str, Any]:
    """A ``HELLO`` reply as a dict with text keys (RESP3 answers a map, RESP2 a flat list)."""
    if isinstance(reply, (list, tuple)):
        reply = dict(zip(reply[::2], reply[1::2], strict=False))
    if not isinstance(reply, dict):
        return {}
    return {str(_text(key)): value for key, value in reply.items()}


def _info(reply: Any) -> dict[str, Any]:
    """An ``INFO`` reply as a dict: redis-py parses it; a raw text reply is parsed here."""
    if isinstance(reply, dict):
        return {str(_text(key)): value for key, value in reply.items()}
    text = _text(reply)
    if not text:
        return {}
    found: dict[str, Any] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and not key.startswith("#"):
            found[key.strip()] = value.strip()
    return found


def _version(text: str | None) -> tuple[int, ...] | None:
    """``"7.2.4"`` as ``(7, 2, 4)``; None when ``text`` holds no version."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if match is None:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)
