"""Metrics: the series a scrape shows after real calls, the OpenTelemetry instruments, and the
library without the metrics extra."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio

from sa_redis_ids import ClockMovedBackwards, RedisIds
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.buffering import Buffering
from sa_redis_ids.metrics import disable_metrics, enable_opentelemetry, enable_prometheus
from sa_redis_ids.observe import Fanout, values_in
from sa_redis_ids.testing import shift_time
from tests.support.servers import RedisServer, free_port

prometheus_client = pytest.importorskip("prometheus_client")

StartServers = Callable[[int], list[RedisServer]]


def _prefix() -> str:
    return f"met{uuid.uuid4().hex[:8]}"


def _value(text: str, series: str) -> float:
    """The value of one series line (``name{labels}``) in an exposition text."""
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{series} not in the scrape"
    return float(found.group(1))


def test_a_scrape_shows_ids_calls_refills_pool_fill_and_a_failed_node(
    redis_servers: StartServers,
) -> None:
    servers = redis_servers(2)
    ids = RedisIds.from_urls([s.url for s in servers], retry_after=60)
    registry = prometheus_client.CollectorRegistry()
    enable_prometheus(ids, registry)
    port = free_port()
    server, thread = prometheus_client.start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        users = ids.sequence("users")
        for _ in range(3):
            users.next_ids(2)
        users.next_id()
        orders = ids.sequence("orders", block=Buffering(100, prefetch=None))
        assert len({orders.next_id() for _ in range(150)}) == 150  # two blocks
        codes = ids.short_id("codes", pool_size=1000, offset=1000)
        codes.next_ids(100)

        down = ids.nodes.nodes[1]
        servers[1].stop()
        users.next_ids(2)
        users.next_ids(2)  # one of the two turned to the stopped node first, then to the other

        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
            text = reply.read().decode()
    finally:
        server.shutdown()
        thread.join(timeout=10)

    users_labels = 'id_namespace="users",strategy="sequence"'
    orders_labels = 'id_namespace="orders",strategy="sequence"'
    assert _value(text, f"sa_redis_ids_reserved_total{{{users_labels}}}") == 11
    assert _value(text, f"sa_redis_ids_call_duration_seconds_count{{{users_labels}}}") == 6
    assert _value(text, f"sa_redis_ids_reserved_total{{{orders_labels}}}") == 200
    assert _value(text, f"sa_redis_ids_handed_out_total{{{orders_labels}}}") == 150
    assert _value(text, f"sa_redis_ids_block_refills_total{{{orders_labels}}}") == 2
    assert _value(text, f"sa_redis_ids_buffered_ids{{{orders_labels}}}") == 50
    assert (
        _value(text, 'sa_redis_ids_reserved_total{id_namespace="codes",strategy="short_id"}') == 100
    )
    # the pool has one node down: its fill cannot be read, so it is left out
    assert "sa_redis_ids_pool_fill_ratio{" not in text
    node_errors = (
        f'sa_redis_ids_node_errors_total{{kind="ConnectionError",redis_node="{down.name}"}}'
    )
    assert _value(text, node_errors) == 1
    assert _value(text, f'sa_redis_ids_node_up{{redis_node="{down.name}"}}') == 0
    assert _value(text, f'sa_redis_ids_node_up{{redis_node="{ids.nodes.nodes[0].name}"}}') == 1
    assert "sa_redis_ids_call_failures_total{" not in text, "the other node answered every call"


def test_pool_fill_clock_back_and_rewinds_in_generate_latest(real_redis: redis.Redis) -> None:
    ids = RedisIds(real_redis, prefix=_prefix())
    registry = prometheus_client.CollectorRegistry()
    enable_prometheus(ids, registry)
    codes = ids.short_id("codes", pool_size=1000, offset=1000)
    codes.next_ids(250)
    orders = ids.snowflake("orders", tolerance_ms=100)
    orders.next_id()
    with shift_time(orders, -10_000), pytest.raises(ClockMovedBackwards):
        orders.next_id()
    users = ids.sequence("users", headroom=10)
    users.next_ids(5)
    real_redis.delete(users.counter_key)
    users.next_id()

    text = prometheus_client.generate_latest(registry).decode()
    assert _value(text, 'sa_redis_ids_pool_fill_ratio{id_namespace="codes"}') == 0.25
    assert _value(text, 'sa_redis_ids_clock_back_total{id_namespace="orders"}') == 1
    failures = (
        'sa_redis_ids_call_failures_total{error="ClockMovedBackwards",'
        'id_namespace="orders",strategy="snowflake"}'
    )
    assert _value(text, failures) == 1
    assert (
        _value(text, 'sa_redis_ids_reserved_total{id_namespace="orders",strategy="snowflake"}') == 1
    )
    assert _value(text, 'sa_redis_ids_rewinds_total{id_namespace="users",strategy="sequence"}') == 1
    assert _value(text, 'sa_redis_ids_rewinds_total{id_namespace="codes",strategy="short_id"}') == 0


def test_two_instances_share_a_registry_and_disabling_stops_the_reports() -> None:
    first, second = RedisIds.embedded(), RedisIds.embedded()
    registry = prometheus_client.CollectorRegistry()
    sink = enable_prometheus(first, registry)
    assert enable_prometheus(second, registry) is sink
    first.sequence("users").next_ids(3)
    second.sequence("users").next_ids(4)
    series = 'sa_redis_ids_reserved_total{id_namespace="users",strategy="sequence"}'
    assert _value(prometheus_client.generate_latest(registry).decode(), series) == 7

    disable_metrics(first)
    assert first.nodes.observer is None
    first.sequence("users").next_ids(5)
    text = prometheus_client.generate_latest(registry).decode()
    assert _value(text, series) == 7
    assert text.count("sa_redis_ids_node_up{") == 1, "only the instance still reported"


def test_a_disabled_instance_keeps_its_counts_and_leaves_the_buffered_gauge() -> None:
    """Counters never go down (Prometheus reads a drop as a restart); the values a disabled
    instance still buffers are no longer shown."""
    first, second = RedisIds.embedded(), RedisIds.embedded()
    registry = prometheus_client.CollectorRegistry()
    enable_prometheus(first, registry)
    enable_prometheus(second, registry)
    a, b = first.sequence("orders", block=100), second.sequence("orders", block=100)
    [a.next_id() for _ in range(5)], [b.next_id() for _ in range(7)]
    labels = '{id_namespace="orders",strategy="sequence"}'
    text = prometheus_client.generate_latest(registry).decode()
    assert _value(text, f"sa_redis_ids_handed_out_total{labels}") == 12
    assert _value(text, f"sa_redis_ids_buffered_ids{labels}") == 95 + 93

    disable_metrics(first)
    b.next_id()
    text = prometheus_client.generate_latest(registry).decode()
    assert _value(text, f"sa_redis_ids_handed_out_total{labels}") == 13
    assert _value(text, f"sa_redis_ids_buffered_ids{labels}") == 92
    assert _value(text, f"sa_redis_ids_block_refills_total{labels}") == 2


def test_prometheus_and_opentelemetry_together_both_count() -> None:
    ids = RedisIds.embedded()
    registry = prometheus_client.CollectorRegistry()
    enable_prometheus(ids, registry)
    enable_opentelemetry(ids)  # the global (no-op) meter: calls still work and still count here
    enable_prometheus(ids, registry)  # twice: still reported once
    assert isinstance(ids.nodes.observer, Fanout) and len(ids.nodes.observer.observers) == 2
    assert ids.sequence("users").next_ids(3) == [1, 2, 3]
    text = prometheus_client.generate_latest(registry).decode()
    assert (
        _value(text, 'sa_redis_ids_reserved_total{id_namespace="users",strategy="sequence"}') == 3
    )


def _otel_points(reader: Any) -> dict[str, list[Any]]:
    found: dict[str, list[Any]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def _otel_value(points: dict[str, list[Any]], name: str, **attributes: str) -> float:
    for point in points.get(name, []):
        if dict(point.attributes) == attributes:
            return float(point.count if hasattr(point, "bucket_counts") else point.value)
    raise AssertionError(f"{name} {attributes} not exported: {points.get(name)}")


def test_opentelemetry_instruments_in_an_in_memory_reader(redis_servers: StartServers) -> None:
    sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
    export = pytest.importorskip("opentelemetry.sdk.metrics.export")
    reader = export.InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    servers = redis_servers(2)
    ids = RedisIds.from_urls([s.url for s in servers], retry_after=60)
    enable_opentelemetry(ids, provider.get_meter("test"))

    users = ids.sequence("users")
    users.next_ids(3)
    users.next_id()
    orders = ids.sequence("orders", block=Buffering(10, prefetch=None))
    for _ in range(15):
        orders.next_id()
    codes = ids.short_id("codes", pool_size=100, offset=100)
    codes.next_ids(10)
    points = _otel_points(reader)
    assert _otel_value(points, "sa_redis_ids.pool.fill_ratio", id_namespace="codes") == 0.1

    servers[1].stop()
    users.next_id()
    users.next_id()
    points = _otel_points(reader)
    provider.shutdown()

    sequence = {"strategy": "sequence"}
    assert _otel_value(points, "sa_redis_ids.reserved", id_namespace="users", **sequence) == 6
    assert _otel_value(points, "sa_redis_ids.call.duration", id_namespace="users", **sequence) == 4
    assert _otel_value(points, "sa_redis_ids.reserved", id_namespace="orders", **sequence) == 20
    assert _otel_value(points, "sa_redis_ids.handed_out", id_namespace="orders", **sequence) == 15
    assert _otel_value(points, "sa_redis_ids.block.refills", id_namespace="orders", **sequence) == 2
    assert _otel_value(points, "sa_redis_ids.buffer.ids", id_namespace="orders", **sequence) == 5
    down = ids.nodes.nodes[1].name
    assert (
        _otel_value(points, "sa_redis_ids.node.errors", redis_node=down, kind="ConnectionError")
        == 1
    )
    assert _otel_value(points, "sa_redis_ids.node.up", redis_node=down) == 0


def test_disable_metrics_and_close_stop_the_opentelemetry_readings_of_an_instance() -> None:
    sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
    export = pytest.importorskip("opentelemetry.sdk.metrics.export")
    reader = export.InMemoryMetricReader()
    meter = sdk_metrics.MeterProvider(metric_readers=[reader]).get_meter("test")
    kept, disabled, closed = RedisIds.embedded(), RedisIds.embedded(), RedisIds.embedded()
    for ids, namespace in ((kept, "kept"), (disabled, "disabled"), (closed, "closed")):
        enable_opentelemetry(ids, meter)
        ids.sequence(namespace, block=Buffering(10, prefetch=None)).next_id()
    disable_metrics(disabled)
    closed.close()
    buffered = {
        dict(point.attributes)["id_namespace"]
        for point in _otel_points(reader)["sa_redis_ids.buffer.ids"]
    }
    assert buffered == {"kept"}


def test_asyncio_buffers_are_read_at_collection(real_redis: redis.Redis) -> None:
    kwargs = real_redis.connection_pool.connection_kwargs
    registry = prometheus_client.CollectorRegistry()

    async def draw() -> None:
        client = redis.asyncio.Redis(
            host=kwargs.get("host", "127.0.0.1"), port=kwargs.get("port", 6379), socket_timeout=5
        )
        ids = AsyncRedisIds(client, prefix=_prefix())
        enable_prometheus(ids, registry)
        orders = ids.sequence("orders", block=Buffering(50, prefetch=None))
        for _ in range(60):
            await orders.next_id()
        text = prometheus_client.generate_latest(registry).decode()
        labels = '{id_namespace="orders",strategy="sequence"}'
        assert _value(text, f"sa_redis_ids_handed_out_total{labels}") == 60
        assert _value(text, f"sa_redis_ids_block_refills_total{labels}") == 2
        assert _value(text, f"sa_redis_ids_reserved_total{labels}") == 100
        await ids.aclose()

    asyncio.run(draw())


def test_values_in_counts_what_a_call_answers() -> None:
    assert values_in(range(5, 50, 5)) == 9
    assert values_in([1, 2]) == 2
    assert values_in(([1, 2, 3], object(), 17)) == 3
    assert values_in(None) == 0 and values_in(()) == 0


def test_the_library_works_without_the_metrics_packages() -> None:
    code = (
        "import sys\n"
        "for name in ('prometheus_client', 'opentelemetry'):\n"
        "    sys.modules[name] = None  # any import of them fails\n"
        "import sa_redis_ids.metrics as metrics\n"
        "from sa_redis_ids import RedisIds\n"
        "ids = RedisIds.embedded()\n"
        "assert ids.sequence('users').next_ids(3) == [1, 2, 3]\n"
        "for enable in (metrics.enable_prometheus, metrics.enable_opentelemetry):\n"
        "    try:\n"
        "        enable(ids)\n"
        "    except ImportError as exc:\n"
        "        assert 'sa_redis_ids[metrics]' in str(exc)\n"
        "    else:\n"
        "        raise AssertionError('enabled without the package')\n"
        "assert ids.nodes.observer is None\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
