"""Unbuffered IDs at concurrency: many threads or asyncio tasks calling ``next_id()`` at once.

Each strategy's generator is shared by every caller (threads of one process, or tasks of one event
loop), so concurrent calls share round trips (see ``sa_redis_ids.sharing``); the peer is the
plain command at the same concurrency on one client: redis-py ``INCR`` from as many threads, and
``redis.asyncio`` ``INCR`` from as many tasks. A sequence with ``share_calls = False`` shows what
the same callers get with one round trip each. The contenders run in alternating rounds, so they
see the same load; the results are ``(name, mode, ids, seconds, server CPU seconds)``, the INCR
peer first. The server's CPU (``INFO cpu``, user and system, read before and after each round) is
what the Redis core spent on the contender's IDs: shared calls make one script call serve many
IDs. It is ``None`` on a cluster (its nodes report apart).
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import redis

from benchmarks.server_info import cpu_seconds
from sa_redis_ids import RedisIds

#: The strategies measured at concurrency, with options that let a run take many IDs.
CONCURRENT: dict[str, dict[str, Any]] = {
    "sequence": {},
    "snowflake": {},
    "daily_code": {"digits": 9},
}

Measured = tuple[str, str, int, float, float | None]
"""``(strategy, mode, ids, seconds, server CPU seconds or None)`` of one contender over every
round."""


def _server_cpu(client: Any) -> float:
    """The server's CPU seconds so far (`cpu_seconds`); 0.0 without a client (a cluster)."""
    return 0.0 if client is None else cpu_seconds(client)


def _results(totals: dict[tuple[str, str], list[float]], cluster: bool) -> list[Measured]:
    return [
        (name, how, int(count), seconds, None if cluster else cpu)
        for (name, how), (count, seconds, cpu) in totals.items()
    ]


def _contenders(ids: Any, prefix: str, mode: str) -> dict[tuple[str, str], Any]:
    """Each strategy's ``next_id`` (a generator shared by all callers), and an unshared sequence."""
    found: dict[tuple[str, str], Any] = {}
    for name, options in CONCURRENT.items():
        generator = getattr(ids, name)(f"bench_conc_{name}", **options)
        found[(name, f"next_id(), {mode}")] = generator
    alone = ids.sequence("bench_conc_alone")
    alone.share_calls = False
    found[("sequence", f"next_id(), {mode}, share_calls=False")] = alone
    return found


def threads_seconds(call: Callable[[], object], threads: int, per_thread: int) -> float:
    """Seconds for ``threads`` threads to call ``call()`` ``per_thread`` times each."""
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            for _ in range(per_thread):
                call()
        except BaseException as exc:  # reported below
            errors.append(exc)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in pool:
        thread.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    return seconds


def measure_threads(
    url: str, prefix: str, *, cluster: bool, threads: int, ids_each: int, rounds: int
) -> list[Measured]:
    """redis-py ``INCR`` and each strategy's ``next_id()`` from ``threads`` threads."""
    client: Any = (
        redis.RedisCluster.from_url(url, socket_timeout=10)
        if cluster
        else redis.Redis.from_url(url, socket_timeout=10)
    )
    library = RedisIds.from_url(url, prefix=prefix, cluster=cluster, socket_timeout=10)
    incr_key = f"{prefix}:{{bench}}:threads_incr"
    mode = f"{threads} threads"
    calls: dict[tuple[str, str], Callable[[], object]] = {
        ("redis-py", f"INCR, {mode}"): lambda: client.incr(incr_key)
    }
    for key, generator in _contenders(library, prefix, mode).items():
        calls[key] = generator.next_id
    totals = {key: [0, 0.0, 0.0] for key in calls}
    info = None if cluster else client
    try:
        for call in calls.values():
            threads_seconds(call, threads, 2)  # scripts loaded, connections opened
        per_thread = max(1, ids_each // rounds // threads)
        for _ in range(rounds):
            for key, call in calls.items():
                before = _server_cpu(info)
                totals[key][0] += threads * per_thread
                totals[key][1] += threads_seconds(call, threads, per_thread)
                totals[key][2] += _server_cpu(info) - before
    finally:
        library.close()
        client.close()
    return _results(totals, cluster)


async def _gather_seconds(
    call: Callable[[], Awaitable[object]], tasks: int, per_task: int
) -> float:
    """Seconds for ``tasks`` concurrent tasks to await ``call()`` ``per_task`` times each."""

    async def work() -> None:
        for _ in range(per_task):
            await call()

    start = time.perf_counter()
    await asyncio.gather(*(work() for _ in range(tasks)))
    return time.perf_counter() - start


async def _close(thing: Any) -> None:
    for name in ("aclose", "close"):
        method = getattr(thing, name, None)
        if callable(method):
            done = method()
            if inspect.isawaitable(done):
                await done
            return


async def measure_async(
    url: str, prefix: str, *, cluster: bool, tasks: int, ids_each: int, rounds: int
) -> list[Measured]:
    """``redis.asyncio`` ``INCR`` and each strategy's asyncio ``next_id()`` from ``tasks`` tasks."""
    from sa_redis_ids.asyncio import AsyncRedisIds

    if cluster:
        from redis.asyncio.cluster import RedisCluster

        client: Any = RedisCluster.from_url(url, socket_timeout=10)
    else:
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(url, socket_timeout=10)
    options = {"cluster": True} if cluster else {}
    library = AsyncRedisIds.from_url(url, prefix=prefix, **options)
    incr_key = f"{prefix}:{{bench}}:async_incr"
    mode = f"{tasks} tasks"
    calls: dict[tuple[str, str], Callable[[], Awaitable[object]]] = {
        ("redis.asyncio", f"INCR, {mode}"): lambda: client.incr(incr_key)
    }
    for (name, how), generator in _contenders(library, prefix, mode).items():
        calls[(f"{name} (async)", how)] = generator.next_id
    totals = {key: [0, 0.0, 0.0] for key in calls}
    info = None if cluster else redis.Redis.from_url(url, socket_timeout=10)
    try:
        for call in calls.values():
            await _gather_seconds(call, tasks, 2)  # every task's connection opened
        per_task = max(1, ids_each // rounds // tasks)
        for _ in range(rounds):
            for key, call in calls.items():
                before = _server_cpu(info)
                totals[key][0] += tasks * per_task
                totals[key][1] += await _gather_seconds(call, tasks, per_task)
                totals[key][2] += _server_cpu(info) - before
    finally:
        await _close(library)
        await _close(client)
        if info is not None:
            info.close()
    return _results(totals, cluster)
