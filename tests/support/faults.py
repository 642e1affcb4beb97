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

A load's workers use the sync ``RedisIds`` or, with ``front="asyncio"``, ``AsyncRedisIds`` (one
task per thread slot). *Late* workers (``late=``) are spawned with the others but make their
``RedisIds`` only once the fault returned: processes started inside a failure window.

While the workers draw, the CPU is saturated by other processes (`tests.support.cpu_load.cpu_load`,
one per core): a guarantee that only holds on an idle machine fails the test.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sa_redis_ids import RedisIds, SaRedisIdsError
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.ids import RedisIdsBase
from tests.support.cpu_load import cpu_load
from tests.support.processes import process_context

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
    front: str = "sync"
    """``"sync"`` (``RedisIds``, threads) or ``"asyncio"`` (``AsyncRedisIds``, tasks)."""

    def ids(self) -> Any:
        kind: type[RedisIdsBase] = AsyncRedisIds if self.front == "asyncio" else RedisIds
        target = self.target
        if "cluster" in target:
            return kind.from_url(
                target["cluster"], prefix=self.prefix, cluster=True, **self.options
            )
        if "sentinel" in target:
            return kind.from_sentinel(
                target["sentinel"], target["service"], prefix=self.prefix, **self.options
            )
        urls = target["urls"]
        if len(urls) == 1:
            return kind.from_url(urls[0], prefix=self.prefix, **self.options)
        return kind.from_urls(urls, prefix=self.prefix, **self.options)


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
    if load.front == "asyncio":
        asyncio.run(_draw_async(load, ready, done, stop, out))
        return
    ids = load.ids()
    generators = [(label, getattr(ids, factory)(label, **opts)) for label, factory, opts in CONFIGS]
    results: dict[str, Drawn] = {label: Drawn() for label, _, _ in CONFIGS}
    give_up = time.monotonic() + load.seconds
    for label, generator in generators:  # each receives something from the nodes first
        while True:
            try:
                results[label].values.append(generator.next_id())
                break
            except SaRedisIdsError as exc:  # a late worker may start inside a fault
                results[label].errors[type(exc).__name__] += 1
                if time.monotonic() > give_up:
                    raise
                time.sleep(0.005)
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


async def _draw_async(load: Load, ready: Any, done: Any, stop: Any, out: Any) -> None:
    """:func:`_draw` on ``AsyncRedisIds``: ``load.threads`` tasks on one event loop."""
    ids = load.ids()
    generators = [(label, getattr(ids, factory)(label, **opts)) for label, factory, opts in CONFIGS]
    results: dict[str, Drawn] = {label: Drawn() for label, _, _ in CONFIGS}
    give_up = time.monotonic() + load.seconds
    for label, generator in generators:
        while True:
            try:
                results[label].values.append(await generator.next_id())
                break
            except SaRedisIdsError as exc:
                results[label].errors[type(exc).__name__] += 1
                if time.monotonic() > give_up:
                    raise
                await asyncio.sleep(0.005)
    await asyncio.get_running_loop().run_in_executor(None, ready.wait)
    deadline = time.monotonic() + load.seconds

    async def work(slot: int) -> None:
        turn = slot
        while time.monotonic() < deadline and not stop.is_set():
            label, generator = generators[turn % len(generators)]
            turn += 1
            faulted = done.is_set()
            drawn = results[label]
            try:
                if turn % 5 == 0:
                    drawn.values.extend(await generator.next_ids(7))
                else:
                    drawn.values.append(await generator.next_id())
                if faulted:
                    drawn.after += 1
            except SaRedisIdsError as exc:
                drawn.errors[type(exc).__name__] += 1
                await asyncio.sleep(0.005)

    try:
        await asyncio.gather(*(work(i) for i in range(load.threads)))
    except BaseException as exc:
        out.put(("failed", repr(exc)))
        return
    finally:
        await ids.aclose()
    for label, generator in generators:
        results[label].rewinds = generator.rewinds
    out.put(("ok", results))


