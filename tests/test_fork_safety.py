"""A fork at any moment of any background activity never hangs the child.

Each round builds a fresh `RedisIds` on the real Redis (so its first use of the node, the probe
of the server and redis-py's first connections happen during the round) and starts everything the
library runs in the background at once: the metrics refresh thread (reading a short-ID pool from
Redis every few milliseconds), the maintenance job (APScheduler's thread, plus a thread running it
back to back), a buffered generator refilled by prefetch threads, and callers sharing the calls of
an unbuffered one. After a random delay (0 to 25 ms: the first calls, or the steady state) the
test thread forks; the child draws from every generator and must answer within ``DEADLINE``
seconds (a child that hangs prints its stacks and exits). The parent's and the child's values must all differ.

The seeds are fixed (CI replays the same schedules); ``SA_REDIS_IDS_FORK_SEEDS=1,2,…`` runs others.
A failure names its seed and round.

Random forks find a hang only where a test's activities go; the audit below covers the rest: every
lock the package creates is listed, with how a forked child gets it anew or why it is never held
across I/O, so a new lock cannot arrive without that decision.
"""

from __future__ import annotations

import ast
import faulthandler
import importlib
import json
import os
import random
import sys
import threading
import time
import traceback
import uuid
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.sentinel
from prometheus_client import CollectorRegistry
from redis.cluster import RedisCluster

from sa_redis_ids import Buffering, RedisIds, forksafe
from sa_redis_ids.forksafe import ForkSafe, renew_client_locks
from sa_redis_ids.metrics import enable_prometheus
from tests.support.forking import child_call_status
from tests.support.servers import RedisClusterProcesses, RedisServer
from tests.support.services import REDIS_URL

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    # Python 3.12+ warns at every fork of a process with threads: what this file tests
    pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning"),
]

SEEDS = [int(s) for s in os.environ.get("SA_REDIS_IDS_FORK_SEEDS", "11,23,37").split(",")]
ROUNDS = 12
"""Forks per seed."""
DEADLINE = 15
"""Seconds a child has to draw from every generator (it needs milliseconds; a hang never ends)."""
CHILD_DRAWS = 3


@dataclass
class Round:
    """One instance with every background activity running, and what its threads drew."""

    ids: RedisIds
    generators: dict[str, Any]
    drawn: dict[str, list[Any]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)

    def loop(self, name: str, step: Callable[[], Any]) -> None:
        def run() -> None:
            try:
                while not self.stop.is_set():
                    step()
            except BaseException as exc:  # reported by the test, never swallowed
                self.errors.append(exc)

        thread = threading.Thread(target=run, name=f"fork-test {name}", daemon=True)
        self.threads.append(thread)
        thread.start()

    def draw_loop(self, namespace: str) -> None:
        generator = self.generators[namespace]
        found = self.drawn.setdefault(namespace, [])
        self.loop(namespace, lambda: found.append(generator.next_id()))


def start_round(
    make_ids: Callable[[str], RedisIds],
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    metrics_dir: str,
) -> Round:
    ids = make_ids(prefix)
    generators = {
        "buffered": ids.sequence("buffered", block=Buffering(8, max_block=8)),
        "shared": ids.sequence("shared"),
        "codes": ids.daily_code("codes", code_prefix="F", digits=6),
        "short": ids.short_id("short", pool_size=1_000_000, offset=1_000_000),
    }
    with monkeypatch.context() as env:  # multiprocess mode: this sink refreshes in a thread
        env.setenv("PROMETHEUS_MULTIPROC_DIR", metrics_dir)
        enable_prometheus(ids, CollectorRegistry(), refresh_seconds=0.002)
    state = Round(ids, generators)
    job = ids.maintenance()
    job.start(run_now=True)  # APScheduler's thread, and a run at once
    state.loop("maintenance", job.run_once)
    state.draw_loop("buffered")
    state.draw_loop("buffered")  # two callers: prefetch threads refill while both draw
    for _ in range(3):
        state.draw_loop("shared")  # callers that queue share one call
    state.draw_loop("codes")
    state.draw_loop("short")
    return state


