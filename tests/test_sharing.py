"""Shared round trips: concurrent callers of one generator ride one script call together.

Uniqueness, per-caller order and density under threads, asyncio tasks and processes on every
backend; and, with a call held in flight by a floor that waits, exactly how requests are batched,
how an error reaches every waiter, what a cancelled waiter costs and what a forked child inherits.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sa_redis_ids import RedisIds, RedisUnavailable, sharing
from sa_redis_ids.metrics import enable_prometheus
from sa_redis_ids.redis.plans import Effect, Plan
from sa_redis_ids.sharing import SharedCalls
from tests.conftest import Backend
from tests.support.clients import async_ids_on
from tests.support.servers import RedisServer
from tests.support.uniqueness import GeneratorSpec, draw_in_processes, duplicates

OPTIONS: dict[str, dict[str, Any]] = {
    "sequence": {},
    "snowflake": {},
    "daily_code": {"code_prefix": "IS", "digits": 6},
    "date_prefixed": {},
    "short_id": {"pool_size": 1_000_000, "offset": 1_000_000},
}
ORDERED = {"sequence", "snowflake", "daily_code", "date_prefixed"}
"""Strategies whose values rise call after call (within one day)."""


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Poll ``condition`` until it holds (a state to reach, not a time to wait)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        time.sleep(0.002)


def calls_counted(ids: Any) -> Callable[[str], float]:
    """Count the script calls of ``ids`` per namespace (metrics on a private registry)."""
    registry = CollectorRegistry()
    enable_prometheus(ids, registry=registry)

    def calls(namespace: str) -> float:
        total = 0.0
        for metric in registry.collect():
            for sample in metric.samples:
                name, labels = sample.name, sample.labels
                if (
                    name.endswith("_call_duration_seconds_count")
                    and labels.get("id_namespace") == namespace
                ):
                    total += sample.value
        return total

    return calls


def check_drawn(strategy: str, per_caller: list[list[Any]], generator: Any) -> None:
    """No value twice, each caller's values in order, and dense counters where they are dense."""
    values = [value for chunk in per_caller for value in chunk]
    assert duplicates(values) == {}
    if strategy in ORDERED:
        for chunk in per_caller:
            assert chunk == sorted(chunk), "each caller gets its values in order"
    if strategy == "sequence":
        assert sorted(values) == list(range(1, len(values) + 1)), "nothing drawn in between"
    if strategy == "daily_code":
        counters = sorted(generator.parse(code).counter for code in values)
        assert counters == list(range(1, len(values) + 1)), "daily codes stay dense"


@pytest.mark.parametrize("strategy", sorted(OPTIONS))
def test_sixteen_threads_share_calls_and_never_repeat_a_value(
    backend: Backend, strategy: str
) -> None:
    generator = getattr(backend.ids(), strategy)("shared", **OPTIONS[strategy])
    results: list[list[Any]] = [[] for _ in range(16)]
    barrier = threading.Barrier(16)

    def work(slot: int) -> None:
        barrier.wait()
        for _ in range(40):
            results[slot].append(generator.next_id())
            results[slot].extend(generator.next_ids(3))

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(len(chunk) == 160 for chunk in results)
    check_drawn(strategy, results, generator)


@pytest.mark.parametrize("strategy", sorted(OPTIONS))
def test_sixty_four_tasks_share_calls_and_never_repeat_a_value(
    backend: Backend, strategy: str
) -> None:
    async def main() -> tuple[list[list[Any]], float]:
        ids = async_ids_on(backend)
        calls = calls_counted(ids)
        generator = getattr(ids, strategy)("shared", **OPTIONS[strategy])

        async def task() -> list[Any]:
            out: list[Any] = []
            for _ in range(10):
                out.append(await generator.next_id())
                out.extend(await generator.next_ids(3))
            return out

        try:
            drawn = await asyncio.gather(*(task() for _ in range(64)))
            return drawn, calls("shared")
        finally:
            await ids.aclose()

    drawn, calls = asyncio.run(main())
    assert all(len(chunk) == 40 for chunk in drawn)
    check_drawn(strategy, drawn, backend.ids().daily_code("shared", **OPTIONS["daily_code"]))
    # 64 tasks each making 20 calls in turn: without sharing that is 1280 calls; with it, every
    # call after the first round carries the requests that queued while it was in flight
    assert calls < 64 * 20 / 4


