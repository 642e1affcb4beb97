"""SQLAlchemy integration: column defaults, registration, flush-wide reservations, column checks.

- :mod:`~sa_redis_ids.orm.default`: ``redis_id(generator)``, the column default (one reservation
  per statement on the bulk and Core paths);
- :mod:`~sa_redis_ids.orm.bindings`: ``register(Model, generator, attr=None)`` and the bindings of
  a mapped class;
- :mod:`~sa_redis_ids.orm.flush`: the ``before_flush`` reservation and ``before_insert`` hook (one
  round trip per generator per flush), ``assign_ids``, ``check_columns``;
- :mod:`~sa_redis_ids.orm.checks`: what a column type holds on each dialect;
- :mod:`~sa_redis_ids.orm.columns`: ``redis_id_column(generator)``;
- :mod:`~sa_redis_ids.orm.async_support`: ``assign_ids_async`` for ``AsyncSession``;
- :mod:`~sa_redis_ids.orm.floor`: a day's floor read from the table (date-keyed strategies).
"""

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
