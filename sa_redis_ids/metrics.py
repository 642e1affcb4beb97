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
block), labelled by ``namespace`` and ``strategy`` (the registered name: ``sequence``, ``short_id`` …):

=====================================  ===================================================================
Prometheus / OpenTelemetry             what
=====================================  ===================================================================
``sa_redis_ids_ids_reserved_total``    values Redis handed out to this process (a block counts whole
``sa_redis_ids.ids.reserved``          when it is fetched)
``sa_redis_ids_call_duration_seconds`` histogram of call durations (failed calls too)
``sa_redis_ids.call.duration``
``sa_redis_ids_call_failures_total``   calls that raised, by ``error`` (the exception's class name)
``sa_redis_ids.call.failures``
``sa_redis_ids_clock_back_total``      calls refused because the Redis clock went back
``sa_redis_ids.clock_back``            ([`ClockMovedBackwards`][sa_redis_ids.ClockMovedBackwards]), by ``namespace``
``sa_redis_ids_node_errors_total``     errors that marked a node down, by ``node`` and ``kind`` (the
``sa_redis_ids.node.errors``           error's class name: ``ConnectionError``, ``TimeoutError`` …)
=====================================  ===================================================================

Read when metrics are collected (a scrape, an export), nothing on the per-ID path:

=====================================  ===================================================================
``sa_redis_ids_ids_handed_out_total``  values a buffered generator gave to callers (reserved minus
``sa_redis_ids.ids.handed_out``        buffered and dropped); unbuffered ones hand out what they reserve
``sa_redis_ids_block_refills_total``   blocks a buffer fetched
``sa_redis_ids.block.refills``
``sa_redis_ids_buffered_ids``          values buffered now
``sa_redis_ids.buffer.ids``
``sa_redis_ids_rewinds_total``         rewinds detected and healed (see
``sa_redis_ids.rewinds``               `highwater`)
``sa_redis_ids_pool_fill_ratio``       how full a short-ID pool is, 0 to 1, by ``namespace`` (a
``sa_redis_ids.pool.fill_ratio``       ``BITCOUNT`` per node at collection; sync clients only; left out
                                       while a node is marked down or cannot answer)
``sa_redis_ids_node_up``               1 while a node is in the rotation, 0 while it is marked down
``sa_redis_ids.node.up``
=====================================  ===================================================================

Loggers (standard `logging`; all below ``sa_redis_ids``, which the library never configures):

* ``sa_redis_ids.nodes``: a node goes down (WARNING, once until it answers again, with its name
  and the error) and comes back (INFO).
* ``sa_redis_ids.rewinds``: a node's state was found below what was issued and healed (WARNING).
* ``sa_redis_ids.clock``: the Redis clock went back further than a snowflake tolerates (WARNING,
  with the namespace and the milliseconds).
* ``sa_redis_ids.maintenance``: each maintenance run (INFO, ERROR when a step failed) and a short-ID
  pool past ``fill_warning`` (WARNING).
* ``sa_redis_ids``: an eviction policy that can evict the library's keys (WARNING), skipped
  precreation of a day on a node (WARNING).
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from sa_redis_ids.errors import ClockMovedBackwards
from sa_redis_ids.generators import registry as strategies
from sa_redis_ids.generators.abilities import Pool
from sa_redis_ids.observe import Fanout, Observer

if TYPE_CHECKING:
    from sa_redis_ids.ids import RedisIdsBase
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


class Sources:
    """The instances one sink reports on (held weakly), and what is read of them at collection."""

    def __init__(self) -> None:
        self._ids: weakref.WeakSet[RedisIdsBase] = weakref.WeakSet()
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

    def buffers(self) -> Iterator[tuple[Labels, Any]]:
        """``((namespace, strategy), stats)`` of every buffer in use: a sync instance's generator
        buffers, an asyncio instance's asyncio buffers."""
        for ids in self.instances():
            if ids.asynchronous:
                fronts = list(getattr(ids, "_fronts", {}).values())
                pairs = [(front.generator, front.buffer) for front in fronts]
            else:
                pairs = [(g, getattr(g, "buffer", None)) for g in ids.generators]
            for generator, buffer in pairs:
                if buffer is not None:
                    labels = (generator.namespace, strategy_label(generator.strategy))
                    yield labels, buffer.stats()

    def handed_out(self) -> Samples:
        return _summed((labels, stats.ids_issued) for labels, stats in self.buffers())

    def refills(self) -> Samples:
        return _summed((labels, stats.blocks_taken) for labels, stats in self.buffers())

    def buffered(self) -> Samples:
        return _summed((labels, stats.ids_left) for labels, stats in self.buffers())

    def rewinds(self) -> Samples:
        return _summed(
            ((g.namespace, strategy_label(g.strategy)), g.rewinds)
            for ids in self.instances()
            for g in ids.generators
        )

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
    """Stop reporting ``ids``: its calls are no longer measured, nor its state read."""
    current = ids.nodes.observer
    ids.nodes.observer = None
    observers = current.observers if isinstance(current, Fanout) else (current,)
    for observer in observers:
        sources = getattr(observer, "sources", None)
        if isinstance(sources, Sources):
            sources.discard(ids)


# -- Prometheus ---------------------------------------------------------------------------------


class PrometheusMetrics(Observer):
    """The library's series in one ``prometheus_client`` registry (see the module doc)."""

    def __init__(self, registry: Any, *, buckets: Sequence[float] = DEFAULT_BUCKETS):
        from prometheus_client import Counter, Histogram

        self.registry = registry
        self.sources = Sources()
        by_call = ["namespace", "strategy"]
        self.reserved = Counter(
            "sa_redis_ids_ids_reserved",
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
            ["namespace"],
            registry=registry,
        )
        self.node_errors = Counter(
            "sa_redis_ids_node_errors",
            "Errors that marked a Redis node down, by node and error class",
            ["node", "kind"],
            registry=registry,
        )
        self._labels: dict[tuple[str, str], tuple[Any, Any]] = {}
        registry.register(_PrometheusCollector(self.sources))

    def call(
        self,
        namespace: str,
        strategy: str,
        seconds: float,
        values: int,
        error: BaseException | None,
    ) -> None:
        key = (namespace, strategy)
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
        self.node_errors.labels(node, kind).inc()


class _PrometheusCollector:
    """The series read at scrape time."""

    def __init__(self, sources: Sources):
        self.sources = sources

    def _families(self, with_samples: bool) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        sources = self.sources
        by_generator = ["namespace", "strategy"]
        table: list[tuple[type, str, str, list[str], Callable[[], Samples]]] = [
            (
                CounterMetricFamily,
                "sa_redis_ids_ids_handed_out",
                "Values a buffered generator gave to callers",
                by_generator,
                sources.handed_out,
            ),
            (
                CounterMetricFamily,
                "sa_redis_ids_block_refills",
                "Blocks a buffer fetched from Redis",
                by_generator,
                sources.refills,
            ),
            (
                GaugeMetricFamily,
                "sa_redis_ids_buffered_ids",
                "Values buffered now",
                by_generator,
                sources.buffered,
            ),
            (
                CounterMetricFamily,
                "sa_redis_ids_rewinds",
                "Rewinds of a node's state detected and healed",
                by_generator,
                sources.rewinds,
            ),
            (
                GaugeMetricFamily,
                "sa_redis_ids_pool_fill_ratio",
                "How full a short-ID pool is (0 to 1)",
                ["namespace"],
                sources.pool_fill,
            ),
            (
                GaugeMetricFamily,
                "sa_redis_ids_node_up",
                "1 while a Redis node is in the rotation, 0 while it is marked down",
                ["node"],
                sources.nodes_up,
            ),
        ]
        for kind, name, documentation, labels, read in table:
            family = kind(name, documentation, labels=labels)
            if with_samples:
                for values, value in read().items():
                    family.add_metric(list(values), value)
            yield family

    def describe(self) -> Iterator[Any]:
        """The families without samples: registering reads nothing from Redis."""
        return self._families(False)

    def collect(self) -> Iterator[Any]:
        return self._families(True)


_PROMETHEUS: weakref.WeakKeyDictionary[Any, PrometheusMetrics] = weakref.WeakKeyDictionary()
_SINKS_LOCK = threading.Lock()


def enable_prometheus(
    ids: RedisIdsBase, registry: Any = None, *, buckets: Sequence[float] = DEFAULT_BUCKETS
) -> PrometheusMetrics:
    """Report ``ids`` in ``registry`` (``prometheus_client.REGISTRY`` when None).

    The series are registered once per registry; a later instance on the same registry joins them
    (``buckets`` of the first one count). Expose them as usual, e.g. with
    ``prometheus_client.start_http_server(port)`` or ``generate_latest(registry)``.
    """
    try:
        import prometheus_client
    except ImportError as exc:
        raise ImportError(
            "enable_prometheus needs prometheus_client: pip install 'sa_redis_ids[metrics]'"
        ) from exc
    if registry is None:
        registry = prometheus_client.REGISTRY
    _check_buckets(buckets)
    with _SINKS_LOCK:
        sink = _PROMETHEUS.get(registry)
        if sink is None:
            sink = _PROMETHEUS[registry] = PrometheusMetrics(registry, buckets=buckets)
    sink.sources.add(ids)
    _attach(ids.nodes, sink)
    return sink


def _check_buckets(buckets: Sequence[float]) -> None:
    if not buckets or any(not isinstance(b, (int, float)) or math.isnan(b) for b in buckets):
        raise ValueError(f"buckets must be numbers of seconds, not {buckets!r}")


# -- OpenTelemetry ------------------------------------------------------------------------------


class OpenTelemetryMetrics(Observer):
    """The library's instruments on one OpenTelemetry meter (see the module doc)."""

    def __init__(self, meter: Any):
        from opentelemetry.metrics import CallbackOptions, Observation

        self.meter = meter
        self.sources = sources = Sources()
        self.reserved = meter.create_counter(
            "sa_redis_ids.ids.reserved",
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
        by_generator = ("namespace", "strategy")

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
            "sa_redis_ids.ids.handed_out",
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
            callbacks=[callback(sources.pool_fill, ("namespace",))],
            unit="1",
            description="How full a short-ID pool is (0 to 1)",
        )
        meter.create_observable_gauge(
            "sa_redis_ids.node.up",
            callbacks=[callback(sources.nodes_up, ("node",))],
            unit="1",
            description="1 while a Redis node is in the rotation, 0 while it is marked down",
        )

    def call(
        self,
        namespace: str,
        strategy: str,
        seconds: float,
        values: int,
        error: BaseException | None,
    ) -> None:
        attributes = {"namespace": namespace, "strategy": strategy_label(strategy)}
        self.duration.record(seconds, attributes)
        if error is None:
            if values:
                self.reserved.add(values, attributes)
            return
        self.failures.add(1, {**attributes, "error": type(error).__name__})
        if isinstance(error, ClockMovedBackwards):
            self.clock_back.add(1, {"namespace": namespace})

    def node_error(self, node: str, kind: str) -> None:
        self.node_errors.add(1, {"node": node, "kind": kind})


_OPENTELEMETRY: dict[int, tuple[Any, OpenTelemetryMetrics]] = {}


def enable_opentelemetry(ids: RedisIdsBase, meter: Any = None) -> OpenTelemetryMetrics:
    """Report ``ids`` on ``meter`` (``opentelemetry.metrics.get_meter("sa_redis_ids")`` when
    None: the global meter provider's, a no-op until the application sets one up).

    The instruments are made once per meter; a later instance on the same meter joins them.
    """
    try:
        from opentelemetry import metrics as otel_metrics
    except ImportError as exc:
        raise ImportError(
            "enable_opentelemetry needs opentelemetry-api: pip install 'sa_redis_ids[metrics]'"
        ) from exc
    if meter is None:
        meter = otel_metrics.get_meter("sa_redis_ids")
    with _SINKS_LOCK:
        found = _OPENTELEMETRY.get(id(meter))
        if found is None or found[0] is not meter:
            found = _OPENTELEMETRY[id(meter)] = (meter, OpenTelemetryMetrics(meter))
    sink = found[1]
    sink.sources.add(ids)
    _attach(ids.nodes, sink)
    return sink
