"""Draw IDs from many threads in several processes and count duplicates.

A *spec* says how a worker process builds its generator, since a live client cannot cross a
process boundary: ``GeneratorSpec(target, prefix, factory, namespace, options)`` where ``target``
is ``{"urls": [...]}`` for independent nodes or ``{"cluster": url}`` for a Redis Cluster.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sa_redis_ids import RedisIds
from sa_redis_ids.generators.base import IdGenerator
from tests.support.processes import process_context


@dataclass(frozen=True)
class GeneratorSpec:
    target: dict[str, Any]
    prefix: str
    factory: str
    namespace: str
    options: dict[str, Any] = field(default_factory=dict)
    batch: int = 1
    """Values per call: 1 uses ``next_id()``, more uses ``next_ids(batch)``."""

    def build(self) -> IdGenerator[Any]:
        if "cluster" in self.target:
            ids = RedisIds.from_url(self.target["cluster"], prefix=self.prefix, cluster=True)
        else:
            urls = self.target["urls"]
            ids = (
                RedisIds.from_url(urls[0], prefix=self.prefix)
                if len(urls) == 1
                else RedisIds.from_urls(urls, prefix=self.prefix)
            )
        generator: IdGenerator[Any] = getattr(ids, self.factory)(self.namespace, **self.options)
        return generator


def draw_in_threads(spec: GeneratorSpec, threads: int, per_thread: int) -> list[Any]:
    """``threads`` threads sharing one generator, each drawing ``per_thread`` values."""
    return draw_from(spec.build(), threads, per_thread, batch=spec.batch)


def draw_from(generator: Any, threads: int, per_thread: int, *, batch: int = 1) -> list[Any]:
    """``threads`` threads sharing ``generator``, each drawing ``per_thread`` values (``batch`` 1:
    with ``next_id()``; more: with ``next_ids(batch)``)."""
    results: list[list[Any]] = [[] for _ in range(threads)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(threads)

    def work(slot: int) -> None:
        try:
            barrier.wait()
            out = results[slot]
            while len(out) < per_thread:
                if batch == 1:
                    out.append(generator.next_id())
                else:
                    out.extend(generator.next_ids(min(batch, per_thread - len(out))))
        except BaseException as exc:  # reported to the parent below
            errors.append(exc)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    if errors:
        raise errors[0]
    return [value for chunk in results for value in chunk]


def released_together(
    action: Callable[[], Any], count: int
) -> tuple[list[Any], list[BaseException]]:
    """Run ``action`` once in each of ``count`` threads released at once by a barrier.

    Returns what the calls returned and the errors they raised (seed 004's 100-thread test).
    """
    barrier = threading.Barrier(count)
    results: list[Any] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            results.append(action())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


def _process_main(spec: GeneratorSpec, threads: int, per_thread: int) -> list[Any]:
    return draw_in_threads(spec, threads, per_thread)


def draw_in_processes(
    spec: GeneratorSpec, *, processes: int, threads: int, per_thread: int
) -> list[Any]:
    """``processes`` new processes × ``threads`` threads × ``per_thread`` values, all returned."""
    ctx = process_context()
    with ctx.Pool(processes) as pool:
        chunks = pool.starmap(_process_main, [(spec, threads, per_thread)] * processes)
    return [value for chunk in chunks for value in chunk]


def duplicates(values: Sequence[Any]) -> dict[Any, int]:
    """The values that occur more than once, with their counts (empty means all unique)."""
    return {value: n for value, n in Counter(values).items() if n > 1}
