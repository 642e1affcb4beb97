"""An instance keeps a bounded number of generators; one evicted and built again repeats nothing.

An application that makes a namespace per tenant asks for a new generator per request; the
instance keeps the ``generators_kept`` most recently asked and finds the others only while
something else holds them.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import weakref
from collections import Counter
from typing import Any

import pytest

from sa_redis_ids import Buffering, ConfigError, RedisIds
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.generators.cache import GENERATORS_KEPT
from tests.conftest import Backend


def in_memory(ids: Any) -> int:
    gc.collect()
    return len(ids.generators)


def test_many_namespaces_keep_a_bounded_number_of_generators() -> None:
    ids = RedisIds.embedded()
    assert ids.generators_kept == GENERATORS_KEPT
    ids.generators_kept = 50
    for tenant in range(500):
        ids.short_id(f"tenant{tenant}", pool_size=100)
    assert in_memory(ids) == 50
    ids.generators_kept = 10
    assert in_memory(ids) == 10


def test_letting_go_of_a_generator_is_said_once_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ids = RedisIds.embedded()
    ids.generators_kept = 2
    with caplog.at_level(logging.WARNING, logger="sa_redis_ids"):
        for tenant in range(2):
            ids.sequence(f"tenant{tenant}")
        assert ids.generators_let_go == 0 and caplog.records == []
        for tenant in range(2, 6):
            ids.sequence(f"tenant{tenant}")
    assert ids.generators_let_go == 4
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 1 and "generators_kept=2" in messages[0]


def test_the_most_recently_asked_are_kept_and_the_same_object() -> None:
    ids = RedisIds.embedded()
    ids.generators_kept = 3
    first = [id(ids.sequence(f"t{n}")) for n in range(3)]
    assert [id(ids.sequence(f"t{n}")) for n in range(3)] == first
    kept = ids.sequence("t0")  # now the most recently asked
    for n in range(3, 6):
        ids.sequence(f"t{n}")
    assert ids.sequence("t0") is kept  # held here: still the same object


def test_a_generator_held_elsewhere_stays_the_same_object() -> None:
    ids = RedisIds.embedded()
    ids.generators_kept = 0
    held = ids.sequence("orders")
    for tenant in range(100):
        ids.sequence(f"tenant{tenant}")
    assert in_memory(ids) == 1
    assert ids.sequence("orders") is held
    with pytest.raises(ConfigError):  # the options check still sees it
        ids.sequence("orders", start=5)


def test_generators_kept_refuses_what_is_not_a_count() -> None:
    ids = RedisIds.embedded()
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ConfigError, match="generators_kept"):
            ids.generators_kept = bad  # type: ignore[assignment]


@pytest.mark.parametrize("backend", ["fake", "redis"], indirect=True)
def test_values_stay_unique_across_eviction(backend: Backend) -> None:
    """Threads draw from 5 namespaces of each strategy with room for 2 generators: each is
    evicted and built anew several times (buffers dropped, floors and marks started afresh)."""
    ids = backend.ids()
    ids.generators_kept = 2
    makers = {
        "sequence": lambda ns: ids.sequence(ns, block=Buffering(block=5, prefetch=None)),
        "short_id": lambda ns: ids.short_id(ns, pool_size=20_000, offset=0),
        "date_prefixed": lambda ns: ids.date_prefixed(ns, length=12, block=5),
        "daily_code": lambda ns: ids.daily_code(ns, digits=5),
        "snowflake": lambda ns: ids.snowflake(ns),
    }
    keys = [(strategy, f"{strategy}{n}") for strategy in makers for n in range(5)]
    drawn: dict[tuple[str, str], list[Any]] = {key: [] for key in keys}
    built: Counter[tuple[str, str]] = Counter()
    last: dict[tuple[str, str], weakref.ref[Any]] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def draw() -> None:
        try:
            for _ in range(3):
                for strategy, namespace in keys:
                    generator = makers[strategy](namespace)
                    values = [generator.next_id(), *generator.next_ids(2)]
                    with lock:
                        drawn[(strategy, namespace)] += values
                        seen = last.get((strategy, namespace))
                        if seen is None or seen() is not generator:  # a new object
                            built[(strategy, namespace)] += 1
                            last[(strategy, namespace)] = weakref.ref(generator)
                    del generator
                gc.collect()  # free the evicted generators now (they hold reference cycles)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=draw) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for key, values in drawn.items():
        repeated = [value for value, times in Counter(values).items() if times > 1]
        assert not repeated, (key, repeated)
        assert len(values) == 3 * 3 * 3
    assert sum(built[key] > 1 for key in keys) > len(keys) // 2, built  # built anew
    # The embedded Redis's connections each keep the last error reply they parsed (a NOSCRIPT),
    # and with its traceback the call that got it: at most one generator per connection (those
    # of the pool, as many as the threads needed at once, and the fast lane's own).
    pool = ids.nodes.nodes[0].client.connection_pool
    extra = pool._created_connections + 1 if backend.name == "fake" else 0
    assert in_memory(ids) <= 2 + extra, ids.generators


def test_asyncio_faces_are_bounded_too() -> None:
    ids = AsyncRedisIds.embedded()
    ids.generators_kept = 5
    held = ids.sequence("held")

    async def draw() -> list[int]:
        return [await ids.sequence(f"tenant{tenant}").next_id() for tenant in range(200)]

    assert asyncio.run(draw()) == [1] * 200
    gc.collect()
    assert len(ids.generators) == 5 + 1
    assert ids._fronts.held == 5
    assert ids.sequence("held") is held
    assert asyncio.run(held.next_id()) == 1
