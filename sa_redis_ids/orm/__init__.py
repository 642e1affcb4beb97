"""SQLAlchemy integration: column defaults, registration, flush-wide reservations, column checks.

The modules, from the bottom up (each imports only those above it in this list):

- `sqlalchemy_internals`: the few SQLAlchemy internals used, and why;
- `checks`: what a column type holds on each dialect;
- `batches`: taking ``n`` values from a generator, sync or awaited on the
  ``AsyncSession``'s event loop;
- `floor_scope`: the connection of the flush or statement taking IDs, for floors read meanwhile;
- `floor`: ``floor_from_column``, a floor read from a column through its own engine, and the
  queries every column floor runs;
- `bound_floor`: the columns a generator is bound to as its floor, without ``floor=``;
- `default`: ``redis_id(generator)``, the column default (one reservation
  per statement on the bulk and Core paths); a leaf: it knows no mapper or session;
- `columns`: ``redis_id_column(generator)``;
- `bindings`: which generator fills which mapped attribute:
  ``register(Model, generator, attr=None)``, the ``redis_id`` defaults of mapped columns,
  ``check_columns``;
- `reservations`: one ``next_ids(n)`` per generator for a session's pending
  objects; ``assign_ids``, ``assign_ids_async``;
- `events`: the session and mapper listeners (``before_flush``,
  ``before_insert``, ``mapper_configured``), installed when this package is imported.
"""

from sa_redis_ids.orm import events
from sa_redis_ids.orm.bindings import Binding, check_columns, register
from sa_redis_ids.orm.checks import check_column
from sa_redis_ids.orm.columns import redis_id_column
from sa_redis_ids.orm.default import RedisIdDefault, redis_id
from sa_redis_ids.orm.floor import floor_from_column
from sa_redis_ids.orm.reservations import assign_ids, assign_ids_async

events.install()

__all__ = [
    "Binding",
    "RedisIdDefault",
    "assign_ids",
    "assign_ids_async",
    "check_column",
    "check_columns",
    "floor_from_column",
    "redis_id",
    "redis_id_column",
    "register",
]
