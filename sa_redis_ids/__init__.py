"""sa_redis_ids: SQLAlchemy model IDs from Redis, unique across every app instance.

```pycon
>>> from sa_redis_ids import RedisIds, redis_id
>>> ids = RedisIds.embedded()
>>> users = ids.sequence("users")
>>> users.next_id()
1

```
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sa_redis_ids.buffering import Buffering, BufferStats
    from sa_redis_ids.errors import (
        ClockMovedBackwards,
        ConfigError,
        ConnectionPoolFull,
        DayMissing,
        DayPurged,
        LockNotAcquired,
        NotDurable,
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
    from sa_redis_ids.secret import Secret

_HOMES = {
    "BufferStats": "sa_redis_ids.buffering",
    "Buffering": "sa_redis_ids.buffering",
    "ClockMovedBackwards": "sa_redis_ids.errors",
    "ConfigError": "sa_redis_ids.errors",
    "ConnectionPoolFull": "sa_redis_ids.errors",
    "DailyCodeGenerator": "sa_redis_ids.generators.daily_code",
    "DailyCodeParts": "sa_redis_ids.generators.daily_code",
    "DatePrefixedGenerator": "sa_redis_ids.generators.date_prefixed",
    "DatePrefixedParts": "sa_redis_ids.generators.date_prefixed",
    "DatedBlock": "sa_redis_ids.generators.day_counter",
    "DayMissing": "sa_redis_ids.errors",
    "DayPurged": "sa_redis_ids.errors",
    "IdGenerator": "sa_redis_ids.generators.base",
    "LockNotAcquired": "sa_redis_ids.errors",
    "RedisIds": "sa_redis_ids.ids",
    "RedisUnavailable": "sa_redis_ids.errors",
    "Redlock": "sa_redis_ids.lock",
    "NotDurable": "sa_redis_ids.errors",
    "ReplicasNotAcknowledged": "sa_redis_ids.errors",
    "SaRedisIdsError": "sa_redis_ids.errors",
    "ScriptError": "sa_redis_ids.errors",
    "Secret": "sa_redis_ids.secret",
    "SequenceExhausted": "sa_redis_ids.errors",
    "ShortIdGenerator": "sa_redis_ids.generators.short_id",
    "ShortIdStats": "sa_redis_ids.generators.short_id",
    "SnowflakeCompatWarning": "sa_redis_ids.generators.snowflake",
    "SnowflakeGenerator": "sa_redis_ids.generators.snowflake",
    "SnowflakeLayout": "sa_redis_ids.generators.snowflake",
    "SnowflakeParts": "sa_redis_ids.generators.snowflake",
    "fail_fast_options": "sa_redis_ids.redis.connect",
    "floor_from_column": "sa_redis_ids.orm.floor",
    "redis_id": "sa_redis_ids.orm.default",
    "redis_id_column": "sa_redis_ids.orm.columns",
    "register": "sa_redis_ids.orm.bindings",
}
"""Where each public name lives. They are imported at first use, not with the package, so that
importing ``sa_redis_ids`` (as pytest does with the plugin) costs nothing: neither SQLAlchemy nor
redis-py is loaded until a name is used."""


if not TYPE_CHECKING:  # type checkers see the imports above; unknown names stay errors for them

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is None:
            raise AttributeError(f"module 'sa_redis_ids' has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *__all__})


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
    "NotDurable",
    "RedisIds",
    "RedisUnavailable",
    "Redlock",
    "ReplicasNotAcknowledged",
    "SaRedisIdsError",
    "ScriptError",
    "Secret",
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
__version__ = "0.2.0"
"""The release, the one place it is written: the package metadata (and so ``pip`` and
``sa-redis-ids --version``) read it from here."""
