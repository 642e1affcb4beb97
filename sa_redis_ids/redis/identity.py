"""Which Redis server a node is, so that one server listed twice is not taken for two.

A node list can name one server under several names: a URL with and without its ``/0``,
``localhost`` and ``127.0.0.1``, a DNS alias. Where nodes must be independent (a Redlock's majority)
each one's server is identified at its first use and the list is refused when two are the same:

* a real server by the ``run_id`` of ``INFO server`` (one per server process; its databases
  share it, as they share its fate), read once per node;
* where ``INFO`` is refused (ACLs, a renamed command), by its address: the host resolved to an IP
  address and the port, or a Unix socket's real path;
* the embedded Redis by its in-process server object; a Redis Cluster client by its name (a
  cluster counts as one node).
"""

from __future__ import annotations

import os
import socket
import weakref
from collections.abc import Sequence
from typing import Any

import redis

from sa_redis_ids.redis.connect import is_embedded
from sa_redis_ids.redis.nodes import Node
from sa_redis_ids.redis.plans import Command, Plan
from sa_redis_ids.redis.scripts import reply_text

_KNOWN: weakref.WeakKeyDictionary[Node, str] = weakref.WeakKeyDictionary()
"""Identities read so far, per node (a server's identity does not change while it is listed)."""


def server_identity(node: Node) -> Plan[str]:
    """The identity of ``node``'s server (see the module's docstring), read once per node."""
    known = _KNOWN.get(node)
    if known is not None:
        return known
    client = node.client
    if is_embedded(client):
        found = f"embedded server {id(_pool_kwargs(client).get('server', client))}"
    elif hasattr(client, "nodes_manager"):  # RedisCluster, sync or asyncio
        found = f"cluster {node.name}"
    else:
        try:
            info = yield Command(node, "info", "server")
        except redis.ResponseError:  # NOPERM, or INFO renamed: the address must do
            info = {}
        run_id = info.get("run_id") if isinstance(info, dict) else None
        found = f"run_id {reply_text(run_id)}" if run_id else f"address {_address(client)}"
    _KNOWN[node] = found
    return found


def same_server(labels: Sequence[str], identities: Sequence[Any]) -> tuple[str, str, str] | None:
    """The first two labels whose identities are equal, with that identity; None when all differ.
    An identity that is an exception (the node did not answer) is left out."""
    seen: dict[str, str] = {}
    for label, identity in zip(labels, identities, strict=True):
        if not isinstance(identity, str):
            continue
        if identity in seen:
            return seen[identity], label, identity
        seen[identity] = label
    return None


def _pool_kwargs(client: Any) -> dict[str, Any]:
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", None)
    return kwargs if isinstance(kwargs, dict) else {}


def _address(client: Any) -> str:
    """``ip:port`` (the host resolved) or a socket's real path, from the client's pool."""
    kwargs = _pool_kwargs(client)
    path = kwargs.get("path")
    if path:
        return os.path.realpath(str(path))
    host = str(kwargs.get("host", "localhost"))
    try:
        host = socket.gethostbyname(host)
    except OSError:  # unresolvable here: its name is the best there is
        host = host.lower()
    return f"{host}:{kwargs.get('port', 6379)}"
