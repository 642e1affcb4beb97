"""Shared round trips: concurrent callers of one generator ride one script call together.

Without sharing, 16 threads (or 64 asyncio tasks) each calling ``next_id()`` make 16 (64) round
trips, and throughput is that of one command per caller, whatever the concurrency. With sharing, a
generator lets at most one call per node be in flight; a caller that finds every such call busy
(or, among threads, an answered batch still waking up) *waits*, and when a call ends the requests
that queued up meanwhile go out together as one ``next_ids(k)`` (``k`` the sum of what they asked
for, at most the strategy's ``max_batch``). Each caller gets its own values, in the order the
script returned them (a contiguous slice of one reply), and nothing is drawn beyond what the
waiting callers asked for: sharing leaves no gaps at exit and keeps daily codes dense, unlike
buffering (``block=``).

The first caller does not wait for anyone: it takes a free call slot and makes the call itself, on
its own thread or task, so a lone caller's latency is one round trip, as without sharing (the
bookkeeping is one lock taken twice). A generator's ``next_id``/``next_ids`` plans ask for the
values with one `SharedTake` effect, which each driver carries out its own way. Only callers that
arrive while calls are in flight (or a batch of threads wakes) queue up:

- **Threads** (`SharedCalls`): a call's waiters wake as a *chain*: the thread that made the
  call wakes the first, and each woken thread wakes the next before it returns, so one thread at
  a time competes for the GIL, not the whole batch at once (a thread woken while another holds the
  GIL sleeps a second time). Callers arriving while a chain wakes queue up, even with a slot free
  (the woken threads mostly call again at once), and the chain's last thread, which is running,
  makes the call for all of them before it returns. A thread whose own call ends makes the next
  call for the requests queued meanwhile, unless a chain is waking (its last thread will). So no
  caller makes more than two calls, every call starts on a running thread, and 16 threads calling
  in a loop ride calls of about 15 requests, not two alternating halves of the 16.
- **asyncio** (`AsyncSharedCalls`): when a call ends, the tasks it answered run first (so
  those that call again join the next batch), then one task makes the next call for the queued
  requests; its waiters are woken when the reply is in. State is kept per event loop.

A request carries what decides its values. What a caller's own call would read from where it
runs (the floor a flush reads through its own connection) is captured in the caller's thread or
task when it queues (`Carrier.capture`), and the call made for a batch runs under what its
requests captured (`Carrier.serving`), never under the context of whichever thread or task
happens to make it. A strategy decides how one call serves several requests
(`take_plan` receives each request's size): short IDs of single requests stay independent random
positions, as if each had called alone.

Errors: a call that fails fails each of its callers with an exception of its own: a copy of the
call's exception (same type, message and attributes), raised in the caller's thread or task and
chained (``__cause__``) to the exception the call raised, so no caller's traceback holds another
request's frames. One exception: [`SequenceExhausted`][sa_redis_ids.SequenceExhausted] from a call
for several callers sends each of them to try alone, so a counter near its end serves the requests
that still fit, as it would without sharing.

Cancellation (asyncio): a waiting task cancelled before its request went out leaves the queue and
draws nothing; one cancelled while its request is in flight drops its values when they arrive: they
are a gap, never handed to another caller (the same as cancelling a call without sharing).
Likewise a waiting thread interrupted (``KeyboardInterrupt``), even just as it wakes or wakes the
next one: it leaves the queue, or drops its values and passes the chain on, so the threads after it
get theirs. (Python can deliver an interruption between any two lines: one that lands inside the
few lines that start the next shared call can still leave the queued callers waiting until another
thread calls.)

Fork: a child forgets calls in flight and queued requests it inherited (they are its parent's), as
`sa_redis_ids.buffering` does with buffers.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, Protocol, TypeVar

from sa_redis_ids.errors import SequenceExhausted
from sa_redis_ids.redis.plans import Effect, Plan, run_plan, run_plan_async

V = TypeVar("V")

TakePlan = Callable[[list[int]], Plan[list[V]]]
"""The plan of one call serving requests of the given sizes: the values of every request, in
the order of the sizes (each request gets its slice)."""


class Carrier(Protocol):
    """What a generator's shared calls need to know of what decides a request's values."""

    def capture(self) -> object:
        """What decides a request's values, read in the requesting thread or task (quickly:
        threads call it holding the shared calls' lock; it does no I/O)."""
        ...

    def serving(self, captured: list[object]) -> AbstractContextManager[object]:
        """Run one call for requests that captured ``captured`` (in their order)."""
        ...


