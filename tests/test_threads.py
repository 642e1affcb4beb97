"""Every thread the library starts is a daemon and stops at ``close()`` / ``disable_metrics()``;
a short-lived process's metrics add up in prometheus_client multiprocess mode.

Threads are counted with ``threading.enumerate()`` before and after: the metrics refresh thread
of each registry (multiprocess mode), the embedded maintenance scheduler and its runs, a buffer's
prefetch threads.
"""

from __future__ import annotations

import asyncio
import math
import os
import queue
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, JobExecutionEvent
from apscheduler.triggers.interval import IntervalTrigger
from prometheus_client import CollectorRegistry, generate_latest, multiprocess

from sa_redis_ids import Buffering, RedisIds
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.maintenance.executor import RUN_THREAD_NAME
from sa_redis_ids.maintenance.scheduling import add_job, background_scheduler
from sa_redis_ids.metrics import REFRESH_THREAD_NAME, disable_metrics, enable_prometheus
from tests.support.services import REDIS_URL


@pytest.fixture
def prefix(real_redis: redis.Redis) -> Iterator[str]:
    name = f"thr{uuid.uuid4().hex[:10]}"
    yield name
    for key in real_redis.scan_iter(match=f"{name}:*"):
        real_redis.delete(key)


@pytest.fixture
def multiprocess_mode(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """What makes a sink refresh in a thread of its own (the values stay in memory here: this
    process imported prometheus_client before the variable was set)."""
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))


def started_since(before: set[threading.Thread]) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread not in before]


@pytest.mark.usefixtures("multiprocess_mode")
def test_a_refresh_thread_per_registry_is_a_daemon_and_disable_metrics_stops_every_one() -> None:
    ids = RedisIds.embedded()
    before = set(threading.enumerate())
    for _ in range(5):
        enable_prometheus(ids, CollectorRegistry(), refresh_seconds=0.01)
    started = started_since(before)
    assert len(started) == 5
    assert all(t.daemon and t.name == REFRESH_THREAD_NAME for t in started)
    disable_metrics(ids)
    assert started_since(before) == []


@pytest.mark.usefixtures("multiprocess_mode")
def test_close_stops_every_thread_the_instance_started(prefix: str) -> None:
    before = set(threading.enumerate())
    ids = RedisIds.from_url(REDIS_URL, prefix=prefix)
    enable_prometheus(ids, CollectorRegistry(), refresh_seconds=0.01)
    orders = ids.sequence("orders", block=Buffering(10, max_block=10))
    ids.short_id("members", pool_size=1000, offset=1000).next_id()
    drawn = [orders.next_id() for _ in range(95)]  # prefetches on the way
    job = ids.maintenance()
    job.start(run_now=True)
    job.run_once()
    started = started_since(before)
    names = {t.name for t in started}
    assert REFRESH_THREAD_NAME in names and "APScheduler" in names, names
    assert all(t.daemon for t in started), [t.name for t in started if not t.daemon]
    ids.close()
    assert started_since(before) == []
    assert len(set(drawn)) == len(drawn)


@pytest.mark.usefixtures("multiprocess_mode")
def test_aclose_stops_the_refresh_thread_of_an_asyncio_instance(prefix: str) -> None:
    async def main() -> None:
        ids = AsyncRedisIds.from_url(REDIS_URL, prefix=prefix)
        enable_prometheus(ids, CollectorRegistry(), refresh_seconds=0.01)
        await ids.sequence("orders").next_id()
        assert REFRESH_THREAD_NAME in {t.name for t in started_since(before)}
        await ids.aclose()

    before = set(threading.enumerate())
    asyncio.run(main())
    assert started_since(before) == []


def test_the_embedded_scheduler_runs_each_job_in_a_daemon_thread_and_reports_its_outcome() -> None:
    def job() -> threading.Thread:
        if not ran:
            ran.append(1)
            raise RuntimeError("a failed run")
        return threading.current_thread()

    ran: list[int] = []
    outcomes: queue.Queue[JobExecutionEvent] = queue.Queue()
    scheduler = background_scheduler()
    scheduler.add_listener(outcomes.put, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
    before = set(threading.enumerate())
    add_job(scheduler, job, IntervalTrigger(seconds=0.05), run_now=True)
    scheduler.start()
    try:
        failed, done = outcomes.get(timeout=30), outcomes.get(timeout=30)
    finally:
        scheduler.shutdown()
    assert failed.code == EVENT_JOB_ERROR and str(failed.exception) == "a failed run"
    assert done.code == EVENT_JOB_EXECUTED
    assert done.retval.daemon and done.retval.name == RUN_THREAD_NAME
    assert started_since(before) == []


SHORT_LIVED = """
import os, sys
from sa_redis_ids import Buffering, RedisIds
from sa_redis_ids.metrics import enable_prometheus

ids = RedisIds.from_url(sys.argv[1], prefix=sys.argv[2])
enable_prometheus(ids, refresh_seconds=3600)  # its first refresh ran before anything was drawn
orders = ids.sequence("orders", block=Buffering(10, max_block=10, prefetch=None))
members = ids.short_id("members", pool_size=1000, offset=1000)
drawn = [orders.next_id() for _ in range(int(sys.argv[3]))]
drawn += [members.next_id() for _ in range(int(sys.argv[4]))]
print(len(set(drawn)))
"""  # and it exits: what it counted since is written at exit


def test_a_short_lived_process_shows_every_series_with_its_counts(
    prefix: str, tmp_path: Path
) -> None:
    orders, members, block = 25, 7, 10
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-c", SHORT_LIVED, REDIS_URL, prefix, str(orders), str(members)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(orders + members)]
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=str(tmp_path))
    text = generate_latest(registry).decode()
    samples = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }
    seq = 'id_namespace="orders",strategy="sequence"'
    short = 'id_namespace="members",strategy="short_id"'
    node = f'redis_node="{REDIS_URL.split("//")[1]}"'
    refills = math.ceil(orders / block)
    expected = {
        f"sa_redis_ids_reserved_total{{{seq}}}": refills * block,
        f"sa_redis_ids_reserved_total{{{short}}}": members,
        f"sa_redis_ids_call_duration_seconds_count{{{seq}}}": refills,
        f"sa_redis_ids_handed_out_total{{{seq}}}": orders,
        f"sa_redis_ids_block_refills_total{{{seq}}}": refills,
        f"sa_redis_ids_buffered_ids{{{seq}}}": refills * block - orders,
        f"sa_redis_ids_rewinds_total{{{seq}}}": 0,
        f"sa_redis_ids_node_up{{{node}}}": 1,
        'sa_redis_ids_pool_fill_ratio{id_namespace="members"}': members / 1000,
    }
    assert {name: samples.get(name) for name in expected} == expected, text