def end_round(state: Round) -> None:
    state.stop.set()
    for thread in state.threads:
        thread.join()
    state.ids.close()
    assert not state.errors, state.errors


def fork_and_draw(state: Round) -> tuple[int, dict[str, list[Any]]]:
    """Fork now; the child draws ``CHILD_DRAWS`` values of each generator and reports them.
    Returns the child's exit status (0: it drew everything) and its values."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: only this thread runs here
        try:
            os.close(read)
            faulthandler.dump_traceback_later(DEADLINE, exit=True)  # a hang: stacks, exit 1
            found = {
                name: [generator.next_id() for _ in range(CHILD_DRAWS)]
                for name, generator in state.generators.items()
            }
            os.write(write, json.dumps(found).encode())
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(3)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        body = pipe.read()  # ends when the child exits (a hung one exits after DEADLINE)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), json.loads(body) if body else {}


@pytest.fixture
def prefix(real_redis: redis.Redis) -> Iterator[str]:
    name = f"fork{uuid.uuid4().hex[:10]}"
    yield name
    for key in real_redis.scan_iter(match=f"{name}*"):
        real_redis.delete(key)


def run_seed(
    seed: int,
    make_ids: Callable[[str], RedisIds],
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    metrics_dir: str,
) -> None:
    rng = random.Random(seed)
    for round_ in range(ROUNDS):
        # keys of its own: the maintenance lease of the round before is not waited for
        state = start_round(make_ids, f"{prefix}r{round_}", monkeypatch, metrics_dir)
        try:
            time.sleep(rng.uniform(0.0, 0.025))
            status, child = fork_and_draw(state)
        finally:
            end_round(state)
        where = f"seed {seed}, round {round_}"
        assert status == 0, f"{where}: the child " + (
            f"hung (no answer within {DEADLINE} s; its stacks are on stderr)"
            if status == 1
            else f"raised (exit status {status}; its traceback is on stderr)"
        )
        for name in state.generators:
            found = child[name] + state.drawn.get(name, [])
            assert len(child[name]) == CHILD_DRAWS
            assert len(set(found)) == len(found), f"{where}: {name} issued a value twice"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_child_forked_at_random_moments_of_every_background_activity_draws_unique_values(
    seed: int, prefix: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    def make_ids(prefix: str) -> RedisIds:
        return RedisIds.from_url(REDIS_URL, prefix=prefix)

    run_seed(seed, make_ids, prefix, monkeypatch, str(tmp_path))


def test_a_child_forked_at_random_moments_on_a_cluster_draws_unique_values(
    redis_cluster: RedisClusterProcesses,
    cluster_client: RedisCluster,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    # a cluster client's nodes manager and per-node pools have locks of their own
    def make_ids(prefix: str) -> RedisIds:
        return RedisIds.from_url(redis_cluster.url, prefix=prefix, cluster=True)

    prefix = f"fork{uuid.uuid4().hex[:10]}"
    try:
        run_seed(SEEDS[0], make_ids, prefix, monkeypatch, str(tmp_path))
    finally:
        for key in cluster_client.scan_iter(match=f"{prefix}*"):
            cluster_client.delete(key)


def in_function(thread: threading.Thread, name: str) -> bool:
    """Whether ``thread`` is running function ``name`` now (somewhere in its stack)."""
    frame = sys._current_frames().get(thread.ident or 0)
    while frame is not None:
        if frame.f_code.co_name == name:
            return True
        frame = frame.f_back
    return False


def test_a_child_forked_while_the_metrics_refresh_waits_on_redis_draws_at_once(
    server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    # the refresh thread reads a short-ID pool on a server that answers nothing (SIGSTOP) while
    # the process forks; the child's first call reports to the same metrics
    slow = RedisIds.from_url(server.url, prefix=prefix, socket_timeout=60)
    slow.short_id("members", pool_size=1000, offset=1000).next_id()
    ids = RedisIds.from_url(REDIS_URL, prefix=prefix)
    orders = ids.sequence("orders")
    registry = CollectorRegistry()
    before = set(threading.enumerate())
    with monkeypatch.context() as env:
        env.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
        enable_prometheus(slow, registry, refresh_seconds=0.01)
        enable_prometheus(ids, registry)
    (refreshing,) = [t for t in threading.enumerate() if t not in before]
    server.pause()
    release = threading.Event()
    resumer = threading.Thread(target=lambda: (release.wait(), server.resume()), daemon=True)
    resumer.start()
    try:
        deadline = time.monotonic() + 30
        while not in_function(refreshing, "pool_fill"):  # waiting on the paused server
            assert time.monotonic() < deadline, "the refresh never read the pool"
            time.sleep(0.005)
        assert child_call_status(orders.next_id, release) == 0
    finally:
        release.set()
        resumer.join()
        slow.close()
        ids.close()


# -- the audit of every lock --------------------------------------------------------------------

PACKAGE = Path(__file__).resolve().parent.parent / "sa_redis_ids"
LOCK_KINDS = {"Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore"}

RENEWED: dict[tuple[str, str], str] = {
    # (module, class): the method that gives a forked child new locks
    ("ids.py", "RedisIdsBase"): "after_fork_in_child",
    ("forksafe.py", "RenewedLock"): "after_fork_in_child",
    ("metrics.py", "Sources"): "after_fork_in_child",
    ("metrics.py", "PrometheusMetrics"): "after_fork_in_child",
    ("maintenance/job.py", "Maintenance"): "after_fork_in_child",
    ("redis/nodes.py", "Node"): "after_fork_in_child",
    ("redis/nodes.py", "NodeSet"): "after_fork_in_child",
    ("buffering.py", "SegmentBuffer"): "_after_fork_in_child",
    ("sharing.py", "SharedCalls"): "_after_fork_in_child",
    ("generators/highwater.py", "HighWater"): "_new_locks",
    ("redis/fastlane.py", "PoolShares"): "_forked",
}
BRIEF: dict[tuple[str, str], str] = {
    # (module, class or <module>): why it is never held across I/O
    ("forksafe.py", "<module>"): "the new locks a child's clients get",
    ("generators/registry.py", "<module>"): "registering a strategy: a dict, at import time",
    ("orm/bindings.py", "<module>"): "mapping a column: SQLAlchemy metadata, no I/O",
    ("orm/events.py", "<module>"): "installing the listeners once, at import time",
    ("maintenance/executor.py", "DaemonThreadExecutor"): "a set of threads; a child forgets it",
    ("redis/loops.py", "PerLoop"): "finding the running loop's state: dicts, no I/O",
    ("generators/aio.py", "AsyncIdGenerator"): "which loop owns the buffer: no I/O",
}


def is_type_probe(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type"


def lock_sites() -> set[tuple[str, str]]:
    """``(module, owner)`` of every ``threading.<lock>()`` call in the package (``owner``: the
    enclosing class, or ``<module>``)."""
    found: set[tuple[str, str]] = set()

    def visit(node: ast.AST, owner: str, module: str) -> None:
        for child in ast.iter_child_nodes(node):
            if is_type_probe(child):
                continue  # type(threading.RLock()): a lock's class, no lock kept
            if isinstance(child, ast.Call):
                func = child.func
                if (
                    isinstance(func, ast.Attribute)
                    and isinstance(func.value, ast.Name)
                    and func.value.id == "threading"
                    and func.attr in LOCK_KINDS
                ):
                    found.add((module, owner))
            visit(child, child.name if isinstance(child, ast.ClassDef) else owner, module)

    for path in PACKAGE.rglob("*.py"):
        visit(ast.parse(path.read_text()), "<module>", path.relative_to(PACKAGE).as_posix())
    return found


def test_every_lock_of_the_package_is_renewed_in_a_forked_child_or_never_held_across_io() -> None:
    sites = lock_sites()
    unreviewed = sorted(sites - RENEWED.keys() - BRIEF.keys())
    assert not unreviewed, (
        f"locks made at {unreviewed}: renew them in a forked child (sa_redis_ids.forksafe."
        "ForkSafe) and list them in RENEWED, or list them in BRIEF with why they are never "
        "held across I/O"
    )
    for (module, owner), hook in RENEWED.items():
        if (module, owner) in sites:
            name = "sa_redis_ids." + module.removesuffix(".py").replace("/", ".")
            assert callable(getattr(getattr(importlib.import_module(name), owner), hook))


def held_elsewhere(locks: list[Any]) -> threading.Event:
    """Hold ``locks`` in another thread (as a thread of a parent holds them at a fork) until the
    returned event is set."""
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        for lock in locks:
            lock.acquire()
        held.set()
        done.wait()
        for lock in reversed(locks):
            lock.release()

    threading.Thread(target=hold, daemon=True).start()
    held.wait()
    return done


@pytest.mark.parametrize("kind", ["redis", "sentinel", "cluster"])
def test_a_clients_pools_get_new_free_locks_of_the_same_kind(
    kind: str, request: pytest.FixtureRequest
) -> None:
    client: Any
    if kind == "redis":
        client = redis.Redis.from_url(REDIS_URL)
        parts = [client.connection_pool]
    elif kind == "sentinel":  # nothing is asked of the sentinels: the client is only built
        client = redis.sentinel.Sentinel([("127.0.0.1", 1)]).master_for("service")
        sentinels = client.connection_pool.sentinel_manager.sentinels
        parts = [client.connection_pool, *(s.connection_pool for s in sentinels)]
    else:
        client = RedisCluster.from_url(request.getfixturevalue("redis_cluster").url)
        manager = client.nodes_manager
        nodes = manager.nodes_cache.values()
        parts = [client, manager, *(node.redis_connection.connection_pool for node in nodes)]
    old = {
        (id(part), name): (part, getattr(part, name))
        for part in parts
        for name in ("_lock", "_fork_lock", "_initialization_lock")
        if hasattr(part, name)
    }
    locks = list({id(lock): lock for _, lock in old.values()}.values())  # shared ones once
    done = held_elsewhere(locks)
    try:
        renew_client_locks(client)
        renewed: dict[int, Any] = {}
        for (_, name), (part, lock) in old.items():
            new = getattr(part, name)
            assert new is not lock and type(new) is type(lock)
            assert renewed.setdefault(id(lock), new) is new, "a shared lock stays shared"
            assert new.acquire(blocking=False)
            new.release()
    finally:
        done.set()
        client.close()


class _GrowsWhileRead(weakref.WeakSet[Any]):
    """The registry of fork-safe objects as a fork sees it while another thread makes one: the
    object ``late`` is added during the first read (which then fails: the set changed size)."""

    def __init__(self, items: Any, late: Any):
        super().__init__(items)
        self._late = late

    def __iter__(self) -> Iterator[Any]:
        late, self._late = self._late, None
        for item in super().__iter__():
            if late is not None:
                self.add(late)
                late = None
            yield item


def test_a_fork_while_another_thread_makes_a_fork_safe_object_renews_every_lock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Holder(ForkSafe):
        def __init__(self, *, watched: bool = True) -> None:
            self.lock = threading.Lock()
            if watched:
                self.watch_forks()

        def after_fork_in_child(self) -> None:
            self.lock = threading.Lock()

    holder, late = Holder(), Holder(watched=False)  # late: made as the fork reads
    monkeypatch.setattr(forksafe, "_LIVE", _GrowsWhileRead(forksafe._LIVE, late))
    done = held_elsewhere([holder.lock, late.lock])
    try:
        pid = os.fork()
        if pid == 0:  # the child: both locks free (renewed), though the first read failed
            free = holder.lock.acquire(timeout=5) and late.lock.acquire(timeout=5)
            os._exit(0 if free else 1)
        _, status = os.waitpid(pid, 0)
    finally:
        done.set()
    assert os.waitstatus_to_exitcode(status) == 0, "a lock stayed held in the forked child"
