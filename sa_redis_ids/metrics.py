"""Metrics for Prometheus or OpenTelemetry, and the names of the library's loggers.

Install the extra (``pip install 'sa_redis_ids[metrics]'``); the library itself runs without
``prometheus_client`` and ``opentelemetry-api``, which are imported only when metrics are enabled.
Metrics are off until enabled, and then cost nothing per ID handed out from a buffer:

```python
from sa_redis_ids.metrics import enable_prometheus, enable_opentelemetry

enable_prometheus(ids)                  # prometheus_client's default registry, or registry=…
enable_opentelemetry(ids)               # the global meter provider's meter, or meter=…
```

Both may be enabled on one [`RedisIds`][sa_redis_ids.RedisIds] (or
[`AsyncRedisIds`][sa_redis_ids.asyncio.AsyncRedisIds]); several instances may share a registry or meter (their
series add up). [`disable_metrics`][sa_redis_ids.metrics.disable_metrics] stops the reports of an instance.

Measured at each generator call (one ``NodeSet.call_plan``: a direct call, or a buffer's fetch of a
block), labelled by ``id_namespace`` and ``strategy`` (the registered name: ``sequence``,
``short_id`` …). The labels are not ``namespace`` and ``node``: a Kubernetes scrape attaches its
own ``namespace`` and ``node`` target labels, which would rename ours ``exported_namespace`` and
``exported_node``.

| Prometheus / OpenTelemetry | what |
|---|---|
| ``sa_redis_ids_reserved_total``, ``sa_redis_ids.reserved`` | values Redis handed out to this process (a block counts whole when it is fetched) |
| ``sa_redis_ids_call_duration_seconds``, ``sa_redis_ids.call.duration`` | histogram of call durations (failed calls too) |
| ``sa_redis_ids_call_failures_total``, ``sa_redis_ids.call.failures`` | calls that raised, by ``error`` (the exception's class name) |
| ``sa_redis_ids_clock_back_total``, ``sa_redis_ids.clock_back`` | calls refused because the Redis clock went back ([`ClockMovedBackwards`][sa_redis_ids.ClockMovedBackwards]), by ``id_namespace`` |
| ``sa_redis_ids_node_errors_total``, ``sa_redis_ids.node.errors`` | errors that marked a node down, by ``redis_node`` and ``kind`` (the error's class name: ``ConnectionError``, ``TimeoutError`` …) |

Read from the instances when metrics are collected (a scrape, an export), nothing on the per-ID
path; in ``prometheus_client`` multiprocess mode, where a scrape reads every process's files, each
process reads them every ``refresh_seconds`` (5 s) instead, and once more when it exits
([`write_metrics`][sa_redis_ids.metrics.write_metrics]):

| Prometheus / OpenTelemetry | what |
|---|---|
| ``sa_redis_ids_handed_out_total``, ``sa_redis_ids.handed_out`` | values a buffered generator gave to callers (reserved minus buffered and dropped); unbuffered ones hand out what they reserve |
| ``sa_redis_ids_block_refills_total``, ``sa_redis_ids.block.refills`` | blocks a buffer fetched |
| ``sa_redis_ids_buffered_ids``, ``sa_redis_ids.buffer.ids`` | values buffered now |
| ``sa_redis_ids_rewinds_total``, ``sa_redis_ids.rewinds`` | rewinds detected and healed (see `highwater`) |
| ``sa_redis_ids_pool_fill_ratio``, ``sa_redis_ids.pool.fill_ratio`` | how full a short-ID pool is, 0 to 1, by ``id_namespace`` (a ``BITCOUNT`` per node; sync clients only; left out while a node is marked down or cannot answer) |
| ``sa_redis_ids_node_up``, ``sa_redis_ids.node.up`` | 1 while a node is in the rotation, 0 while it is marked down, by ``redis_node`` |
| ``sa_redis_ids_guarantee_lost``, ``sa_redis_ids.guarantee.lost`` | 1 for each guarantee a node cannot give, by ``redis_node`` and ``guarantee``: ``failover_detection`` (``INFO replication`` renamed or denied), ``eviction_check`` (neither ``CONFIG GET`` nor ``INFO memory`` answers); see `sa_redis_ids.redis.capabilities` |

Loggers (standard `logging`; all below ``sa_redis_ids``, which the library never configures):

* ``sa_redis_ids.nodes``: a node goes down (WARNING, once until it answers again, with its name
  and the error) and comes back (INFO).
* ``sa_redis_ids.rewinds``: a node's state was found below what was issued and healed (WARNING).
* ``sa_redis_ids.clock``: the Redis clock went back further than a snowflake tolerates (WARNING,
  with the namespace and the milliseconds).
* ``sa_redis_ids.maintenance``: each maintenance run (INFO, ERROR when a step failed) and a short-ID
  pool past ``fill_warning`` (WARNING).
* ``sa_redis_ids``: an eviction policy that can evict the library's keys (WARNING), a guarantee a
  node cannot give, naming the command it refused (WARNING, once per node), skipped precreation
  of a day on a node (WARNING).
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sa_redis_ids.errors import ClockMovedBackwards, ConfigError
from sa_redis_ids.forksafe import ForkSafe, RenewedLock
from sa_redis_ids.generators import registry as strategies
from sa_redis_ids.generators.abilities import Pool
from sa_redis_ids.ids import RedisIdsBase
from sa_redis_ids.observe import Fanout, Observer
from sa_redis_ids.validation import check_seconds

if TYPE_CHECKING:
    from sa_redis_ids.redis.nodes import NodeSet

log = logging.getLogger("sa_redis_ids.metrics")

DEFAULT_BUCKETS: tuple[float, ...] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
"""Call duration buckets in seconds: a call on a healthy node takes well under a millisecond to a
few; a failover waits socket timeouts."""

Labels = tuple[str, ...]
Samples = dict[Labels, float]


# -- what is read at collection -----------------------------------------------------------------


def strategy_label(code: str) -> str:
    """The registered name of the strategy whose key part is ``code`` (``seq`` → ``sequence``);
    ``code`` itself for a strategy that is not registered."""
    found = _NAMES.get(code)
    if found is None:
        found = next(
            (s.name for s in strategies.strategies() if s.key_part == code),
            code,
        )
        _NAMES[code] = found
    return found


_NAMES: dict[str, str] = {}


class Sources(ForkSafe):
    """The instances one sink reports on (held weakly), and what is read of them at collection."""

    def __init__(self) -> None:
        self._ids: weakref.WeakSet[RedisIdsBase] = weakref.WeakSet()
        self._lock = threading.Lock()
        """Held a moment (no I/O); renewed in a forked child."""
        self.watch_forks()

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()

    def add(self, ids: RedisIdsBase) -> None:
        with self._lock:
            self._ids.add(ids)

    def discard(self, ids: RedisIdsBase) -> None:
        with self._lock:
            self._ids.discard(ids)

    def instances(self) -> list[RedisIdsBase]:
        with self._lock:
            return list(self._ids)

    def buffers(self) -> Iterator[tuple[Any, Labels, Any]]:
        """``(buffer, (namespace, strategy), stats)`` of every buffer in use: a sync instance's
        generator buffers, an asyncio instance's asyncio buffers."""
        for ids in self.instances():
            if ids.asynchronous:
                fronts = list(getattr(ids, "_fronts", {}).values())
                pairs = [(front.generator, front.buffer) for front in fronts]
            else:
                pairs = [(g, getattr(g, "buffer", None)) for g in ids.generators]
            for generator, buffer in pairs:
                if buffer is not None:
                    labels = (generator.namespace, strategy_label(generator.strategy))
                    yield buffer, labels, buffer.stats()

    def counts(self) -> Iterator[tuple[str, Any, Labels, float]]:
        """``(what, owner, labels, count)`` of each buffer and generator, one by one: what the
        counters read from the instances (``handed_out``, ``refills``, ``rewinds``) add up."""
        for buffer, labels, stats in self.buffers():
            yield "handed_out", buffer, labels, stats.ids_issued
            yield "refills", buffer, labels, stats.blocks_taken
        for ids in self.instances():
            for g in ids.generators:
                yield "rewinds", g, (g.namespace, strategy_label(g.strategy)), g.rewinds

    def _sum(self, what: str) -> Samples:
        return _summed((labels, count) for kind, _, labels, count in self.counts() if kind == what)

    def handed_out(self) -> Samples:
        return self._sum("handed_out")

    def refills(self) -> Samples:
        return self._sum("refills")

    def buffered(self) -> Samples:
        return _summed((labels, stats.ids_left) for _, labels, stats in self.buffers())

    def rewinds(self) -> Samples:
        return self._sum("rewinds")

    def pool_fill(self) -> Samples:
        """``(namespace,) → fill ratio`` of each short-ID pool of a sync instance."""
        found: Samples = {}
        for ids in self.instances():
            if ids.asynchronous:
                continue  # its stats() would need an event loop
            if any(node.down_until for node in ids.nodes.nodes):
                continue  # a collection never waits on a node known to be down
            for generator in ids.generators:
                if not isinstance(generator, Pool):
                    continue
                try:
                    stats = generator.stats()
                except Exception as exc:  # a node down: no sample this time
                    log.debug("cannot read the pool of %s: %s", generator.namespace, exc)
                    continue
                found[(generator.namespace,)] = float(stats.fill_ratio)
        return found

    def guarantees_lost(self) -> Samples:
        """``(node, guarantee) → 1`` for each guarantee a probed node cannot give."""
        return {
            (node.name, lost.guarantee): 1.0
            for ids in self.instances()
            for node in ids.nodes.nodes
            if node.capabilities is not None
            for lost in node.capabilities.lost
        }

    def nodes_up(self) -> Samples:
        return {
            (node.name,): 1.0 if node.down_until == 0.0 else 0.0
            for ids in self.instances()
            for node in ids.nodes.nodes
        }


