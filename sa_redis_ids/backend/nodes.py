"""Redis nodes: one client each, rotation over them, and skipping the ones that are down.

With N independent nodes, node ``k`` only ever issues values of its own residue class (``k`` modulo
``N``), so any node can answer any call and the union never collides. A node that fails with a
connection or timeout error is marked down for ``retry_after`` seconds and skipped; only when every
node fails does a call raise :class:`RedisUnavailable`. A failed call never produces a value, and a
value a node issued but whose reply was lost is merely a gap: no other node can issue it.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis
from redis.commands.core import Script
from redis.exceptions import ClusterDownError, ClusterError

from sa_redis_ids.backend.scripts import script_source
from sa_redis_ids.errors import RedisUnavailable, SaRedisIdsError, ScriptError, SequenceExhausted

T = TypeVar("T")

#: Errors that mean "this node cannot answer now": skip it and try another.
NODE_DOWN_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    ClusterError,
)


def describe_client(client: Any) -> str:
    """A short human name for a client: ``host:port/db``, a socket path, or ``cluster@host:port``."""
    if client.__class__.__module__.startswith("fakeredis"):
        return "embedded"
    if hasattr(client, "get_nodes"):  # RedisCluster
        nodes = client.get_nodes()
        first = nodes[0] if nodes else None
        return f"cluster@{first.host}:{first.port}" if first else "cluster"
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}/{kwargs.get('db', 0)}"


class Node:
    """One independent Redis deployment (a server or a whole cluster) and its position in the set."""

    def __init__(self, client: Any, *, index: int, count: int, name: str | None = None):
        self.client = client
        self.index = index
        self.count = count
        self._name = name
        self.down_until = 0.0
        self._scripts: dict[str, Script] = {}
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """``host:port/db``, ``unix:path``, ``cluster@host:port`` or ``embedded``."""
        if self._name is None:
            self._name = describe_client(self.client)
        return self._name

    def script(self, name: str) -> Script:
        """The registered script ``lua/<name>.lua`` for this node's client (registered once)."""
        found = self._scripts.get(name)
        if found is None:
            with self._lock:
                found = self._scripts.get(name)
                if found is None:
                    found = self.client.register_script(script_source(name))
                    self._scripts[name] = found
        return found

    def run(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run script ``lua/<name>.lua`` on this node and return its raw reply.

        Every script call of the library goes through here, so how a call reaches the node (and
        what it waits for after the write) is decided in one place.
        """
        return self.script(name)(keys=keys, args=args)

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


class NodeSet:
    """The nodes of a :class:`~sa_redis_ids.RedisIds`, with round-robin rotation and failover."""

    def __init__(
        self,
        clients: Sequence[Any],
        *,
        names: Sequence[str] | None = None,
        retry_after: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not clients:
            raise ValueError("at least one Redis client is needed")
        count = len(clients)
        self.nodes = [
            Node(client, index=i, count=count, name=names[i] if names else None)
            for i, client in enumerate(clients)
        ]
        self.retry_after = retry_after
        self._clock = clock
        self._turn = itertools.count()

    def __len__(self) -> int:
        return len(self.nodes)

    def call(self, namespace: str, action: Callable[[Node], T]) -> T:
        """Run ``action`` on the next node in turn, moving on to the others if it is down.

        Nodes marked down are tried only after every healthy node failed. Errors other than
        connection failures (a script status, a wrong key type) propagate at once.
        """
        start = next(self._turn) % len(self.nodes)
        order = self.nodes[start:] + self.nodes[:start]
        now = self._clock()
        healthy = [node for node in order if node.down_until <= now]
        resting = [node for node in order if node.down_until > now]
        errors: dict[str, BaseException] = {}
        for node in healthy + resting:
            try:
                return self.on(node, namespace, action)
            except RedisUnavailable as exc:
                errors[node.name] = exc.__cause__ or exc
        raise RedisUnavailable("no Redis node could answer", namespace=namespace, errors=errors)

    def on(self, node: Node, namespace: str, action: Callable[[Node], T]) -> T:
        """Run ``action`` on one given node, translating redis-py errors to the library's."""
        try:
            result = action(node)
        except SaRedisIdsError:
            raise
        except NODE_DOWN_ERRORS as exc:
            node.down_until = self._clock() + self.retry_after
            raise RedisUnavailable(
                f"Redis node is unavailable: {exc}", namespace=namespace, node=node.name
            ) from exc
        except redis.ResponseError as exc:
            if "overflow" in str(exc):
                raise SequenceExhausted(
                    "counter would pass a signed 64-bit integer",
                    namespace=namespace,
                    node=node.name,
                ) from exc
            raise ScriptError(f"Redis refused: {exc}", namespace=namespace, node=node.name) from exc
        node.down_until = 0.0
        return result

    def each(self, namespace: str, action: Callable[[Node], T]) -> list[T]:
        """Run ``action`` on every node (maintenance, stats); raise if any node fails."""
        return [self.on(node, namespace, action) for node in self.nodes]