class _NoContext:
    """The `Carrier` of shared calls whose requests carry nothing: every request decides alike."""

    def capture(self) -> object:
        return None

    def serving(self, captured: list[object]) -> AbstractContextManager[object]:
        return contextlib.nullcontext()


NO_CONTEXT: Carrier = _NoContext()


def own_error(shared: BaseException) -> BaseException:
    """An exception of one caller's own for the ``shared`` exception of a call made for several:
    the same type, arguments and attributes, no traceback yet, chained to ``shared``. Raising one
    object in several threads or tasks would give each traceback the frames (and local
    variables) of the callers that raised it before."""
    cls = type(shared)
    try:
        copy = cls.__new__(cls, *shared.args)
        copy.args = shared.args
        copy.__dict__.update(shared.__dict__)
    except Exception:  # an exception type that cannot be rebuilt this way: raise the shared one
        return shared
    copy.__cause__ = shared
    return copy


class _Request(Generic[V]):
    """One waiting caller's request: how many values, and what its shared call answered."""

    __slots__ = (
        "alone",
        "context",
        "error",
        "n",
        "next",
        "passed",
        "taken",
        "values",
        "wake",
        "woken",
    )

    def __init__(self, n: int, wake: Any, context: object = None):
        self.n = n
        self.wake = wake
        """What the waiter blocks on: a locked ``threading.Lock`` or an ``asyncio.Future``."""
        self.context = context
        """What decides its values, captured in its own thread or task (see `Carrier`)."""
        self.values: list[V] | None = None
        self.error: BaseException | None = None
        self.alone = False
        """The shared call ran out of values: try again alone."""
        self.taken = False
        """Left the queue in a batch (a cancelled waiter's values are then dropped)."""
        self.next: _Request[V] | None = None
        """The (thread) waiter to wake after this one; None: the last of its batch."""
        self.woken = False
        """Its turn came: set just before ``wake`` is released (threads)."""
        self.passed = False
        """The last thread of its chain counted the chain off (threads; see `SharedCalls._woken`)."""

    def outcome(self) -> list[V] | None:
        """The values, or raise the shared call's error (a copy of its own, see `own_error`);
        ``None``: the caller must call alone."""
        if self.error is not None:
            raise own_error(self.error)
        return None if self.alone else self.values


class _Sharing(Generic[V]):
    """What the thread and asyncio forms share: the queue, batching, and answering a batch."""

    def __init__(
        self, take_plan: TakePlan[V], carrier: Carrier = NO_CONTEXT, *, most: int, slots: int
    ):
        self._take_plan = take_plan
        """The strategy's plan serving requests of some sizes in one round trip."""
        self._carrier = carrier
        self.most = most
        """The most values one call may take (the strategy's ``max_batch``)."""
        self.slots = max(1, slots)
        """How many calls may be in flight at once: one per node."""

    def _next_batch(self, queue: deque[_Request[V]]) -> list[_Request[V]]:
        """Take the queued requests that fit in one call, oldest first (at least one)."""
        batch: list[_Request[V]] = []
        total = 0
        while queue and (not batch or total + queue[0].n <= self.most):
            request = queue.popleft()
            request.taken = True
            total += request.n
            batch.append(request)
        return batch

    def _serving(self, batch: list[_Request[V]]) -> AbstractContextManager[object]:
        """The context the call for ``batch`` runs in: what its requests captured."""
        return self._carrier.serving([request.context for request in batch])

    def _answer(self, batch: list[_Request[V]]) -> Plan[None]:
        """The plan of one call for ``batch``: each request gets its slice of the reply, or the
        call's error (kept on the requests, raised by each waiter in its own thread or task)."""
        try:
            values = yield from self._take_plan([request.n for request in batch])
        except SequenceExhausted as exc:
            for request in batch:
                if len(batch) > 1:
                    request.alone = True
                else:
                    request.error = exc
            return
        except BaseException as exc:
            for request in batch:
                request.error = exc
            return
        start = 0
        for request in batch:
            end = start + request.n
            request.values = values[start:end]
            start = end


_new_wake = threading.Lock
"""What a waiting thread blocks on (a seam for tests that interrupt a waiter)."""


