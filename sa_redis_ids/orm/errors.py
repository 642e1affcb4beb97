"""Let the library's own errors reach the caller of a flush or execute unwrapped.

SQLAlchemy wraps an exception raised by a Python column default in ``StatementError``. A caller
who catches ``RedisUnavailable`` or ``SequenceExhausted`` should not have to dig for ``.orig``, so
a ``handle_error`` listener on every ``Engine`` re-raises :class:`SaRedisIdsError` as it is (the
transaction is rolled back by SQLAlchemy as for any failed statement).
"""

from __future__ import annotations

from sqlalchemy import event
from sqlalchemy.engine import Engine, ExceptionContext

from sa_redis_ids.errors import SaRedisIdsError


def _unwrap(context: ExceptionContext) -> BaseException | None:
    if isinstance(context.original_exception, SaRedisIdsError):
        return context.original_exception
    return None


def install() -> None:
    """Register the listener once (idempotent)."""
    if not event.contains(Engine, "handle_error", _unwrap):
        event.listen(Engine, "handle_error", _unwrap, retval=True)