def test_daily_codes_from_processes_of_threads_stay_dense(real_backend: Backend) -> None:
    spec = real_backend.spec("daily_code", "dense", code_prefix="IS", digits=7)
    values = draw_in_processes(spec, processes=3, threads=8, per_thread=300)
    assert duplicates(values) == {}
    generator = real_backend.ids().daily_code("dense", code_prefix="IS", digits=7)
    counters = sorted(generator.parse(code).counter for code in values)
    assert counters == list(range(1, 3 * 8 * 300 + 1))


def test_sequence_batches_from_processes_of_threads_leave_no_gap(real_backend: Backend) -> None:
    spec = real_backend.spec("sequence", "batches")
    spec = GeneratorSpec(spec.target, spec.prefix, "sequence", "batches", batch=7)
    values = draw_in_processes(spec, processes=3, threads=8, per_thread=700)
    assert sorted(values) == list(range(1, 3 * 8 * 700 + 1))


# -- a call held in flight ------------------------------------------------------------------------


def frames_of(error: BaseException) -> list[Any]:
    """The frames of ``error``'s own traceback."""
    found = []
    tb = error.__traceback__
    while tb is not None:
        found.append(tb.tb_frame)
        tb = tb.tb_next
    return found


def check_own_frames(errors: list[BaseException]) -> None:
    """Each error's traceback holds frames of its own caller only: no frame of another caller's
    traceback, and none of the shared call's (those are on the cause, which no caller raised)."""
    seen: dict[int, int] = {}
    for number, error in enumerate(errors):
        frames = frames_of(error)
        assert frames, "raised in the caller"
        for frame in frames:
            assert seen.setdefault(id(frame), number) == number, "a frame of another caller"
        cause = error.__cause__
        assert cause is not None
        assert not {id(f) for f in frames} & {id(f) for f in frames_of(cause)}


class HeldFloor:
    """A floor (nothing used yet) whose reads wait until the test lets each one go; reads
    ``fail_first`` raise instead once let go. Only the test's own process waits."""

    def __init__(self, fail_first: int = 0, error: BaseException | None = None):
        self.reads = 0
        self.entered = threading.Semaphore(0)
        self.go = threading.Semaphore(0)
        self.fail_first = fail_first
        self.error = error
        self.pid = os.getpid()

    def __call__(self) -> int:
        if os.getpid() != self.pid:
            return 0
        self.reads += 1
        read = self.reads
        self.entered.release()
        assert self.go.acquire(timeout=30), "the test never let the floor read go"
        if read <= self.fail_first:
            assert self.error is not None
            raise self.error
        return 0

    def let_go(self) -> None:
        self.go.release()

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=30), "no floor read started"


def _start(
    target: Callable[[], Any], out: list[Any], errors: list[BaseException]
) -> threading.Thread:
    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_requests_that_wait_for_a_call_in_flight_go_out_together_in_one_call(
    server: RedisServer,
) -> None:
    ids = RedisIds.from_url(server.url)
    calls = calls_counted(ids)
    floor = HeldFloor()
    users = ids.sequence("users", floor=floor)
    out: list[Any] = []
    errors: list[BaseException] = []
    leader = _start(users.next_id, out, errors)
    floor.wait_entered()  # the first call is in flight, held at its floor read
    sizes = [1, 5, 1, 2, 1, 3, 1, 4, 1, 1, 6, 1, 1, 2, 1]
    waiters = [
        _start(
            users.next_id if size == 1 else (lambda size=size: users.next_ids(size)), out, errors
        )
        for size in sizes
    ]
    wait_until(lambda: users._shared.waiting == len(sizes), "every request waits")
    floor.let_go()
    for thread in [leader, *waiters]:
        thread.join()
    assert errors == []
    assert calls("users") == 2, "the first call, then one call for all that waited"
    lists = [value if isinstance(value, list) else [value] for value in out]
    assert sorted(len(chunk) for chunk in lists) == sorted([1, *sizes])
    assert all(chunk == list(range(chunk[0], chunk[0] + len(chunk))) for chunk in lists)
    assert sorted(v for chunk in lists for v in chunk) == list(range(1, 1 + 1 + sum(sizes)))


