"""``AsyncSession`` support: reserve the IDs off the event loop before the flush.

An ``AsyncSession`` runs the ORM flush in a greenlet, in the event loop's thread, so the flush's
own reservation (one synchronous Redis call per generator, see :mod:`sa_redis_ids.orm.flush`)
blocks the loop for that round trip. That is correct and usually short. To keep the loop free,
``await assign_ids_async(session)`` before ``commit()``/``flush()``: it counts the pending objects
in the loop, runs each generator's single ``next_ids(n)`` in a worker thread
(``asyncio.to_thread``) and assigns the IDs, so the flush finds nothing left to reserve.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sa_redis_ids.orm.batches import take
from sa_redis_ids.orm.flush import _check_dialect, assign, pending_targets


async def assign_ids_async(session: Any) -> int:
    """Give every pending object of an ``AsyncSession`` (or ``Session``) its IDs; returns how many."""
    sync_session = getattr(session, "sync_session", session)
    targets = pending_targets(sync_session)
    _check_dialect(sync_session, targets)
    for generator, pairs in targets.items():
        values = await asyncio.to_thread(take, generator, len(pairs))
        assign(targets, generator, values)
    return sum(len(pairs) for pairs in targets.values())
