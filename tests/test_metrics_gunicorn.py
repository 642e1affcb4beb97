"""The gunicorn recipe of the metrics page (``examples/gunicorn_metrics``) with 4 real worker
processes on two Redis nodes, one of them down at first: one scrape shows every series with the
values of all workers added up, and a worker that exits leaves the live gauges (``child_exit`` ->
``mark_process_dead``)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis

from tests.support.servers import HOST, RedisServer, free_port, stop_process
from tests.support.services import REDIS_URL

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "gunicorn_metrics"
WORKERS = 4
BLOCK = 100  # the example's fixed block of order numbers


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    late: RedisServer
    """The second node: not started until the test starts it."""

    @property
    def late_node(self) -> str:
        return f"{HOST}:{self.late.port}/0"

    def get(self, path: str = "/") -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            body: bytes = response.read()
            return body

    def scrape(self) -> str:
        return self.get("/metrics").decode()


def _wait_for(check: Callable[[], bool], what: str, seconds: float = 30.0) -> None:
    """Poll ``check`` until it holds; fail naming ``what`` after ``seconds``."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _up(server: Server) -> bool:
    if server.process.poll() is not None:
        raise AssertionError(f"gunicorn exited with status {server.process.returncode}")
    try:
        server.get("/metrics")
    except OSError:
        return False
    return True


@pytest.fixture
def gunicorn(real_redis: redis.Redis, tmp_path: Path) -> Iterator[Server]:
    with started_gunicorn(real_redis, tmp_path) as server:
        yield server


@contextlib.contextmanager
def started_gunicorn(real_redis: redis.Redis, tmp_path: Path, *options: str) -> Iterator[Server]:
    """The example under gunicorn (with ``options``), its second node down."""
    prefix = f"g{uuid.uuid4().hex[:10]}"
    port = free_port()
    late = RedisServer()  # its port is chosen, nothing listens there yet: a node that is down
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
        "SA_REDIS_IDS_URLS": f"{REDIS_URL},{late.url}",
        "SA_REDIS_IDS_PREFIX": prefix,
        "BIND": f"{HOST}:{port}",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", *options, "app:app"],
        cwd=EXAMPLE,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = Server(f"http://{HOST}:{port}", process, late)
    try:
        _wait_for(lambda: _up(server), "gunicorn to answer")
        yield server
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGQUIT)  # gunicorn's quick shutdown
        stop_process(process)
        late.stop()
        for key in real_redis.scan_iter(match=f"{prefix}:*"):
            real_redis.delete(key)


def _value(text: str, series: str) -> float:
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{series} not in the scrape"
    return float(found.group(1))


def _draw_from_every_worker(server: Server) -> list[dict[str, int]]:
    """Concurrent requests, batch after batch, until each of the 4 workers has answered."""
    answers: list[dict[str, int]] = []
    with ThreadPoolExecutor(16) as pool:
        for _ in range(40):
            answers += [json.loads(body) for body in pool.map(lambda _: server.get(), range(16))]
            if len({answer["worker"] for answer in answers}) == WORKERS:
                return answers
    raise AssertionError(f"only workers {sorted({a['worker'] for a in answers})} answered")


ORDERS = 'id_namespace="orders",strategy="sequence"'
MEMBERS = 'id_namespace="members",strategy="short_id"'


