"""One process of the model: a ``RedisIds`` (or ``AsyncRedisIds``) of its own, every generator
of `schema`, the ORM tables on the shared SQLite file, and a loop that runs the scheduler's commands.

The parent sends a command tuple over a pipe and gets back an `Outcome` (a plain dict): the values
this process received, per generator (a value counts once it was handed out, whether or not its
row was committed), the errors raised (type, whether it is a ``SaRedisIdsError``, message), and
the generators' rewind counters and the ``sa_redis_ids.rewinds`` WARNING records so far.

Commands (see `tests.support.model.steps` for when the scheduler sends them):

- ``("draw", label, n, "one"|"many")``: ``n`` values by ``next_id()`` each or one ``next_ids(n)``,
  then inserted into the generator's own column (the other columns from their defaults);
- ``("threads", label, k)``: ``k`` threads (asyncio: tasks) released together, one ``next_id()``
  each, so their calls are shared; the values are reported as ``concurrent`` too;
- ``("flush", table, n)``: ``n`` rows through the ORM, every column from its generator;
- ``("mix", table, k)``: ``k`` threads (tasks) at once, half flushing one row each and half
  drawing one value of the table's first generator directly (shared calls across a flush and a
  caller outside any flush);
- ``("fork", label, n)``: (sync only) a forked child draws ``n`` values and inserts them;
- ``("reserve", values)`` / ``("release", index)``: short-ID ``reserve`` of values chosen by the
  scheduler; ``release`` of one of this process's committed short IDs (its row's column is set
  to NULL first, as an application freeing a number would);
- ``("maintenance",)``: ``ids.maintenance().run_once()`` (sync front end);
- ``("exit",)``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select, update
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from sa_redis_ids import RedisIds, SaRedisIdsError
from sa_redis_ids.asyncio import AsyncRedisIds
from tests.support.model.locks import database_locks
from tests.support.model.schema import BUFFERED, BY_LABEL, LABELS, TABLE_COLUMNS, generators, models

Outcome = dict[str, Any]
Fetch = tuple[float, float, int, int, int]
"""A fetch of a buffered generator: when it began and when its reply was read
(``time.monotonic()``, shared by the processes of one machine) and its values as ``range``
arguments (start, stop, step)."""


@dataclass(frozen=True)
class WorkerSpec:
    name: str
    front: str
    """``"sync"`` or ``"asyncio"``."""
    target: dict[str, Any]
    """``{"url": ...}`` or ``{"sentinel": [...], "service": ...}``."""
    prefix: str
    db_path: str


class RewindRecords(logging.Handler):
    """Counts the WARNING records of ``sa_redis_ids.rewinds`` per namespace."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args if isinstance(record.args, tuple) else ()
        self.counts[str(args[0]) if args else "?"] += 1


