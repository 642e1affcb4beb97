"""Distributed locks over the Redis nodes: :class:`Redlock`, with fencing tokens."""

from sa_redis_ids.locking.redlock import Redlock, validate_lock_name

__all__ = ["Redlock", "validate_lock_name"]