def test_a_failed_shared_call_fails_each_waiter_with_the_same_typed_error(
    server: RedisServer,
) -> None:
    ids = RedisIds.from_url(server.url, retry_after=0)
    floor = HeldFloor()
    users = ids.sequence("users", floor=floor)
    out: list[Any] = []
    errors: list[BaseException] = []
    leader = _start(users.next_id, out, errors)
    floor.wait_entered()
    waiters = [_start(users.next_id, out, errors) for _ in range(6)]
    wait_until(lambda: users._shared.waiting == 6, "every request waits")
    server.kill()  # the leader's script call and the shared call after it both fail
    floor.let_go()
    floor.wait_entered()  # the shared call reads the floor again (the first read never counted)
    floor.let_go()
    for thread in [leader, *waiters]:
        thread.join()
    assert out == []
    assert len(errors) == 7
    assert all(isinstance(error, RedisUnavailable) for error in errors)
    assert len({id(error) for error in errors}) == 7, "each caller raises an exception of its own"
    causes = Counter(id(error.__cause__) for error in errors)
    shared_cause = next(error.__cause__ for error in errors if causes[id(error.__cause__)] == 6)
    assert isinstance(shared_cause, RedisUnavailable), "six copies of the shared call's error"
    for error in errors:
        if error.__cause__ is shared_cause:
            assert str(error) == str(shared_cause)
            assert error.namespace == shared_cause.namespace == "users"
    check_own_frames([error for error in errors if error.__cause__ is shared_cause])


def test_waiters_behind_a_hung_node_get_its_timeout_not_a_hang(server: RedisServer) -> None:
    ids = RedisIds.from_url(server.url, socket_timeout=0.5, retry_after=0)
    floor = HeldFloor()
    users = ids.sequence("users", floor=floor)
    out: list[Any] = []
    errors: list[BaseException] = []
    leader = _start(users.next_id, out, errors)
    floor.wait_entered()
    waiters = [_start(users.next_id, out, errors) for _ in range(5)]
    wait_until(lambda: users._shared.waiting == 5, "every request waits")
    server.pause()  # SIGSTOP: connections stay open, nothing answers
    try:
        floor.let_go()
        floor.wait_entered()  # the shared call reads the floor again, then hangs on the node
        floor.let_go()
        for _ in range(4):  # a try that timed out goes again within the deadline: floor reads
            floor.let_go()
        for thread in [leader, *waiters]:
            thread.join(timeout=60)
        assert not any(thread.is_alive() for thread in [leader, *waiters]), "a caller hangs"
    finally:
        server.resume()
    assert out == []
    assert len(errors) == 6 and all(isinstance(error, RedisUnavailable) for error in errors)
    assert all("Timeout" in str(error) for error in errors)
    assert len({id(error) for error in errors}) == 6, "each caller raises an exception of its own"
    assert sorted(Counter(id(error.__cause__) for error in errors).values()) == [1, 5]
    floor.let_go()  # the next call reads the floor again: no call on the node succeeded yet
    assert users.next_id() >= 1, "the node answers again"


def test_sequence_exhausted_for_a_shared_call_lets_each_waiter_try_alone(
    server: RedisServer,
) -> None:
    ids = RedisIds.from_url(server.url)
    floor = HeldFloor()
    codes = ids.daily_code("codes", code_prefix="IS", digits=1, floor=lambda day: floor())
    out: list[Any] = []
    errors: list[BaseException] = []
    leader = _start(codes.next_id, out, errors)
    floor.wait_entered()
    waiters = [_start(lambda: codes.next_ids(2), out, errors) for _ in range(5)]
    wait_until(lambda: codes._shared.waiting == 5, "every request waits")
    floor.let_go()
    for thread in [leader, *waiters]:
        thread.join()
    # 9 codes a day: the leader's 1 and four pairs fit; a shared call for 10 would not have
    assert len(out) == 5 and len(errors) == 1
    drawn = [code for chunk in out for code in (chunk if isinstance(chunk, list) else [chunk])]
    assert sorted(codes.parse(code).counter for code in drawn) == list(range(1, 10))