def _summed(pairs: Iterable[tuple[Labels, float]]) -> Samples:
    found: Samples = {}
    for labels, value in pairs:
        found[labels] = found.get(labels, 0) + value
    return found


# -- attaching to an instance -------------------------------------------------------------------


def _check_ids(ids: object, function: str) -> RedisIdsBase:
    if not isinstance(ids, RedisIdsBase):
        raise ConfigError(
            f"{function}(ids) needs a RedisIds or AsyncRedisIds instance as ids, not {ids!r}"
        )
    return ids


def _attach(nodes: NodeSet, sink: Observer) -> None:
    current = nodes.observer
    if current is None:
        nodes.observer = sink
    elif isinstance(current, Fanout):
        if sink not in current.observers:
            nodes.observer = Fanout((*current.observers, sink))
    elif current is not sink:
        nodes.observer = Fanout((current, sink))


def disable_metrics(ids: RedisIdsBase) -> None:
    """Stop reporting ``ids``: its calls are no longer measured, nor its state read. What it
    counted so far is written first; a refresh thread left with no instance to read stops (as at
    ``ids.close()``)."""
    ids = _check_ids(ids, "disable_metrics")
    current, ids.nodes.observer = ids.nodes.observer, None
    if current is not None:
        current.detach(ids)


# -- Prometheus ---------------------------------------------------------------------------------

