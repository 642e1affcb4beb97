"""The pytest plugin of ``sa_redis_ids``: fixtures for applications' test suites.

Installed with the package (entry point ``pytest11``: ``sa_redis_ids``), so an application's
tests get these fixtures without any import. Nothing of the library (nor fakeredis) is imported
until a test asks for one of them.

- ``redis_ids``: a fresh [`RedisIds`][sa_redis_ids.RedisIds] on an embedded Redis (fakeredis, the
  ``embedded`` extra), empty for every test.
- ``async_redis_ids``: the same for [`AsyncRedisIds`][sa_redis_ids.asyncio.AsyncRedisIds] (a plain
  fixture: use it from ``asyncio.run`` or any asyncio test plugin).
- ``redis_clock``: a [`RedisClockControl`][sa_redis_ids.testing.RedisClockControl] that moves the Redis time
  every generator of the test's instances sees (``shift(ms)``, ``back(ms)``, ``set(datetime)``,
  ``to_midnight(tz, before_ms=...)``, ``reset()``, ``now()``, ``today(tz)``), put back at
  teardown. It follows ``redis_ids``, ``async_redis_ids`` and what ``redis_ids_for`` swapped;
  ``redis_clock.track(ids)`` adds another instance.
- ``redis_ids_for``: ``redis_ids_for(app_ids)`` runs an application's own ``RedisIds`` (or
  ``AsyncRedisIds``) and every generator it made on the test's ``redis_ids`` (or
  ``async_redis_ids``) until the test ends (``app_ids.use(...)``), and returns that instance.

Example:

```python
def test_orders_restart_daily(redis_ids_for, redis_clock):
    redis_ids_for(myapp.ids)
    redis_clock.to_midnight("Asia/Shanghai")
    ...
```
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from sa_redis_ids.asyncio import AsyncRedisIds
    from sa_redis_ids.ids import RedisIds, RedisIdsBase
    from sa_redis_ids.testing import RedisClockControl


@pytest.fixture
def redis_clock() -> Iterator[RedisClockControl]:
    """Moves the Redis time of the test's instances; every move is undone at teardown."""
    from sa_redis_ids.testing import RedisClockControl

    control = RedisClockControl()
    try:
        yield control
    finally:
        control.close()


@pytest.fixture
def redis_ids(redis_clock: RedisClockControl) -> Iterator[RedisIds]:
    """A fresh ``RedisIds`` on an embedded Redis of its own (empty), closed at teardown."""
    from sa_redis_ids.ids import RedisIds

    ids = RedisIds.embedded()
    redis_clock.track(ids)
    try:
        yield ids
    finally:
        ids.close()


@pytest.fixture
def async_redis_ids(redis_clock: RedisClockControl) -> Iterator[AsyncRedisIds]:
    """A fresh ``AsyncRedisIds`` on an embedded Redis of its own (empty)."""
    from sa_redis_ids.asyncio import AsyncRedisIds

    ids = AsyncRedisIds.embedded()
    redis_clock.track(ids)
    try:
        yield ids
    finally:
        _close_async(ids)


def _close_async(ids: AsyncRedisIds) -> None:
    """Close the pools unless an event loop runs here (then the loop's owner closes them)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(ids.aclose())


@pytest.fixture
def redis_ids_for(
    request: pytest.FixtureRequest, redis_clock: RedisClockControl
) -> Iterator[Callable[[RedisIdsBase], RedisIdsBase]]:
    """``redis_ids_for(app_ids)``: run ``app_ids`` on the test's instance until the test ends.

    The test's instance is ``redis_ids`` for a ``RedisIds`` and ``async_redis_ids`` for an
    ``AsyncRedisIds``; it is returned. Every generator ``app_ids`` made (or makes during the
    test) then takes IDs from it with fresh high-water marks and buffers, and follows
    ``redis_clock``; at teardown ``app_ids`` is as before (see ``RedisIds.use``). Asking twice
    for the same ``app_ids`` returns the same instance without swapping again.
    """
    stack = ExitStack()
    swapped: dict[int, Any] = {}

    def swap(app_ids: RedisIdsBase) -> RedisIdsBase:
        from sa_redis_ids.ids import RedisIdsBase

        if not isinstance(app_ids, RedisIdsBase):
            raise TypeError(
                f"redis_ids_for takes a RedisIds or AsyncRedisIds, not {type(app_ids).__name__}"
            )
        if id(app_ids) in swapped:
            return swapped[id(app_ids)]  # type: ignore[no-any-return]
        name = "async_redis_ids" if app_ids.asynchronous else "redis_ids"
        target: RedisIdsBase = request.getfixturevalue(name)
        stack.enter_context(app_ids.use(target))
        swapped[id(app_ids)] = target
        redis_clock.track(app_ids)
        return target

    with stack:
        yield swap
