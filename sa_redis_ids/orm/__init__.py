"""SQLAlchemy integration: column defaults, registration, flush-wide reservations, column checks."""

from sa_redis_ids.orm.async_support import assign_ids_async
from sa_redis_ids.orm.bindings import Binding, register
from sa_redis_ids.orm.checks import check_column
from sa_redis_ids.orm.columns import redis_id_column
from sa_redis_ids.orm.default import RedisIdDefault, redis_id
from sa_redis_ids.orm.flush import assign_ids, check_columns

__all__ = [
    "Binding",
    "RedisIdDefault",
    "assign_ids",
    "assign_ids_async",
    "check_column",
    "check_columns",
    "redis_id",
    "redis_id_column",
    "register",
]