FORK_WAIT_SECONDS = 1.0
"""How long a fork waits for a write to the metrics in progress (it takes microseconds)."""

DEFAULT_REFRESH_SECONDS = 5.0
"""How often each process brings the series read from its instances up to date, in
``prometheus_client`` multiprocess mode (a scrape in single-process mode reads them itself)."""


def multiprocess_mode() -> bool:
    """Whether ``prometheus_client`` runs in multiprocess mode: ``PROMETHEUS_MULTIPROC_DIR`` set
    (it must be set before ``prometheus_client`` is first imported)."""
    return bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))


class PrometheusMetrics(Observer, ForkSafe):
    """The library's series in one ``prometheus_client`` registry (see the module doc).

    Every series is a ``prometheus_client`` metric, so that multiprocess mode (a pre-fork server
    such as gunicorn) aggregates it across processes. The counters of calls are updated when the
    call ends; the series read from the instances (buffers, rewinds, pool fill, nodes up) are
    brought up to date by [`refresh`][sa_redis_ids.metrics.PrometheusMetrics.refresh]: at each collection of the registry, and in
    multiprocess mode by a daemon thread of each process every ``refresh_seconds`` and once more
    when the process exits (`write_metrics`).

    Fork-safe: every write to ``prometheus_client``'s values (whose locks a forked child would
    inherit held) happens under one lock of this object, which a fork waits for and the child
    renews; Redis is read (pool fill) with no lock held.
    """

    def __init__(
        self,
        registry: Any,
        *,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
        refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
    ):
        from prometheus_client import Counter, Gauge, Histogram

        self.registry = registry
        self.sources = Sources()
        self.refresh_seconds = refresh_seconds
        self._lock = threading.Lock()
        """Held while ``prometheus_client`` values are written (and ``_seen`` read or changed),
        never across I/O."""
        self._seen: weakref.WeakKeyDictionary[Any, dict[str, float]] = weakref.WeakKeyDictionary()
        """What each buffer and generator had counted at the last refresh."""
        self._buffered_labels: set[Labels] = set()
        self._thread: threading.Thread | None = None
        self._thread_pid = 0
        self._held_for_fork = False
        self._stop = threading.Event()
        self._multiprocess = multiprocess_mode()
        # registered first, so that a collection refreshes before the series below are read
        registry.register(_Refresh(self))
        by_call = ["id_namespace", "strategy"]
        self.reserved = Counter(
            "sa_redis_ids_reserved",
            "Values Redis handed out to this process (a block counts whole when fetched)",
            by_call,
            registry=registry,
        )
        self.duration = Histogram(
            "sa_redis_ids_call_duration_seconds",
            "Duration of generator calls to Redis (one per call or block fetch)",
            by_call,
            buckets=buckets,
            registry=registry,
        )
        self.failures = Counter(
            "sa_redis_ids_call_failures",
            "Generator calls that raised, by exception class",
            [*by_call, "error"],
            registry=registry,
        )
        self.clock_back = Counter(
            "sa_redis_ids_clock_back",
            "Calls refused because the Redis clock went back (ClockMovedBackwards)",
            ["id_namespace"],
            registry=registry,
        )
        self.node_errors = Counter(
            "sa_redis_ids_node_errors",
            "Errors that marked a Redis node down, by node and error class",
            ["redis_node", "kind"],
            registry=registry,
        )
        self.handed_out = Counter(
            "sa_redis_ids_handed_out",
            "Values a buffered generator gave to callers",
            by_call,
            registry=registry,
        )
        self.refills = Counter(
            "sa_redis_ids_block_refills",
            "Blocks a buffer fetched from Redis",
            by_call,
            registry=registry,
        )
        self.rewinds = Counter(
            "sa_redis_ids_rewinds",
            "Rewinds of a node's state detected and healed",
            by_call,
            registry=registry,
        )
        self.buffered = Gauge(
            "sa_redis_ids_buffered_ids",
            "Values buffered now",
            by_call,
            registry=registry,
            multiprocess_mode="livesum",  # each live process holds its own buffers
        )
        self.pool_fill = Gauge(
            "sa_redis_ids_pool_fill_ratio",
            "How full a short-ID pool is (0 to 1)",
            ["id_namespace"],
            registry=registry,
            multiprocess_mode="mostrecent",  # one pool in Redis: the latest reading is the truth
        )
        self.node_up = Gauge(
            "sa_redis_ids_node_up",
            "1 while a Redis node is in the rotation, 0 while it is marked down",
            ["redis_node"],
            registry=registry,
            multiprocess_mode="livemin",  # 0 while any live process keeps the node out
        )
        self.guarantee_lost = Gauge(
            "sa_redis_ids_guarantee_lost",
            "1 for each guarantee a Redis node cannot give (a command renamed or denied)",
            ["redis_node", "guarantee"],
            registry=registry,
            multiprocess_mode="livemax",  # 1 while any live process found it lost
        )
        self._labels: dict[tuple[str, str], tuple[Any, Any]] = {}
        self.watch_forks()

    def before_fork(self) -> None:
        # no write half-done in the child: it is held a moment, never across I/O (a thread that
        # forks while it holds the lock itself, from a signal handler, goes on after a second)
        self._held_for_fork = self._lock.acquire(timeout=FORK_WAIT_SECONDS)

    def after_fork_in_parent(self) -> None:
        if self._held_for_fork:
            self._lock.release()

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._thread, self._stop = None, threading.Event()  # the parent's thread is not here

    def call(
        self,
        namespace: str,
        strategy: str,
        seconds: float,
        values: int,
        error: BaseException | None,
    ) -> None:
        if self._multiprocess and self._thread_pid != os.getpid():
            self.start_refreshing()
        key = (namespace, strategy)
        with self._lock:
            children = self._labels.get(key)
            if children is None:
                labels = (namespace, strategy_label(strategy))
                children = (self.reserved.labels(*labels), self.duration.labels(*labels))
                self._labels[key] = children
            reserved, duration = children
            duration.observe(seconds)
            if error is None:
                if values:
                    reserved.inc(values)
                return
            self.failures.labels(namespace, strategy_label(strategy), type(error).__name__).inc()
            if isinstance(error, ClockMovedBackwards):
                self.clock_back.labels(namespace).inc()

    def node_error(self, node: str, kind: str) -> None:
        with self._lock:
            self.node_errors.labels(node, kind).inc()

    def detach(self, ids: object) -> None:
        """Write what ``ids`` counted, then stop reading it; with no instance left, stop this
        process's refresh thread."""
        if not isinstance(ids, RedisIdsBase):
            return
        self.refresh()
        self.sources.discard(ids)
        if not self.sources.instances():
            self.stop_refreshing()

    def refresh(self) -> None:
        """Bring the series read from the instances up to date in this process: the counters grow
        by what the buffers and rewinds counted since the last refresh, the gauges are set."""
        sources = self.sources
        pools = sources.pool_fill()  # Redis I/O (skipped for nodes marked down): before the lock
        with self._lock:
            counters = {
                "handed_out": self.handed_out,
                "refills": self.refills,
                "rewinds": self.rewinds,
            }
            for what, owner, labels, count in sources.counts():
                # by owner, not by label: an instance that goes away takes nothing back
                seen = self._seen.setdefault(owner, {})
                before = seen.get(what, 0.0)
                child = counters[what].labels(*labels)  # shown from 0 on
                if count > before:
                    child.inc(count - before)
                seen[what] = count
            buffered = sources.buffered()
            for labels in self._buffered_labels - set(buffered):
                self.buffered.labels(*labels).set(0)  # its generator is gone
            for labels, value in buffered.items():
                self.buffered.labels(*labels).set(value)
            self._buffered_labels = set(buffered)
            for labels, value in pools.items():
                self.pool_fill.labels(*labels).set(value)
            for labels, value in sources.nodes_up().items():
                self.node_up.labels(*labels).set(value)
            for labels, value in sources.guarantees_lost().items():
                self.guarantee_lost.labels(*labels).set(value)

    def start_refreshing(self) -> None:
        """Start this process's daemon thread that calls `refresh` every
        ``refresh_seconds`` (in multiprocess mode: a scrape reads other processes' files, not
        their instances). Called by the first report in each process, a forked worker included;
        it runs until no instance is left to read (`disable_metrics`, ``ids.close()``)."""
        with self._lock:
            if self._thread_pid == os.getpid():
                return
            self._thread_pid = os.getpid()
            stop = self._stop = threading.Event()
            thread = self._thread = threading.Thread(
                target=self._refresh_forever,
                args=(stop,),
                name=REFRESH_THREAD_NAME,
                daemon=True,
            )
        thread.start()

    def stop_refreshing(self) -> None:
        """Stop this process's refresh thread, waiting for a refresh under way (a pool reading
        ends within the clients' socket timeout)."""
        with self._lock:
            thread, self._thread, self._thread_pid = self._thread, None, 0
            self._stop.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _refresh_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.refresh()
            except Exception:  # never let a reading kill the thread; the next one may work
                log.exception("refreshing the sa_redis_ids metrics failed")
            stop.wait(self.refresh_seconds)


