"""The eviction check: warn (or refuse, ``strict=True``) when Redis may evict the library's keys.

A counter that Redis evicts under memory pressure comes back from zero and re-issues IDs. Only
``maxmemory-policy noeviction`` keeps every key; the ``allkeys-*`` policies evict any key and the
``volatile-*`` ones evict keys with a TTL (day counters of daily codes, locks). A node is checked
once, at its first use, from the policies its capabilities probe read
(`sa_redis_ids.redis.capabilities`: ``CONFIG GET maxmemory-policy``, or ``INFO memory`` where
``CONFIG`` is renamed or denied). A node whose policy cannot be read at all is reported as a lost
guarantee there.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

logger = logging.getLogger("sa_redis_ids")

#: The one policy under which Redis never evicts a key (a full server refuses writes instead).
SAFE_POLICY = "noeviction"


def policy_of(reply: Any) -> str | None:
    """The policy of a ``CONFIG GET maxmemory-policy`` reply (a dict or a flat list), or None."""
    if isinstance(reply, list):
        reply = dict(zip(reply[::2], reply[1::2], strict=True))
    if not isinstance(reply, dict):
        return None
    policy = reply.get("maxmemory-policy", reply.get(b"maxmemory-policy"))
    if not policy:
        return None
    return policy.decode() if isinstance(policy, bytes) else str(policy)


def risk_of(policies: Mapping[str, str]) -> str | None:
    """The warning for the masters whose policy can evict keys, or None."""
    risky = {label: policy for label, policy in policies.items() if policy != SAFE_POLICY}
    if not risky:
        return None
    where = ", ".join(f"{label} has maxmemory-policy {policy}" for label, policy in risky.items())
    return (
        f"Redis may evict this library's keys ({where}): an evicted counter starts again and "
        f"re-issues IDs; set maxmemory-policy {SAFE_POLICY}"
    )