def test_a_cancelled_waiting_task_draws_nothing_and_a_cancelled_taken_one_is_a_gap(
    server: RedisServer,
) -> None:
    from sa_redis_ids.asyncio import AsyncRedisIds

    async def main() -> tuple[list[int], list[Any]]:
        ids = AsyncRedisIds.from_url(server.url)
        entered = asyncio.Queue[None]()
        go = asyncio.Queue[bool]()

        async def floor() -> int:
            await entered.put(None)
            if not await go.get():
                raise RuntimeError("this read fails: the next call reads the floor again")
            return 0

        users = ids.sequence("users", floor=floor)
        shared = users._shared
        leader = asyncio.create_task(users.next_id())
        await entered.get()  # the first call is in flight
        early = [asyncio.create_task(users.next_ids(2)) for _ in range(3)]
        while shared.waiting < 3:
            await asyncio.sleep(0)
        early[1].cancel()  # cancelled while waiting: it leaves the queue, nothing is drawn
        await asyncio.gather(early[1], return_exceptions=True)
        await go.put(False)  # the leader fails; the shared call for the others reads again
        await entered.get()  # the shared call is in flight, for early[0] and early[2]
        assert shared.waiting == 0
        early[2].cancel()  # cancelled after its request went out: its values are a gap
        await go.put(True)
        results = await asyncio.gather(leader, *early, return_exceptions=True)
        after = await users.next_ids(3)
        return after, results

    after, results = asyncio.run(main())
    assert isinstance(results[0], RuntimeError)
    assert isinstance(results[2], asyncio.CancelledError)
    assert isinstance(results[3], asyncio.CancelledError)
    assert results[1] == [1, 2]
    assert after == [5, 6, 7], "3 and 4 went to the cancelled task: a gap, handed to no one"


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_inherits_no_call_in_flight_and_no_waiters(server: RedisServer) -> None:
    ids = RedisIds.from_url(server.url)
    floor = HeldFloor()
    users = ids.sequence("users", floor=floor)
    out: list[Any] = []
    errors: list[BaseException] = []
    leader = _start(users.next_id, out, errors)
    floor.wait_entered()
    waiters = [_start(users.next_id, out, errors) for _ in range(3)]
    wait_until(lambda: users._shared.waiting == 3, "every request waits")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a call of its own must not wait for its parent's
        try:
            signal.alarm(20)
            drawn = users.next_ids(2)
            os.write(write, ",".join(map(str, drawn)).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = [int(v) for v in pipe.read().split(",") if v]
    os.waitpid(pid, 0)
    floor.let_go()
    for thread in [leader, *waiters]:
        thread.join()
    assert errors == []
    assert len(child) == 2
    assert duplicates(child + out) == {}
    assert sorted(child + out) == list(range(1, 7))


def test_share_calls_off_gives_each_call_its_own_round_trip(backend: Backend) -> None:
    ids = backend.ids()
    calls = calls_counted(ids)
    users = ids.sequence("alone")
    users.share_calls = False
    results: list[list[int]] = [[] for _ in range(4)]

    def work(slot: int) -> None:
        results[slot].extend(users.next_id() for _ in range(25))

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls("alone") == 100
    check_drawn("sequence", results, users)


def test_share_calls_off_gives_each_task_its_own_round_trip(backend: Backend) -> None:
    async def main() -> tuple[list[list[int]], float]:
        ids = async_ids_on(backend)
        calls = calls_counted(ids)
        users = ids.sequence("alone")
        users.share_calls = False
        assert users.generator.share_calls is False

        async def task() -> list[int]:
            return [await users.next_id() for _ in range(10)]

        try:
            return await asyncio.gather(*(task() for _ in range(8))), calls("alone")
        finally:
            await ids.aclose()

    drawn, calls = asyncio.run(main())
    assert calls == 80
    check_drawn("sequence", drawn, None)


# -- thread calls on a scripted node: which thread makes which call --------------------------------


class ScriptedCalls:
    """A take plan for `SharedCalls` whose values are consecutive integers: with ``held``, each
    call waits until the test lets it go; calls listed in ``failing`` (counted from 1) raise
    instead of drawing. Records each call's size and the thread that made it."""

    def __init__(self, *, held: bool = False, failing: Callable[[int], bool] = lambda call: False):
        self.held = held
        self.failing = failing
        self.made: list[tuple[int, str]] = []
        self.drawn = 0
        self.entered = threading.Semaphore(0)
        self.go = threading.Semaphore(0)
        self.lock = threading.Lock()

    def plan(self, sizes: list[int]) -> Plan[list[int]]:
        values: list[int] = yield _ScriptedCall(self, sum(sizes))
        return values

    def call(self, n: int) -> list[int]:
        with self.lock:
            self.made.append((n, threading.current_thread().name))
            number = len(self.made)
        if self.held:
            self.entered.release()
            assert self.go.acquire(timeout=30), "the test never let the call go"
        if self.failing(number):
            raise RedisUnavailable(f"call {number} fails", namespace="scripted")
        with self.lock:
            first = self.drawn + 1
            self.drawn += n
        return list(range(first, first + n))

    def let_go(self) -> None:
        self.go.release()

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=30), "no call started"