class _Refresh:
    """Registered in the registry ahead of the series: collecting it refreshes them."""

    def __init__(self, sink: PrometheusMetrics):
        self._sink = weakref.ref(sink)

    def describe(self) -> list[Any]:
        return []  # registering reads nothing from Redis

    def collect(self) -> list[Any]:
        sink = self._sink()
        if sink is not None:
            sink.refresh()
        return []


REFRESH_THREAD_NAME = "sa_redis_ids metrics refresh"

_PROMETHEUS: weakref.WeakKeyDictionary[Any, PrometheusMetrics] = weakref.WeakKeyDictionary()
_SINKS_LOCK = RenewedLock()
"""Held while a registry's sink is looked up or made (no I/O)."""


def write_metrics() -> None:
    """Refresh every Prometheus report of this process now (`PrometheusMetrics.refresh`), so that
    what it counted since the last refresh is written. In multiprocess mode it runs by itself
    when the process exits (``atexit``); call it where a process ends without running ``atexit``
    handlers, or as gunicorn's ``worker_exit`` hook does (see the metrics page)."""
    for sink in list(_PROMETHEUS.values()):
        try:
            sink.refresh()
        except Exception:  # at exit: report, never raise
            log.exception("writing the sa_redis_ids metrics failed")


_AT_EXIT: list[bool] = []


