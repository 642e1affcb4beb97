"""A load of several processes × threads drawing from every strategy while the test injects a fault.

Every worker process builds one ``RedisIds`` on the target and one generator per entry of
:data:`CONFIGS`, draws one value of each (so every process has received values from the nodes
before the fault, as in a running application), waits at a barrier with the parent, then draws in
round robin for ``seconds``. Errors raised by the library during the fault (``RedisUnavailable``,
``ClockMovedBackwards``…) are counted and drawing goes on; anything else fails the worker. The parent
injects the fault after ``at`` seconds and collects every value, so a test counts duplicates per
strategy.

Workers draw until the parent tells them to stop, ``after`` seconds after the fault returned (a
failover helper returns once the new master serves), and count what they drew after it, so a test
knows the generators worked again past the fault.

While the workers draw, the CPU is saturated by other processes (`tests.support.cpu_load.cpu_load`,
one per core): a guarantee that only holds on an idle machine fails the test.
"""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sa_redis_ids import RedisIds, SaRedisIdsError
from tests.support.cpu_load import cpu_load

CONFIGS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("seq", "sequence", {}),
    ("seq_block", "sequence", {"block": 200}),
    ("dp", "date_prefixed", {}),
    ("dp_block", "date_prefixed", {"block": 200}),
    ("dc", "daily_code", {"digits": 8, "tz": "UTC"}),
    ("sf", "snowflake", {}),
    ("sid", "short_id", {"pool_size": 4_000_000, "offset": 10_000_000}),
)
"""Label (also the namespace), factory and options of each generator a worker draws from."""


@dataclass(frozen=True)
class Load:
    target: dict[str, Any]
    """``{"urls": [...]}`` (one or N independent nodes), ``{"cluster": url}`` or
    ``{"sentinel": [(host, port), ...], "service": name}``."""
    prefix: str
    threads: int = 2
    seconds: float = 30.0
    """The longest a worker draws (it stops earlier when the parent says so)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Extra options of the ``RedisIds`` constructor (``replicas=`` …)."""

    def ids(self) -> RedisIds:
        target = self.target
        if "cluster" in target:
            return RedisIds.from_url(
                target["cluster"], prefix=self.prefix, cluster=True, **self.options
            )
        if "sentinel" in target:
            return RedisIds.from_sentinel(
                target["sentinel"], target["service"], prefix=self.prefix, **self.options
            )
        urls = target["urls"]
        if len(urls) == 1:
            return RedisIds.from_url(urls[0], prefix=self.prefix, **self.options)
        return RedisIds.from_urls(urls, prefix=self.prefix, **self.options)


@dataclass
class Drawn:
    """What the workers drew from one generator."""

    values: list[Any] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    rewinds: int = 0
    within: int = 0
    """Values one process received more than once (summed over the processes)."""
    after: int = 0
    """Values drawn after the fault returned."""

    def duplicates(self) -> int:
        """How many values were handed out more than once (each extra copy counts)."""
        return len(self.values) - len(set(self.values))


def _draw(load: Load, ready: Any, done: Any, stop: Any, out: Any) -> None:
    ids = load.ids()
    generators = [(label, getattr(ids, factory)(label, **opts)) for label, factory, opts in CONFIGS]
    for _, generator in generators:
        generator.next_id()  # received something from the nodes before the fault
    results: dict[str, Drawn] = {label: Drawn() for label, _, _ in CONFIGS}
    failures: list[BaseException] = []
    lock = threading.Lock()

    def work(slot: int) -> None:
        mine: dict[str, list[Any]] = {label: [] for label, _, _ in CONFIGS}
        errors: dict[str, Counter[str]] = {label: Counter() for label, _, _ in CONFIGS}
        after: Counter[str] = Counter()
        deadline = time.monotonic() + load.seconds
        turn = slot
        try:
            while time.monotonic() < deadline and not stop.is_set():
                label, generator = generators[turn % len(generators)]
                turn += 1
                faulted = done.is_set()
                try:
                    if turn % 5 == 0:
                        mine[label].extend(generator.next_ids(7))
                    else:
                        mine[label].append(generator.next_id())
                    if faulted:
                        after[label] += 1
                except SaRedisIdsError as exc:
                    errors[label][type(exc).__name__] += 1
                    time.sleep(0.005)
        except BaseException as exc:
            failures.append(exc)
        with lock:
            for label in mine:
                results[label].values.extend(mine[label])
                results[label].errors.update(errors[label])
                results[label].after += after[label]

    ready.wait()
    threads = [threading.Thread(target=work, args=(i,)) for i in range(load.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for label, generator in generators:
        results[label].rewinds = generator.rewinds
    out.put(("failed", repr(failures[0])) if failures else ("ok", results))


def run_beside_fault(
    worker: Callable[..., None],
    load: Any,
    fault: Callable[[], Any],
    *,
    processes: int = 3,
    at: float = 1.0,
    after: float = 1.0,
) -> list[Any]:
    """Start ``processes`` spawned ``worker(load, ready, done, stop, out)``; once all wait at the
    ``ready`` barrier, call ``fault()`` ``at`` seconds later, set ``done`` when it returned and
    ``stop`` ``after`` seconds later, with the CPU saturated from the barrier to the stop. Each
    worker puts ``("ok", payload)`` or ``("failed", why)`` on ``out``; returns the payloads."""
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Barrier(processes + 1)
    done, stop = ctx.Event(), ctx.Event()
    out = ctx.Queue()
    workers = [
        ctx.Process(target=worker, args=(load, ready, done, stop, out)) for _ in range(processes)
    ]
    for process in workers:
        process.start()
    try:
        ready.wait(timeout=60)
        with cpu_load():
            time.sleep(at)
            try:
                fault()
            finally:
                done.set()
                time.sleep(after)
                stop.set()
        payloads = []
        for _ in workers:
            try:
                status, payload = out.get(timeout=60 + load.seconds)
            except queue.Empty:
                raise RuntimeError("a load worker did not report") from None
            if status != "ok":
                raise RuntimeError(f"a load worker failed: {payload}")
            payloads.append(payload)
        return payloads
    finally:
        for process in workers:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()


def run_with_fault(
    load: Load,
    fault: Callable[[], Any],
    *,
    processes: int = 3,
    at: float = 1.0,
    after: float = 1.0,
) -> dict[str, Drawn]:
    """Run ``processes`` workers on ``load``, call ``fault()`` ``at`` seconds into drawing, and
    stop them ``after`` seconds after it returned; what they drew, per generator."""
    merged: dict[str, Drawn] = {label: Drawn() for label, _, _ in CONFIGS}
    for payload in run_beside_fault(_draw, load, fault, processes=processes, at=at, after=after):
        for label, drawn in payload.items():
            merged[label].values.extend(drawn.values)
            merged[label].errors.update(drawn.errors)
            merged[label].rewinds += drawn.rewinds
            merged[label].within += drawn.duplicates()
            merged[label].after += drawn.after
    return merged


def report(results: dict[str, Drawn]) -> str:
    """One line per generator: values, duplicates, heals and errors (printed by the fault tests)."""
    return "\n".join(
        f"{label:10} values={len(d.values):7} duplicates={d.duplicates():5} "
        f"(within one process {d.within}) after the fault={d.after:6} rewinds={d.rewinds:3} "
        f"errors={dict(d.errors)}"
        for label, d in results.items()
    )