def _wake(request: _Request[Any]) -> None:
    """Let a waiting thread go: its turn came. Safe to repeat (a thread interrupted while waking
    the next one does it again, see `SharedCalls._abandon`): the flag is set before the release,
    and a lock already released is left alone."""
    request.woken = True
    with contextlib.suppress(RuntimeError):  # released by the first, interrupted, try
        request.wake.release()


_LIVE: weakref.WeakSet[SharedCalls[Any] | AsyncSharedCalls[Any]] = weakref.WeakSet()


class SharedCalls(_Sharing[V]):
    """Shared calls of one generator among threads (see the module doc)."""

    def __init__(
        self, take_plan: TakePlan[V], carrier: Carrier = NO_CONTEXT, *, most: int, slots: int
    ):
        super().__init__(take_plan, carrier, most=most, slots=slots)
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._calls = 0
        self._chains = 0
        self._queue: deque[_Request[V]] = deque()

    @property
    def waiting(self) -> int:
        """How many requests wait for a shared call now (monitoring: the queue's length)."""
        return len(self._queue)

    def take(self, n: int) -> list[V]:
        """``n`` (>= 1) values: from a call of this thread's own when a call slot is free and no
        answered batch is still waking up, else from the next shared call."""
        with self._lock:
            lead = self._calls < self.slots and not self._chains
            if lead:
                self._calls += 1
            else:
                wake = _new_wake()
                wake.acquire()
                # captured before it is queued (a call may take it at once): no I/O, see Carrier
                request: _Request[V] = _Request(n, wake, self._carrier.capture())
                self._queue.append(request)
        if lead:
            try:
                return run_plan(self._take_plan([n]))
            finally:
                self._after_own_call()
        try:
            request.wake.acquire()
            self._woken(request)
        except BaseException:  # interrupted (KeyboardInterrupt) while waiting or just after
            self._abandon(request)
            raise
        values = request.outcome()
        return run_plan(self._take_plan([n])) if values is None else values

    def _after_own_call(self) -> None:
        """A thread's own call ended: call for the requests that queued meanwhile at once (this
        thread is running), unless a chain is waking (its last thread calls for them); or free
        the slot."""
        with self._lock:
            if not self._queue or self._chains:
                self._calls -= 1
                return
            batch = self._next_batch(self._queue)
        self._call_for(batch)

    def _call_for(self, batch: list[_Request[V]]) -> None:
        """Make the call for ``batch``, free the slot, and wake the batch's threads as a chain:
        the first only, each woken thread waking the next (so one thread at a time wants the
        GIL), the last calling for the requests queued meanwhile (see `_woken`)."""
        try:
            with self._serving(batch):
                run_plan(self._answer(batch))
        finally:
            for request, following in itertools.pairwise(batch):
                request.next = following
            with self._lock:
                self._calls -= 1
                self._chains += 1
            _wake(batch[0])

    def _woken(self, request: _Request[V]) -> None:
        """A waiting thread was woken: wake the next thread of its chain; the last one calls for
        the requests that queued while the chain woke, if a slot is free. An interrupted thread
        may get here twice (see `_abandon`): waking is safe to repeat, and the chain is counted
        off once."""
        following = request.next
        if following is not None:
            _wake(following)
            return
        with self._lock:
            if not request.passed:  # one statement: no interruption between the two
                request.passed, self._chains = True, self._chains - 1
            if not self._queue or self._calls >= self.slots:
                return
            self._calls += 1
            batch = self._next_batch(self._queue)
        self._call_for(batch)

    def _abandon(self, request: _Request[V]) -> None:
        """A waiting thread was interrupted: drop its request, or (it left the queue in a batch)
        wait for its turn in the chain unless it came already (the interruption may land just
        after the wake-up, the lock then being held by this thread), and pass the chain on. Its
        values, if any, are dropped: a gap, never another caller's."""
        with self._lock:
            if not request.taken:
                self._queue.remove(request)
                return
        if not request.woken:
            request.wake.acquire()
        self._woken(request)

    def _after_fork_in_child(self) -> None:
        self._reset()


class _LoopState(Generic[V]):
    """One event loop's calls in flight, queue and serving tasks."""

    __slots__ = ("calls", "queue", "tasks")

    def __init__(self) -> None:
        self.calls = 0
        self.queue: deque[_Request[V]] = deque()
        self.tasks: set[asyncio.Task[None]] = set()