def _write_at_exit() -> None:
    """Register `write_metrics` to run at exit, once (a forked child inherits the registration)."""
    with _SINKS_LOCK:
        if not _AT_EXIT:
            atexit.register(write_metrics)
            _AT_EXIT.append(True)


def enable_prometheus(
    ids: RedisIdsBase,
    registry: Any = None,
    *,
    buckets: Sequence[float] = DEFAULT_BUCKETS,
    refresh_seconds: float = DEFAULT_REFRESH_SECONDS,
) -> PrometheusMetrics:
    """Report ``ids`` in ``registry`` (``prometheus_client.REGISTRY`` when None).

    The series are registered once per registry; a later instance on the same registry joins them
    (``buckets`` and ``refresh_seconds`` of the first one count). Expose them as usual, e.g. with
    ``prometheus_client.start_http_server(port)`` or ``generate_latest(registry)``; under a
    pre-fork server, in ``prometheus_client`` multiprocess mode (see the metrics page), where
    each process refreshes the series read from its instances every ``refresh_seconds``.
    """
    ids = _check_ids(ids, "enable_prometheus")
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImportError(
            "enable_prometheus needs prometheus_client: pip install 'sa_redis_ids[metrics]'"
        ) from exc
    if registry is None:
        registry = prometheus_client.REGISTRY
    elif not isinstance(registry, prometheus_client.CollectorRegistry):
        raise ConfigError(
            f"registry must be a prometheus_client CollectorRegistry (or None for the default "
            f"one), not {registry!r}"
        )
    _check_buckets(buckets)
    refresh_seconds = check_seconds("refresh_seconds", refresh_seconds)
    with _SINKS_LOCK:
        sink = _PROMETHEUS.get(registry)
        if sink is None:
            sink = _PROMETHEUS[registry] = PrometheusMetrics(
                registry, buckets=buckets, refresh_seconds=refresh_seconds
            )
    sink.sources.add(ids)
    _attach(ids.nodes, sink)
    if sink._multiprocess:
        _write_at_exit()
        sink.start_refreshing()
    return sink