@dataclass
class Result:
    """What one command gathered."""

    values: dict[str, list[Any]] = field(default_factory=dict)
    floorless: dict[str, list[Any]] = field(default_factory=dict)
    """Values drawn directly before this process could read the generator's column floor."""
    concurrent: dict[str, list[Any]] = field(default_factory=dict)
    errors: list[tuple[str, bool, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    released: list[int] = field(default_factory=list)
    child: dict[str, Any] | None = None
    """A forked child's rewind counters and records (they went on from this process's)."""
    fetched: dict[str, list[Fetch]] = field(default_factory=dict)
    """A forked child's fetches of buffered generators (see `Worker.fetched`)."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, label: str, values: list[Any]) -> None:
        with self.lock:
            self.values.setdefault(label, []).extend(values)

    def error(self, exc: BaseException) -> None:
        text = " ".join(f"{exc}".split())[:300]
        if not isinstance(exc, SaRedisIdsError):
            where = traceback.extract_tb(exc.__traceback__)[-4:]
            text += " | at " + " < ".join(
                f"{f.name} ({Path(f.filename).name}:{f.lineno})" for f in reversed(where)
            )
        with self.lock:
            self.errors.append((type(exc).__name__, isinstance(exc, SaRedisIdsError), text))

    def rows(self, table: str, rows: list[Any]) -> None:
        """Record every generator-filled value the rows hold (committed or not)."""
        for column, label in TABLE_COLUMNS[table].items():
            found = [getattr(row, column) for row in rows]
            self.add(label, [value for value in found if value is not None])


def _table_rows(tables: dict[str, Any], label: str, values: list[Any], name: str) -> list[Any]:
    config = BY_LABEL[label]
    kind = tables[config.table]
    return [kind(**{config.column: value, "worker": name}) for value in values]


class Worker:
    """The sync front end (threads); `AsyncWorker` overrides the calls that talk to Redis."""

    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.records = RewindRecords()
        logging.getLogger("sa_redis_ids.rewinds").addHandler(self.records)
        logging.getLogger("sa_redis_ids").addHandler(logging.NullHandler())  # no stderr noise
        self.ids = self.make_ids()
        self.gens = generators(self.ids)
        _base, alpha, beta = models(self.gens)
        self.tables = {"alpha": alpha, "beta": beta}
        self.floor_known: set[str] = set()
        """Generators called in a flush of this process: their column floor can be read
        outside a flush now (through the engine it was read with)."""
        self.fetched: dict[str, list[Fetch]] = {label: [] for label in BUFFERED}
        """Per buffered generator, the blocks fetched since the last outcome: a value of one
        may be handed out steps later, so when it was taken from Redis is reported apart."""
        self.fetching = threading.Lock()
        for label in BUFFERED:
            self.trace_fetches(label)
        self.make_engine()

    def trace_fetches(self, label: str) -> None:
        """Record every block ``label``'s generator takes from Redis (its buffer's fetches and
        direct batches, sync and asyncio: all go through the instance's ``_take_on``), with when
        the fetch began and when its reply was read (an asyncio refill started in one step may
        be read in a later one: its event loop runs only during steps)."""
        generator = self.gens[label]
        core = getattr(generator, "generator", generator)  # an asyncio generator's own
        take_on = core._take_on

        def traced(node: Any, n: int) -> Any:
            began = time.monotonic()
            values = yield from take_on(node, n)
            with self.fetching:
                self.fetched[label].append(
                    (began, time.monotonic(), values.start, values.stop, values.step)
                )
            return values

        core._take_on = traced

    def make_ids(self) -> Any:
        return self._ids(RedisIds)

    def _ids(self, kind: Any) -> Any:
        target = self.spec.target
        if "sentinel" in target:
            return kind.from_sentinel(
                target["sentinel"], target["service"], prefix=self.spec.prefix
            )
        return kind.from_url(target["url"], prefix=self.spec.prefix)

    def make_engine(self) -> None:
        self.engine = create_engine(f"sqlite:///{self.spec.db_path}", connect_args={"timeout": 60})

    # -- the commands ------------------------------------------------------------------------

    def run(self, command: tuple[Any, ...]) -> Outcome:
        result = Result()
        try:
            getattr(self, f"do_{command[0]}")(result, *command[1:])
        except BaseException as exc:  # reported to the parent, which judges it
            result.error(exc)
        return self.outcome(result)

    def locks_left(self) -> list[str]:
        """The locks this process still holds on the database after a step (none is right: a
        read left open blocks every other process's commit), asked twice 0.2 s apart so that a
        background read of the moment (a buffer's prefetch reading its floor) is not one."""
        for _ in range(2):
            held = [kind for pid, kind in database_locks(self.spec.db_path) if pid == os.getpid()]
            if not held:
                return []
            time.sleep(0.2)
        return held

    def outcome(self, result: Result) -> Outcome:
        return {
            "values": result.values,
            "floorless": result.floorless,
            "concurrent": result.concurrent,
            "errors": result.errors,
            "notes": result.notes,
            "released": result.released,
            "child": result.child,
            "floor_known": sorted(self.floor_known),
            "locks": self.locks_left(),
            "fetched": self.take_fetched(result),
            "rewinds": {label: int(self.gens[label].rewinds) for label in LABELS},
            "logged": {label: self.records.counts[label] for label in LABELS},
        }

    def take_fetched(self, result: Result) -> dict[str, list[Fetch]]:
        """The fetches since the last outcome (this process's and a forked child's)."""
        found = {}
        with self.fetching:
            for label in BUFFERED:
                found[label] = self.fetched[label] + result.fetched.get(label, [])
                self.fetched[label] = []
        return found

    def held(self, result: Result, label: str, values: list[Any], known: bool) -> list[Any]:
        """The directly drawn ``values`` to insert: none when the floor was not known at the
        draw (``known``); those are reported as floorless and kept out of the tables."""
        if known:
            return values
        with result.lock:
            result.floorless.setdefault(label, []).extend(values)
        return []

    def insert(self, result: Result, label: str, values: list[Any]) -> None:
        """Insert ``values`` into ``label``'s column (the rows are recorded, committed or not)."""
        if not values:
            return
        rows = _table_rows(self.tables, label, values, self.spec.name)
        self.commit(result, BY_LABEL[label].table, rows)

    def defaulted(self, table: str, rows: list[Any]) -> set[str]:
        """The generators a flush of ``rows`` calls (a column left to its default)."""
        return {
            label
            for column, label in TABLE_COLUMNS[table].items()
            if any(getattr(row, column) is None for row in rows)
        }

    def commit(self, result: Result, table: str, rows: list[Any]) -> None:
        called = self.defaulted(table, rows)
        with Session(self.engine, expire_on_commit=False) as session:
            session.add_all(rows)
            try:
                session.commit()
                self.floor_known |= called
            finally:
                result.rows(table, rows)

    def do_draw(self, result: Result, label: str, n: int, how: str) -> None:
        generator = self.gens[label]
        known = label in self.floor_known
        values: list[Any] = []
        try:
            if how == "many":
                values = generator.next_ids(n)
            else:
                for _ in range(n):
                    values.append(generator.next_id())
        except BaseException:
            result.add(label, self.held(result, label, values, known))  # received before it
            raise
        self.insert(result, label, self.held(result, label, values, known))

    def together(self, result: Result, actions: list[Callable[[], None]]) -> None:
        """Run ``actions`` in threads released at once; errors go to ``result``."""
        barrier = threading.Barrier(len(actions))

        def run(action: Callable[[], None]) -> None:
            try:
                barrier.wait()
                action()
            except BaseException as exc:
                result.error(exc)

        threads = [threading.Thread(target=run, args=(action,)) for action in actions]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def do_threads(self, result: Result, label: str, k: int) -> None:
        generator = self.gens[label]
        known = label in self.floor_known
        drawn: list[Any] = []

        def one() -> None:
            value = generator.next_id()
            with result.lock:
                drawn.append(value)

        self.together(result, [one] * k)
        result.concurrent[label] = list(drawn)
        self.insert(result, label, self.held(result, label, drawn, known))

    def do_flush(self, result: Result, table: str, n: int) -> None:
        rows = [self.tables[table](worker=self.spec.name) for _ in range(n)]
        self.commit(result, table, rows)

    def do_mix(self, result: Result, table: str, k: int) -> None:
        label = next(iter(TABLE_COLUMNS[table].values()))
        generator = self.gens[label]
        known = label in self.floor_known
        drawn: list[Any] = []

        def direct() -> None:
            value = generator.next_id()
            with result.lock:
                drawn.append(value)

        def flush() -> None:
            self.do_flush(result, table, 1)

        self.together(result, [flush if i % 2 == 0 else direct for i in range(k)])
        self.insert(result, label, self.held(result, label, drawn, known))

    def do_fork(self, result: Result, label: str, n: int) -> None:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: draw, insert, report, exit without cleanup
            os.close(read)
            signal.alarm(60)
            child = Result()
            self.fetching = threading.Lock()  # (a parent's thread may have held it at the fork)
            for label in BUFFERED:  # the child reports its own fetches
                self.fetched[label] = []
            try:
                self.engine.dispose(close=False)
                self.do_draw(child, label, n, "many" if n > 1 else "one")
            except BaseException as exc:
                child.error(exc)
            payload = pickle.dumps(
                {
                    "values": child.values,
                    "floorless": child.floorless,
                    "fetched": self.fetched,
                    "errors": child.errors,
                    "rewinds": {x: int(self.gens[x].rewinds) for x in LABELS},
                    "logged": dict(self.records.counts),
                }
            )
            with os.fdopen(write, "wb") as out:
                out.write(payload)
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as source:
            data = source.read()
        os.waitpid(pid, 0)
        if not data:
            result.errors.append(("ForkedChildDied", False, "the forked child reported nothing"))
            return
        found = pickle.loads(data)
        for each, values in found["values"].items():
            result.add(each, values)
        for each, values in found["floorless"].items():
            result.floorless.setdefault(each, []).extend(values)
        result.errors.extend(found["errors"])
        result.fetched = found["fetched"]
        result.child = {"rewinds": found["rewinds"], "logged": found["logged"]}

    def own_shorts(self) -> list[int]:
        alpha = self.tables["alpha"]
        with Session(self.engine, expire_on_commit=False) as session:
            query = select(alpha.short).where(
                alpha.worker == self.spec.name, alpha.short.is_not(None)
            )
            return sorted(session.scalars(query))

    def free_short(self, value: int) -> None:
        alpha = self.tables["alpha"]
        with Session(self.engine, expire_on_commit=False) as session:
            session.execute(update(alpha).where(alpha.short == value).values(short=None))
            session.commit()

    def do_release(self, result: Result, index: int) -> None:
        shorts = self.own_shorts()
        if not shorts:
            result.notes.append("nothing to release")
            return
        value = shorts[index % len(shorts)]
        self.free_short(value)
        result.released.append(value)
        result.notes.append(f"released {value}: {self.gens['sid'].release(value)}")

    def do_reserve(self, result: Result, values: list[int]) -> None:
        result.notes.append(f"reserved {self.gens['sid'].reserve(values)} of {len(values)}")

    def do_maintenance(self, result: Result) -> None:
        summary = self.ids.maintenance().run_once()
        for error in summary.errors:
            result.notes.append(f"maintenance error: {error}")

    def do_exit(self, result: Result) -> None:
        self.engine.dispose()


class AsyncWorker(Worker):
    """The asyncio front end: one event loop for the process's whole life, tasks for threads."""

    def __init__(self, spec: WorkerSpec):
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        super().__init__(spec)

    def make_ids(self) -> Any:
        return self._ids(AsyncRedisIds)

    def make_engine(self) -> None:
        self.engine = create_async_engine(  # type: ignore[assignment]
            f"sqlite+aiosqlite:///{self.spec.db_path}", connect_args={"timeout": 60}
        )

    def run(self, command: tuple[Any, ...]) -> Outcome:
        result = Result()

        async def go() -> None:
            try:
                await getattr(self, f"ado_{command[0]}")(result, *command[1:])
            except BaseException as exc:
                result.error(exc)
            # An application's loop keeps running between requests; this process's runs only
            # during a step. A buffer's refill left suspended would hold what it holds (its
            # reply unread, a read of its floor open on the database) until the next step.
            for label in BUFFERED:
                buffer = self.gens[label].buffer
                if buffer is not None:
                    await buffer.settle()

        self.loop.run_until_complete(go())
        return self.outcome(result)

    async def ainsert(self, result: Result, label: str, values: list[Any]) -> None:
        if values:
            rows = _table_rows(self.tables, label, values, self.spec.name)
            await self.acommit(result, BY_LABEL[label].table, rows)

    async def acommit(self, result: Result, table: str, rows: list[Any]) -> None:
        called = self.defaulted(table, rows)
        async with AsyncSession(self.engine, expire_on_commit=False) as session:  # type: ignore[arg-type]
            session.add_all(rows)
            try:
                await session.commit()
                self.floor_known |= called
            finally:
                result.rows(table, rows)

    async def ado_draw(self, result: Result, label: str, n: int, how: str) -> None:
        generator = self.gens[label]
        known = label in self.floor_known
        values: list[Any] = []
        try:
            if how == "many":
                values = await generator.next_ids(n)
            else:
                for _ in range(n):
                    values.append(await generator.next_id())
        except BaseException:
            result.add(label, self.held(result, label, values, known))
            raise
        await self.ainsert(result, label, self.held(result, label, values, known))

    async def gathered(self, result: Result, calls: list[Any]) -> list[Any]:
        found = await asyncio.gather(*calls, return_exceptions=True)
        for each in found:
            if isinstance(each, BaseException):
                result.error(each)
        return [each for each in found if not isinstance(each, BaseException)]

    async def ado_threads(self, result: Result, label: str, k: int) -> None:
        generator = self.gens[label]
        known = label in self.floor_known
        drawn = await self.gathered(result, [generator.next_id() for _ in range(k)])
        result.concurrent[label] = list(drawn)
        await self.ainsert(result, label, self.held(result, label, drawn, known))

    async def ado_flush(self, result: Result, table: str, n: int) -> None:
        rows = [self.tables[table](worker=self.spec.name) for _ in range(n)]
        await self.acommit(result, table, rows)

    async def ado_mix(self, result: Result, table: str, k: int) -> None:
        label = next(iter(TABLE_COLUMNS[table].values()))
        generator = self.gens[label]
        known = label in self.floor_known
        calls = [
            self.ado_flush(result, table, 1) if i % 2 == 0 else generator.next_id()
            for i in range(k)
        ]
        drawn = [v for v in await self.gathered(result, calls) if v is not None]
        await self.ainsert(result, label, self.held(result, label, drawn, known))

    async def ado_fork(self, result: Result, label: str, n: int) -> None:
        await self.ado_draw(result, label, n, "many")  # no fork on an event loop: a plain draw
        result.notes.append("asyncio: drew instead of forking")

    async def ado_release(self, result: Result, index: int) -> None:
        alpha = self.tables["alpha"]
        async with AsyncSession(self.engine, expire_on_commit=False) as session:  # type: ignore[arg-type]
            query = select(alpha.short).where(
                alpha.worker == self.spec.name, alpha.short.is_not(None)
            )
            shorts = sorted(await session.scalars(query))
            if not shorts:
                result.notes.append("nothing to release")
                return
            value = shorts[index % len(shorts)]
            await session.execute(update(alpha).where(alpha.short == value).values(short=None))
            await session.commit()
        result.released.append(value)
        result.notes.append(f"released {value}: {await self.gens['sid'].release(value)}")

    async def ado_reserve(self, result: Result, values: list[int]) -> None:
        result.notes.append(f"reserved {await self.gens['sid'].reserve(values)} of {len(values)}")

    async def ado_maintenance(self, result: Result) -> None:
        today = datetime.now(timezone.utc).date()
        for label in ("dp", "dc"):  # what maintenance does for a day-keyed generator
            for day in (today, today + timedelta(days=1)):
                await self.gens[label].precreate(day)
        result.notes.append("precreated today and tomorrow of dp and dc (asyncio)")

    async def ado_exit(self, result: Result) -> None:
        engine: Any = self.engine
        await engine.dispose()
        await self.ids.aclose()


def main(spec: WorkerSpec, conn: Any) -> None:
    """The process's entry point: build, report ready, then serve commands until ``exit``."""
    try:
        worker: Worker = AsyncWorker(spec) if spec.front == "asyncio" else Worker(spec)
    except BaseException:
        conn.send({"fatal": traceback.format_exc()})
        return
    conn.send({"ready": os.getpid()})
    while True:
        command = conn.recv()
        conn.send(worker.run(command))
        if command[0] == "exit":
            return