class AsyncSharedCalls(_Sharing[V]):
    """Shared calls of one generator among the tasks of an event loop (see the module doc)."""

    def __init__(
        self, take_plan: TakePlan[V], carrier: Carrier = NO_CONTEXT, *, most: int, slots: int
    ):
        super().__init__(take_plan, carrier, most=most, slots=slots)
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState[V]] = (
            weakref.WeakKeyDictionary()
        )
        _LIVE.add(self)

    def _state(self, loop: asyncio.AbstractEventLoop) -> _LoopState[V]:
        state = self._states.get(loop)
        if state is None:
            state = self._states[loop] = _LoopState()
        return state

    @property
    def waiting(self) -> int:
        """How many requests wait for a shared call now, over every event loop (monitoring)."""
        return sum(len(state.queue) for state in list(self._states.values()))

    async def take(self, n: int) -> list[V]:
        """``n`` (>= 1) values: from this task's own call when a call slot is free, else from the
        next shared call."""
        loop = asyncio.get_running_loop()
        state = self._state(loop)
        if state.calls < self.slots:
            state.calls += 1
            try:
                return await run_plan_async(self._take_plan([n]))
            finally:
                self._pass_on(loop, state)
        request: _Request[V] = _Request(n, loop.create_future(), self._carrier.capture())
        state.queue.append(request)
        try:
            await request.wake
        except asyncio.CancelledError:
            if not request.taken:
                state.queue.remove(request)
            raise  # taken: its values, when they come, are dropped (a gap)
        values = request.outcome()
        return await run_plan_async(self._take_plan([n])) if values is None else values

    def _pass_on(self, loop: asyncio.AbstractEventLoop, state: _LoopState[V]) -> None:
        """A call ended: free the slot if nothing waits; else call for the waiting requests once
        the tasks this call answered have run (those that call again then join the batch)."""
        if self._states.get(loop) is not state:  # forked since: the state is gone
            return
        if not state.queue:
            state.calls -= 1
            return
        loop.call_soon(self._dispatch, loop, state)

    def _dispatch(self, loop: asyncio.AbstractEventLoop, state: _LoopState[V]) -> None:
        """Start a task calling for the queued requests, or free the slot (all were cancelled)."""
        if self._states.get(loop) is not state:
            return
        batch = self._next_batch(state.queue)
        if not batch:
            state.calls -= 1
            return
        task = loop.create_task(self._serve(loop, state, batch))
        state.tasks.add(task)
        task.add_done_callback(state.tasks.discard)

    async def _serve(
        self, loop: asyncio.AbstractEventLoop, state: _LoopState[V], batch: list[_Request[V]]
    ) -> None:
        try:
            with self._serving(batch):
                await run_plan_async(self._answer(batch))
        finally:
            for request in batch:
                if not request.wake.done():
                    request.wake.set_result(None)
            # the slot stays taken until the woken tasks ran: those that call again queue up
            loop.call_soon(self._dispatch, loop, state)

    def _after_fork_in_child(self) -> None:
        self._states = weakref.WeakKeyDictionary()


class Shared(Generic[V]):
    """A generator's shared calls on both front ends: `plan(n)` is the plan a generator's
    ``next_id``/``next_ids`` run; its one effect is carried out by `SharedCalls` on the sync
    driver and by `AsyncSharedCalls` on the asyncio one."""

    def __init__(
        self, take_plan: TakePlan[V], carrier: Carrier = NO_CONTEXT, *, most: int, slots: int
    ):
        self.threads = SharedCalls(take_plan, carrier, most=most, slots=slots)
        self.tasks = AsyncSharedCalls(take_plan, carrier, most=most, slots=slots)

    @property
    def waiting(self) -> int:
        """How many requests wait for a shared call now, threads and tasks (monitoring)."""
        return self.threads.waiting + self.tasks.waiting

    def plan(self, n: int) -> Plan[list[V]]:
        """``n`` (>= 1) values from a call shared with the concurrent callers."""
        values: list[V] = yield SharedTake(self, n)
        return values


class SharedTake(Effect):
    """Take ``n`` values through `Shared` calls: a thread's on the sync driver, a task's on the
    asyncio one."""

    __slots__ = ("n", "shared")

    def __init__(self, shared: Shared[Any], n: int):
        self.shared = shared
        self.n = n

    def run(self) -> list[Any]:
        return self.shared.threads.take(self.n)

    async def run_async(self) -> list[Any]:
        return await self.shared.tasks.take(self.n)


def _forget_in_child() -> None:
    for sharing in list(_LIVE):
        sharing._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
