"""sa_redis_ids: SQLAlchemy model IDs from Redis, unique across every app instance.

>>> from sa_redis_ids import RedisIds, redis_id
>>> ids = RedisIds.embedded()
>>> users = ids.sequence("users")
>>> users.next_id()
1
"""

from sa_redis_ids.buffering import Buffering, BufferStats
from sa_redis_ids.errors import (
    ClockMovedBackwards,
    ConfigError,
    ConnectionPoolFull,
    DayMissing,
    DayPurged,
    LockNotAcquired,
    RedisUnavailable,
    ReplicasNotAcknowledged,
    SaRedisIdsError,
    ScriptError,
    SequenceExhausted,
)
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.daily_code import DailyCodeGenerator, DailyCodeParts
from sa_redis_ids.generators.date_prefixed import DatePrefixedGenerator, DatePrefixedParts
from sa_redis_ids.generators.day_counter import DatedBlock
from sa_redis_ids.generators.short_id import ShortIdGenerator, ShortIdStats
from sa_redis_ids.generators.snowflake import (
    SnowflakeCompatWarning,
    SnowflakeGenerator,
    SnowflakeLayout,
    SnowflakeParts,
)
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.lock import Redlock
from sa_redis_ids.orm.bindings import register
from sa_redis_ids.orm.columns import redis_id_column
from sa_redis_ids.orm.default import redis_id
from sa_redis_ids.orm.floor import floor_from_column
from sa_redis_ids.redis.connect import fail_fast_options

__all__ = [
    "BufferStats",
    "Buffering",
    "ClockMovedBackwards",
    "ConfigError",
    "ConnectionPoolFull",
    "DailyCodeGenerator",
    "DailyCodeParts",
    "DatePrefixedGenerator",
    "DatePrefixedParts",
    "DatedBlock",
    "DayMissing",
    "DayPurged",
    "IdGenerator",
    "LockNotAcquired",
    "RedisIds",
    "RedisUnavailable",
    "Redlock",
    "ReplicasNotAcknowledged",
    "SaRedisIdsError",
    "ScriptError",
    "SequenceExhausted",
    "ShortIdGenerator",
    "ShortIdStats",
    "SnowflakeCompatWarning",
    "SnowflakeGenerator",
    "SnowflakeLayout",
    "SnowflakeParts",
    "fail_fast_options",
    "floor_from_column",
    "redis_id",
    "redis_id_column",
    "register",
]
__version__ = "0.1.0"
