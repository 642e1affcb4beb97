"""Taking ``n`` values from a generator in as few ``next_ids`` calls as it allows, sync or awaited.

A column is filled either by an [`IdGenerator`][sa_redis_ids.IdGenerator] (sync redis-py clients) or by an
[`AsyncIdGenerator`][sa_redis_ids.generators.aio.AsyncIdGenerator] (``redis.asyncio`` clients). The ORM hooks
and column defaults are synchronous code; under ``AsyncSession`` SQLAlchemy runs them inside a
greenlet driven by the event loop, so an ``AsyncIdGenerator``'s ``next_ids`` is awaited on that
loop from there (`await_in_greenlet`): no thread, and
the loop serves other tasks while Redis answers. Under a plain ``Session`` nothing drives a loop,
and an ``AsyncIdGenerator`` is refused with [`ConfigError`][sa_redis_ids.ConfigError].
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, TypeAlias

from sqlalchemy.exc import MissingGreenlet

from sa_redis_ids.buffering import drop_floorless, floorless_fetches, floorless_since
from sa_redis_ids.errors import ConfigError, SequenceExhausted
from sa_redis_ids.generators.aio import AsyncIdGenerator
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.orm.sqlalchemy_internals import await_in_greenlet

AnyGenerator: TypeAlias = IdGenerator[Any] | AsyncIdGenerator[Any]
"""What fills a column: a sync generator or its asyncio face."""


def check_generator(generator: object, who: str) -> None:
    """Raise ``TypeError`` unless ``generator`` is an ID generator (sync or asyncio)."""
    if not isinstance(generator, (IdGenerator, AsyncIdGenerator)):
        raise TypeError(f"{who} needs an ID generator, not {type(generator).__name__}")


def core_of(generator: AnyGenerator) -> IdGenerator[Any]:
    """The strategy's generator: itself, or the one an ``AsyncIdGenerator`` wraps (its bounds,
    Python type and namespace are what the column checks read)."""
    if isinstance(generator, AsyncIdGenerator):
        core: IdGenerator[Any] = generator.generator
        return core
    return generator


FLOOR_TRIES = 3
"""How often a flush takes its values again when a block fetched without the floor landed while
it took them (another thread's first direct draw): the values it took then are gaps. After a
first try the floor can be read everywhere in the process, so a second is the most it needs."""


def batch_limit(generator: AnyGenerator) -> int:
    """The most values one ``next_ids`` call of ``generator`` may take (its ``max_batch``)."""
    return core_of(generator).max_batch


def _sizes(generator: AnyGenerator, n: int) -> list[int]:
    limit = batch_limit(generator)
    return [min(limit, n - start) for start in range(0, n, limit)]


def _checked(generator: AnyGenerator, values: list[Any], n: int) -> list[Any]:
    if len(values) != n:
        raise SequenceExhausted(
            f"next_ids gave {len(values)} values for {n} objects; none of them was used",
            namespace=core_of(generator).namespace,
        )
    return values


def take_sync(generator: IdGenerator[Any], n: int) -> list[Any]:
    """``n`` values of a sync generator: one ``next_ids`` call, or one per ``max_batch`` values.

    Raises [`SequenceExhausted`][sa_redis_ids.SequenceExhausted] if the generator gave fewer values than asked
    (rather than leave objects without an ID): the values it gave are dropped (gaps). Values a
    buffer fetched without the floor are not handed to the flush (`drop_floorless`).
    """
    buffer = getattr(generator, "buffer", None)
    for _ in range(FLOOR_TRIES):
        fetched = floorless_fetches(buffer)  # before the drop: a block landing after it counts
        drop_floorless(generator, buffer)
        values: list[Any] = []
        for size in _sizes(generator, n):
            values.extend(generator.next_ids(size))
        if not floorless_since(generator, buffer, fetched):
            break  # else a block fetched without the floor landed meanwhile: take them again
    return _checked(generator, values, n)


async def take_async(generator: AsyncIdGenerator[Any], n: int) -> list[Any]:
    """`take_sync` of an ``AsyncIdGenerator``, awaited."""
    for _ in range(FLOOR_TRIES):
        fetched = floorless_fetches(generator.buffer)
        drop_floorless(generator.generator, generator.buffer)
        values: list[Any] = []
        for size in _sizes(generator, n):
            values.extend(await generator.next_ids(size))
        if not floorless_since(generator.generator, generator.buffer, fetched):
            break
    return _checked(generator, values, n)


async def _take_each(wanted: Mapping[AsyncIdGenerator[Any], int]) -> list[list[Any]]:
    """Each generator's values, the generators awaited concurrently (one round trip in time)."""
    if len(wanted) == 1:
        ((generator, n),) = wanted.items()
        return [await take_async(generator, n)]
    found = await asyncio.gather(
        *(take_async(generator, n) for generator, n in wanted.items()), return_exceptions=True
    )
    for each in found:
        if isinstance(each, BaseException):
            raise each
    return [each for each in found if not isinstance(each, BaseException)]


def _not_on_a_loop(generators: list[AsyncIdGenerator[Any]]) -> ConfigError:
    names = ", ".join(repr(g) for g in generators)
    return ConfigError(
        f"{names} uses redis.asyncio clients: its IDs can only be awaited under an AsyncSession "
        f"(or AsyncConnection), and this Session or connection is synchronous; fill this model "
        f"from a generator of the sync RedisIds (or use an AsyncSession)",
        namespace=core_of(generators[0]).namespace,
    )


def take_all(wanted: Mapping[AnyGenerator, int]) -> dict[AnyGenerator, list[Any]]:
    """``n`` values of each generator, from synchronous code (a flush hook, a column default).

    Sync generators are called in turn. ``AsyncIdGenerator`` calls are awaited together on the
    event loop of the ``AsyncSession`` running this code (see the module docstring); under a sync
    ``Session`` they raise [`ConfigError`][sa_redis_ids.ConfigError] before any Redis call. All or
    nothing: an error from any generator leaves the values others gave unused (gaps).
    """
    asynchronous = [g for g in wanted if isinstance(g, AsyncIdGenerator)]
    taken: dict[AnyGenerator, list[Any]] = {}
    if asynchronous:
        try:
            found = await_in_greenlet(_take_each({g: wanted[g] for g in asynchronous}))
        except MissingGreenlet:
            raise _not_on_a_loop(asynchronous) from None
        taken.update(zip(asynchronous, found, strict=True))
    for generator, n in wanted.items():
        if not isinstance(generator, AsyncIdGenerator):
            taken[generator] = take_sync(generator, n)
    return taken


def take(generator: AnyGenerator, n: int) -> list[Any]:
    """`take_all` of one generator."""
    if isinstance(generator, AsyncIdGenerator):
        return take_all({generator: n})[generator]
    return take_sync(generator, n)


async def take_all_async(wanted: Mapping[AnyGenerator, int]) -> dict[AnyGenerator, list[Any]]:
    """`take_all` from a coroutine: ``AsyncIdGenerator`` calls awaited together, each sync
    generator's call run in a worker thread (``asyncio.to_thread``) so the loop stays free."""
    asynchronous = [g for g in wanted if isinstance(g, AsyncIdGenerator)]
    taken: dict[AnyGenerator, list[Any]] = {}
    if asynchronous:
        found = await _take_each({g: wanted[g] for g in asynchronous})
        taken.update(zip(asynchronous, found, strict=True))
    for generator, n in wanted.items():
        if not isinstance(generator, AsyncIdGenerator):
            taken[generator] = await asyncio.to_thread(take_sync, generator, n)
    return taken
