"""gunicorn settings for an application that reports sa_redis_ids metrics from every
worker.

prometheus_client's multiprocess mode keeps each worker's values in files under
PROMETHEUS_MULTIPROC_DIR: empty it when the server starts, write what a worker counted
since its last refresh when it exits, and drop a dead worker's live gauges
(``sa_redis_ids_buffered_ids``, ``sa_redis_ids_node_up``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from prometheus_client import multiprocess

from sa_redis_ids.metrics import write_metrics

bind = os.environ.get("BIND", "127.0.0.1:8000")
workers = 4


def on_starting(server: Any) -> None:
    for stale in Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).glob("*.db"):
        stale.unlink()


def worker_exit(server: Any, worker: Any) -> None:
    write_metrics()  # in the worker: its counts since the last refresh


def child_exit(server: Any, worker: Any) -> None:
    multiprocess.mark_process_dead(worker.pid)
