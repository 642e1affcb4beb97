"""The eviction check: warn (or refuse, ``strict=True``) when Redis may evict the library's keys.

A counter that Redis evicts under memory pressure comes back from zero and re-issues IDs. Only
``maxmemory-policy noeviction`` keeps every key; the ``allkeys-*`` policies evict any key and the
``volatile-*`` ones evict keys with a TTL (day counters of daily codes, locks). A node is checked
once, at its first use; where ``CONFIG GET`` is refused (ACLs, managed Redis) the check is skipped:
the library cannot know, and refusing to run there would make it unusable.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from redis.cluster import RedisCluster

from sa_redis_ids.redis.connect import is_embedded

logger = logging.getLogger("sa_redis_ids")

#: The one policy under which Redis never evicts a key (a full server refuses writes instead).
SAFE_POLICY = "noeviction"


def eviction_policies(client: Any, name: str) -> dict[str, str]:
    """``maxmemory-policy`` of each master a client writes to: ``{name: policy}`` for one server,
    ``{host:port: policy}`` for each master of a cluster.

    A cluster answers for every master; a server that refuses ``CONFIG GET`` is left out, and the
    embedded fakeredis (which never evicts) gives ``{}``. Connection errors propagate.
    """
    if is_embedded(client):
        return {}
    if isinstance(client, RedisCluster):
        cluster: Any = client  # redis-py's cluster methods are untyped
        targets = [
            (node.name, cluster.get_redis_connection(node)) for node in cluster.get_primaries()
        ]
    else:
        targets = [(name, client)]
    found: dict[str, str] = {}
    for label, target in targets:
        try:
            reply = target.config_get("maxmemory-policy")
        except redis.ResponseError:  # NOPERM (ACL), or CONFIG renamed/disabled on managed Redis
            logger.debug("cannot read maxmemory-policy of %s; eviction check skipped", label)
            continue
        _record_policy(found, label, reply)
    return found


async def eviction_policies_async(client: Any, name: str) -> dict[str, str]:
    """`eviction_policies` of a ``redis.asyncio`` client."""
    if is_embedded(client):
        return {}
    if hasattr(client, "get_primaries"):  # redis.asyncio.RedisCluster
        targets = [(node.name, node) for node in client.get_primaries()]
    else:
        targets = [(name, client)]
    found: dict[str, str] = {}
    for label, target in targets:
        try:
            reply = await target.execute_command("CONFIG", "GET", "maxmemory-policy")
        except redis.ResponseError:
            logger.debug("cannot read maxmemory-policy of %s; eviction check skipped", label)
            continue
        _record_policy(found, label, reply)
    return found


def _record_policy(found: dict[str, str], label: str, reply: Any) -> None:
    """Add the policy of a ``CONFIG GET maxmemory-policy`` reply (a dict or a flat list)."""
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    if isinstance(reply, dict):
        policy = reply.get("maxmemory-policy", reply.get(b"maxmemory-policy"))
        if policy:
            found[label] = policy.decode() if isinstance(policy, bytes) else str(policy)


def eviction_risk(client: Any, name: str) -> str | None:
    """Why ``client``'s Redis may evict the library's keys, or ``None`` when it will not (or when
    it cannot be known)."""
    return risk_of(eviction_policies(client, name))


async def eviction_risk_async(client: Any, name: str) -> str | None:
    """`eviction_risk` of a ``redis.asyncio`` client."""
    return risk_of(await eviction_policies_async(client, name))


def risk_of(policies: dict[str, str]) -> str | None:
    """The warning for the masters whose policy can evict keys, or None."""
    risky = {label: policy for label, policy in policies.items() if policy != SAFE_POLICY}
    if not risky:
        return None
    where = ", ".join(f"{label} has maxmemory-policy {policy}" for label, policy in risky.items())
    return (
        f"Redis may evict this library's keys ({where}): an evicted counter starts again and "
        f"re-issues IDs; set maxmemory-policy {SAFE_POLICY}"
    )