def _check_buckets(buckets: Sequence[float]) -> None:
    """Upper bounds in seconds: a non-empty sequence of increasing numbers above 0."""
    if isinstance(buckets, (str, bytes)) or not isinstance(buckets, Sequence) or not buckets:
        raise ConfigError(
            f"buckets must be a non-empty list of increasing seconds above 0, not {buckets!r}"
        )
    for bound in buckets:
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not bound > 0:
            raise ConfigError(f"buckets must hold seconds above 0, not {bound!r} (in {buckets!r})")
    if any(b <= a for a, b in itertools.pairwise(buckets)):
        raise ConfigError(f"buckets must increase, not {list(buckets)!r}")


# -- OpenTelemetry ------------------------------------------------------------------------------


class OpenTelemetryMetrics(Observer):
    """The library's instruments on one OpenTelemetry meter (see the module doc)."""

    def __init__(self, meter: Any):
        from opentelemetry.metrics import CallbackOptions, Observation

        self.meter = meter
        self.sources = sources = Sources()
        self.reserved = meter.create_counter(
            "sa_redis_ids.reserved",
            unit="{id}",
            description="Values Redis handed out to this process (a block counts whole when fetched)",
        )
        self.duration = meter.create_histogram(
            "sa_redis_ids.call.duration",
            unit="s",
            description="Duration of generator calls to Redis (one per call or block fetch)",
        )
        self.failures = meter.create_counter(
            "sa_redis_ids.call.failures",
            unit="{call}",
            description="Generator calls that raised, by exception class",
        )
        self.clock_back = meter.create_counter(
            "sa_redis_ids.clock_back",
            unit="{call}",
            description="Calls refused because the Redis clock went back (ClockMovedBackwards)",
        )
        self.node_errors = meter.create_counter(
            "sa_redis_ids.node.errors",
            unit="{error}",
            description="Errors that marked a Redis node down, by node and error class",
        )
        by_generator = ("id_namespace", "strategy")

        def callback(
            read: Callable[[], Samples], names: Sequence[str]
        ) -> Callable[[CallbackOptions], Iterable[Observation]]:
            def observe(options: CallbackOptions) -> Iterable[Observation]:
                return [
                    Observation(value, dict(zip(names, labels, strict=True)))
                    for labels, value in read().items()
                ]

            return observe

        meter.create_observable_counter(
            "sa_redis_ids.handed_out",
            callbacks=[callback(sources.handed_out, by_generator)],
            unit="{id}",
            description="Values a buffered generator gave to callers",
        )
        meter.create_observable_counter(
            "sa_redis_ids.block.refills",
            callbacks=[callback(sources.refills, by_generator)],
            unit="{block}",
            description="Blocks a buffer fetched from Redis",
        )
        meter.create_observable_gauge(
            "sa_redis_ids.buffer.ids",
            callbacks=[callback(sources.buffered, by_generator)],
            unit="{id}",
            description="Values buffered now",
        )
        meter.create_observable_counter(
            "sa_redis_ids.rewinds",
            callbacks=[callback(sources.rewinds, by_generator)],
            unit="{rewind}",
            description="Rewinds of a node's state detected and healed",
        )
        meter.create_observable_gauge(
            "sa_redis_ids.pool.fill_ratio",
            callbacks=[callback(sources.pool_fill, ("id_namespace",))],
            unit="1",
            description="How full a short-ID pool is (0 to 1)",
        )
        meter.create_observable_gauge(
            "sa_redis_ids.node.up",
            callbacks=[callback(sources.nodes_up, ("redis_node",))],
            unit="1",
            description="1 while a Redis node is in the rotation, 0 while it is marked down",
        )
        meter.create_observable_gauge(
            "sa_redis_ids.guarantee.lost",
            callbacks=[callback(sources.guarantees_lost, ("redis_node", "guarantee"))],
            unit="1",
            description="1 for each guarantee a Redis node cannot give (a command renamed or denied)",
        )

    def call(
        self,
        namespace: str,
        strategy: str,
        seconds: float,
        values: int,
        error: BaseException | None,
    ) -> None:
        attributes = {"id_namespace": namespace, "strategy": strategy_label(strategy)}
        self.duration.record(seconds, attributes)
        if error is None:
            if values:
                self.reserved.add(values, attributes)
            return
        self.failures.add(1, {**attributes, "error": type(error).__name__})
        if isinstance(error, ClockMovedBackwards):
            self.clock_back.add(1, {"id_namespace": namespace})

    def node_error(self, node: str, kind: str) -> None:
        self.node_errors.add(1, {"redis_node": node, "kind": kind})

    def detach(self, ids: object) -> None:
        """Stop reading ``ids`` (its instruments are read at each export: nothing to write)."""
        if isinstance(ids, RedisIdsBase):
            self.sources.discard(ids)


