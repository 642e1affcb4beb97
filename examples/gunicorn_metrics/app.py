"""A WSGI application that takes its IDs from sa_redis_ids and serves the Prometheus
metrics of every gunicorn worker (prometheus_client multiprocess mode).

Run it with the settings beside it (set the directory before anything imports
prometheus_client)::

    export PROMETHEUS_MULTIPROC_DIR=/tmp/shop-metrics
    gunicorn -c gunicorn.conf.py app:app

``GET /`` hands out an order number and a member number; ``GET /metrics`` is the
scrape endpoint.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    generate_latest,
    multiprocess,
)

from sa_redis_ids import Buffering, RedisIds
from sa_redis_ids.metrics import enable_prometheus

# SA_REDIS_IDS_URLS: one Redis URL, or several independent nodes separated by commas
urls = os.environ.get("SA_REDIS_IDS_URLS", "redis://localhost:6379/0").split(",")
ids = RedisIds.from_urls(urls, prefix=os.environ.get("SA_REDIS_IDS_PREFIX", "shop"))

# Each worker reports to prometheus_client's default registry, whose values go to
# files in PROMETHEUS_MULTIPROC_DIR; the series read from the generators are
# refreshed every second.
enable_prometheus(ids, refresh_seconds=1.0)

orders = ids.sequence("orders", block=Buffering(100, max_block=100, prefetch=None))
members = ids.short_id("members", pool_size=100_000, offset=100_000)

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class WorkerFiles:
    """prometheus_client's ``MultiProcessCollector``, leaving out files still 0 bytes long: a
    worker creates a metric's file and sizes it a moment later, and a scrape reading it in
    between would fail whole (prometheus/client_python issue 1199)."""

    def __init__(self, directory: str):
        self.directory = directory

    def collect(self) -> Iterable[Any]:
        files = []
        for path in glob.glob(os.path.join(self.directory, "*.db")):
            try:
                if os.path.getsize(path) > 0:
                    files.append(path)
            except FileNotFoundError:  # a dead worker's live gauges, just removed
                pass
        return multiprocess.MultiProcessCollector.merge(files, accumulate=True)


def scrape() -> bytes:
    """Every worker's series, added up: a fresh registry reading all their files."""
    registry = CollectorRegistry()
    registry.register(WorkerFiles(os.environ["PROMETHEUS_MULTIPROC_DIR"]))
    return generate_latest(registry)


def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    if environ.get("PATH_INFO") == "/metrics":
        body = scrape()
        content_type = CONTENT_TYPE_LATEST
    else:
        found = {
            "worker": os.getpid(),
            "order": orders.next_id(),
            "member": members.next_id(),
        }
        body = json.dumps(found).encode()
        content_type = "application/json"
    headers = [("Content-Type", content_type), ("Content-Length", str(len(body)))]
    start_response("200 OK", headers)
    return [body]