def test_one_scrape_shows_every_series_added_up_over_four_workers_and_an_exited_one_leaves(
    gunicorn: Server,
) -> None:
    answers = _draw_from_every_worker(gunicorn)
    late_up = f'sa_redis_ids_node_up{{redis_node="{gunicorn.late_node}"}}'
    _wait_for(lambda: f"{late_up} 0.0" in gunicorn.scrape(), "the down node in a refresh")
    text = gunicorn.scrape()
    late_errors = f'sa_redis_ids_node_errors_total{{kind="ConnectionError",redis_node="{gunicorn.late_node}"}}'
    assert _value(text, late_errors) >= WORKERS, "every worker found the node down on its own"

    gunicorn.late.start()  # the second node comes up: each worker takes it back after 2 s

    def every_worker_took_it_back() -> bool:
        answers.extend(_draw_from_every_worker(gunicorn))
        return f"{late_up} 1.0" in gunicorn.scrape()  # livemin: 1 once no live worker has it down

    _wait_for(every_worker_took_it_back, "every worker to take the node back")
    orders = [answer["order"] for answer in answers]
    members = [answer["member"] for answer in answers]
    assert len(set(orders)) == len(orders) and len(set(members)) == len(members)
    handed_out = f"sa_redis_ids_handed_out_total{{{ORDERS}}} {float(len(orders))}"
    fill = f'sa_redis_ids_pool_fill_ratio{{id_namespace="members"}} {len(members) / 100_000}'

    def settled() -> bool:  # each worker refreshes its series every second
        text = gunicorn.scrape()
        return handed_out in text and fill in text

    _wait_for(settled, "the workers' refreshed series")
    text = gunicorn.scrape()
    refills = _value(text, f"sa_redis_ids_block_refills_total{{{ORDERS}}}")
    assert refills >= WORKERS, "each worker fetched its own blocks: all are counted"
    assert _value(text, f"sa_redis_ids_reserved_total{{{ORDERS}}}") == refills * BLOCK
    assert _value(text, f"sa_redis_ids_buffered_ids{{{ORDERS}}}") == refills * BLOCK - len(orders)
    assert _value(text, f"sa_redis_ids_reserved_total{{{MEMBERS}}}") == len(members)
    assert _value(text, f"sa_redis_ids_call_duration_seconds_count{{{MEMBERS}}}") == len(members)
    assert _value(text, f"sa_redis_ids_rewinds_total{{{ORDERS}}}") == 0
    assert _value(text, f'sa_redis_ids_node_up{{redis_node="{REDIS_URL.split("//")[1]}"}}') == 1
    assert _value(text, late_errors) >= WORKERS
    assert "exported_" not in text and "namespace=" not in text.replace("id_namespace=", "")

    # blocks of 100 are fetched when empty, none is dropped: what each worker holds is known
    per_worker = Counter(answer["worker"] for answer in answers)
    held = {pid: math.ceil(count / BLOCK) * BLOCK - count for pid, count in per_worker.items()}
    assert sum(held.values()) == refills * BLOCK - len(orders)
    victim = max(held, key=lambda pid: held[pid])
    assert held[victim] > 0
    os.kill(victim, signal.SIGTERM)  # a worker of the gunicorn this test started
    left = f"sa_redis_ids_buffered_ids{{{ORDERS}}} {float(sum(held.values()) - held[victim])}"
    _wait_for(lambda: left in gunicorn.scrape(), "the exited worker's buffered values to go")


def test_workers_forked_from_a_preloaded_app_that_reports_metrics_answer_and_add_up(
    real_redis: redis.Redis, tmp_path: Path
) -> None:
    # --preload: the app (its RedisIds, its metrics refresh thread) is made in the server's
    # process, and every worker is forked from it
    with started_gunicorn(real_redis, tmp_path, "--preload") as server:
        answers = _draw_from_every_worker(server)
        orders = [answer["order"] for answer in answers]
        members = [answer["member"] for answer in answers]
        assert len(set(orders)) == len(orders) and len(set(members)) == len(members)
        handed_out = f"sa_redis_ids_handed_out_total{{{ORDERS}}} {float(len(orders))}"
        _wait_for(lambda: handed_out in server.scrape(), "every worker's refreshed series")


SCRAPE_WITH_A_FILE_BEING_CREATED = """
import os, sys
from pathlib import Path
directory = Path(sys.argv[1])
os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
from prometheus_client import CollectorRegistry, Counter, generate_latest, multiprocess
import app
Counter("orders_taken", "orders").inc(3)  # this process's file, written and sized
(directory / "counter_999999.db").touch()  # another worker's, created and not yet sized
try:
    generate_latest(multiprocess.MultiProcessCollector(CollectorRegistry()))
except Exception as exc:
    print("plain collector fails:", type(exc).__name__)
print(app.scrape().decode())
"""


def test_a_scrape_while_a_worker_creates_its_file_still_answers(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    env = {**os.environ, "SA_REDIS_IDS_URLS": REDIS_URL}
    done = subprocess.run(
        [sys.executable, "-c", SCRAPE_WITH_A_FILE_BEING_CREATED, str(directory)],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "plain collector fails: error" in done.stdout, "the race the recipe guards against"
    assert "orders_taken_total 3.0" in done.stdout