_OPENTELEMETRY: dict[int, tuple[Any, OpenTelemetryMetrics]] = {}
_INSTRUMENTS = ("counter", "histogram", "observable_counter", "observable_gauge")


def enable_opentelemetry(ids: RedisIdsBase, meter: Any = None) -> OpenTelemetryMetrics:
    """Report ``ids`` on ``meter`` (``opentelemetry.metrics.get_meter("sa_redis_ids")`` when
    None: the global meter provider's, a no-op until the application sets one up).

    The instruments are made once per meter; a later instance on the same meter joins them.
    """
    ids = _check_ids(ids, "enable_opentelemetry")
    try:
        from opentelemetry import metrics as otel_metrics
    except ImportError as exc:
        raise ImportError(
            "enable_opentelemetry needs opentelemetry-api: pip install 'sa_redis_ids[metrics]'"
        ) from exc
    if meter is None:
        meter = otel_metrics.get_meter("sa_redis_ids")
    elif not all(callable(getattr(meter, f"create_{kind}", None)) for kind in _INSTRUMENTS):
        raise ConfigError(
            f"meter must be an OpenTelemetry Meter (e.g. metrics.get_meter(...)), not {meter!r}"
        )
    with _SINKS_LOCK:
        found = _OPENTELEMETRY.get(id(meter))
        if found is None or found[0] is not meter:
            found = _OPENTELEMETRY[id(meter)] = (meter, OpenTelemetryMetrics(meter))
    sink = found[1]
    sink.sources.add(ids)
    _attach(ids.nodes, sink)
    return sink
