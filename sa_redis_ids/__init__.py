"""sa_redis_ids: SQLAlchemy model IDs from Redis, unique across every app instance.

>>> from sa_redis_ids import RedisIds, redis_id
>>> ids = RedisIds.embedded()
>>> users = ids.sequence("users")
>>> users.next_id()
1
"""

from sa_redis_ids.errors import (
    ClockMovedBackwards,
    ConfigError,
    DayPurged,
    LockNotAcquired,
    RedisUnavailable,
    SaRedisIdsError,
    ScriptError,
    SequenceExhausted,
)
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.orm.default import redis_id
from sa_redis_ids.strategies.base import IdGenerator

__all__ = [
    "ClockMovedBackwards",
    "ConfigError",
    "DayPurged",
    "IdGenerator",
    "LockNotAcquired",
    "RedisIds",
    "RedisUnavailable",
    "SaRedisIdsError",
    "ScriptError",
    "SequenceExhausted",
    "redis_id",
]
__version__ = "0.1.0"