class _ScriptedCall(Effect):
    __slots__ = ("calls", "n")

    def __init__(self, calls: ScriptedCalls, n: int):
        self.calls = calls
        self.n = n

    def run(self) -> list[int]:
        return self.calls.call(self.n)


def _start_named(
    name: str, target: Callable[[], Any], out: dict[str, Any], errors: dict[str, BaseException]
) -> threading.Thread:
    def run() -> None:
        try:
            out[name] = target()
        except BaseException as exc:
            errors[name] = exc

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def test_the_last_woken_thread_of_a_batch_calls_for_the_requests_queued_meanwhile() -> None:
    scripted = ScriptedCalls(held=True)
    shared = SharedCalls(scripted.plan, most=100, slots=1)
    out: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}
    threads = [_start_named("leader", lambda: shared.take(1), out, errors)]
    scripted.wait_entered()  # the leader's own call is in flight
    for count, name in enumerate(["first", "second"], start=1):
        threads.append(_start_named(name, lambda: shared.take(1), out, errors))
        wait_until(lambda count=count: shared.waiting == count, f"{name} waits")
    scripted.let_go()
    scripted.wait_entered()  # the leader calls for the two that waited
    threads.append(_start_named("late", lambda: shared.take(2), out, errors))
    wait_until(lambda: shared.waiting == 1, "the late request waits")
    scripted.let_go()
    scripted.wait_entered()  # the batch woke in order; its last thread, running, calls
    scripted.let_go()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == {}
    assert scripted.made == [(1, "leader"), (2, "leader"), (2, "second")]
    assert out == {"leader": [1], "first": [2], "second": [3], "late": [4, 5]}
    scripted.held = False
    assert shared.take(1) == [6], "a lone caller calls at once: every slot and chain is free"