def _late(worker: Callable[..., None], go: Any, started: Any, load: Any, *args: Any) -> None:
    """A worker started inside the fault: it waits for ``go``, tells the parent at ``started``
    and only then connects and draws (its ``ready`` is already set)."""
    go.wait()
    started.wait()
    worker(load, *args)


def run_beside_fault(
    worker: Callable[..., None],
    load: Any,
    fault: Callable[[], Any],
    *,
    processes: int = 3,
    at: float = 1.0,
    after: float = 1.0,
    also: Sequence[Any] = (),
    late: Sequence[Any] = (),
    during: Callable[[Any], Any] | None = None,
) -> list[Any]:
    """Start ``processes`` spawned ``worker(load, ready, done, stop, out)``; once all wait at the
    ``ready`` barrier, call ``fault()`` ``at`` seconds later, set ``done`` when it returned and
    ``stop`` ``after`` seconds later. Each worker puts ``("ok", payload)`` or ``("failed", why)``
    on ``out``; returns the payloads.

    ``also``: loads of more workers that run as those of ``load`` do. ``late``: loads of more
    workers, spawned with the others (so their imports are done) but
    connecting only when ``fault()`` returned; ``during(fault's result)`` runs once they drew
    their first values (e.g. the rest of a failure window), before the ``after`` seconds.
    The CPU is saturated from the barrier to the stop."""
    ctx = process_context()
    ready, late_ready = ctx.Barrier(processes + len(also) + 1), ctx.Barrier(len(late) + 1)
    done, stop, go, ready_now = ctx.Event(), ctx.Event(), ctx.Event(), ctx.Event()
    ready_now.set()
    out = ctx.Queue()
    workers = [
        ctx.Process(target=worker, args=(each, ready, done, stop, out))
        for each in [*[load] * processes, *also]
    ]
    workers += [
        ctx.Process(target=_late, args=(worker, go, late_ready, each, ready_now, done, stop, out))
        for each in late
    ]
    for process in workers:
        process.start()
    try:
        ready.wait(timeout=60)
        with cpu_load():
            time.sleep(at)
            try:
                result = fault()
                if late:
                    go.set()
                    late_ready.wait(timeout=60)
                if during is not None:
                    during(result)
            finally:
                done.set()
                time.sleep(after)
                stop.set()
        return reports(workers, out, timeout=60 + load.seconds)
    finally:
        stop_all(workers)


def reports(workers: list[Any], out: Any, *, timeout: float) -> list[Any]:
    """What each worker process put on ``out`` as ``("ok", payload)``; a worker that reports an
    error, or none within ``timeout`` seconds, raises ``RuntimeError``."""
    payloads = []
    for _ in workers:
        try:
            status, payload = out.get(timeout=timeout)
        except queue.Empty:
            raise RuntimeError("a load worker did not report") from None
        if status != "ok":
            raise RuntimeError(f"a load worker failed: {payload}")
        payloads.append(payload)
    return payloads


def stop_all(workers: list[Any]) -> None:
    """Join each worker process, killing one that does not end within 10 s."""
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
    also: Sequence[Load] = (),
    late: Sequence[Load] = (),
    during: Callable[[Any], Any] | None = None,
) -> dict[str, Drawn]:
    """Run ``processes`` workers on ``load``, call ``fault()`` ``at`` seconds into drawing, and
    stop them ``after`` seconds after it returned (and ``during`` ran; ``also`` and ``late``
    workers: see :func:`run_beside_fault`); what they drew, per generator, across every worker."""
    merged: dict[str, Drawn] = {label: Drawn() for label, _, _ in CONFIGS}
    payloads = run_beside_fault(
        _draw,
        load,
        fault,
        processes=processes,
        at=at,
        after=after,
        also=also,
        late=late,
        during=during,
    )
    for payload in payloads:
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