class _InterruptedOnWaking:
    """A waiter's wake lock whose waiting, once the lock is taken, raises KeyboardInterrupt: an
    interruption that lands just after the wake-up, before the thread passes the chain on."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.waits = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.waits += 1
        taken = self.lock.acquire(blocking, timeout)
        if self.waits == 2:  # the first acquire only locks it; the second is the wait
            raise KeyboardInterrupt
        return taken

    def release(self) -> None:
        self.lock.release()


@pytest.mark.parametrize("where", ["as it wakes", "as it wakes the next thread"])
def test_a_waiter_interrupted_as_it_wakes_still_passes_the_chain_on(
    monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """Ctrl-C in a thread that waited for a shared call, landing just as it wakes or as it wakes
    the next thread of its chain: that thread raises KeyboardInterrupt and its values are a gap;
    the threads after it in the chain still get theirs, and the generator serves the next
    callers."""
    scripted = ScriptedCalls(held=True)
    shared = SharedCalls(scripted.plan, most=100, slots=1)
    out: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}
    threads = [_start_named("leader", lambda: shared.take(1), out, errors)]
    scripted.wait_entered()
    if where == "as it wakes":
        monkeypatch.setattr(
            sharing,
            "_new_wake",
            lambda: (
                _InterruptedOnWaking()
                if threading.current_thread().name == "first"
                else threading.Lock()
            ),
        )
    else:
        wake, interrupted = sharing._wake, []

        def wake_interrupted_once(request: Any) -> None:
            if threading.current_thread().name == "first" and not interrupted:
                interrupted.append(request)
                raise KeyboardInterrupt
            wake(request)

        monkeypatch.setattr(sharing, "_wake", wake_interrupted_once)
    for count, name in enumerate(["first", "second"], start=1):
        threads.append(_start_named(name, lambda: shared.take(1), out, errors))
        wait_until(lambda count=count: shared.waiting == count, f"{name} waits")
    scripted.let_go()
    scripted.wait_entered()  # the leader calls for first and second
    scripted.let_go()
    for thread in threads:
        thread.join(timeout=30)
    assert not any(thread.is_alive() for thread in threads), "a thread hangs"
    assert out == {"leader": [1], "second": [3]}, "first's value is a gap, second gets its own"
    assert isinstance(errors.pop("first"), KeyboardInterrupt) and errors == {}
    scripted.held = False
    assert shared.take(1) == [4], "a lone caller calls at once: every slot and chain is free"


def test_a_failed_call_wakes_its_whole_batch_with_one_error_and_the_queue_is_still_served() -> None:
    scripted = ScriptedCalls(held=True, failing=lambda call: call == 2)
    shared = SharedCalls(scripted.plan, most=100, slots=1)
    out: dict[str, Any] = {}
    errors: dict[str, BaseException] = {}
    threads = [_start_named("leader", lambda: shared.take(1), out, errors)]
    scripted.wait_entered()
    for count, name in enumerate(["a", "b", "c"], start=1):
        threads.append(_start_named(name, lambda: shared.take(2), out, errors))
        wait_until(lambda count=count: shared.waiting == count, f"{name} waits")
    scripted.let_go()
    scripted.wait_entered()  # the shared call for a, b and c: it fails
    threads.append(_start_named("late", lambda: shared.take(1), out, errors))
    wait_until(lambda: shared.waiting == 1, "the late request waits")
    scripted.let_go()
    scripted.wait_entered()  # the failed batch's last thread calls for the late request
    scripted.let_go()
    for thread in threads:
        thread.join(timeout=30)
    assert out == {"leader": [1], "late": [2]}, "the failed call drew nothing"
    assert sorted(errors) == ["a", "b", "c"]
    assert len({id(error) for error in errors.values()}) == 3, "an exception of each its own"
    assert len({id(error.__cause__) for error in errors.values()}) == 1, "one shared cause"
    assert all(isinstance(error, RedisUnavailable) for error in errors.values())
    assert {str(error) for error in errors.values()} == {"call 2 fails (namespace=scripted)"}
    check_own_frames(list(errors.values()))
    assert scripted.made == [(1, "leader"), (6, "leader"), (1, "c")]


@pytest.mark.parametrize("slots", [1, 2])
@pytest.mark.parametrize("failures", [False, True], ids=["calls succeed", "every 5th call fails"])
def test_threads_calling_in_a_loop_get_their_own_values_in_order_and_nothing_more(
    slots: int, failures: bool
) -> None:
    scripted = ScriptedCalls(
        failing=(lambda call: call % 5 == 0) if failures else lambda call: False
    )
    shared = SharedCalls(scripted.plan, most=10, slots=slots)
    results: list[list[int]] = [[] for _ in range(16)]
    failed = [0] * 16
    barrier = threading.Barrier(16)

    def work(slot: int) -> None:
        barrier.wait()
        for turn in range(300):
            try:
                results[slot].extend(shared.take(1 + (slot + turn) % 3))
            except RedisUnavailable:
                failed[slot] += 1

    threads = [threading.Thread(target=work, args=(slot,)) for slot in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a caller hangs"
    assert all(chunk == sorted(chunk) for chunk in results), "each caller's values in order"
    drawn = [value for chunk in results for value in chunk]
    assert sorted(drawn) == list(range(1, scripted.drawn + 1)), "nothing drawn for no one"
    assert all(n <= 10 for n, _ in scripted.made), "no call beyond max_batch"
    assert (sum(failed) > 0) == failures
    assert shared.waiting == 0
