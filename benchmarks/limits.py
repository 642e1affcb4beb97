"""Where the guarantees end: values repeated in the faults the guarantees table calls not covered.

``python -m benchmarks.limits [--scenario NAME] [--runs N] [--cpu-load]`` starts its own
``redis-server`` processes (and Sentinels) on free loopback ports, stops them by process id at the
end, and measures, per run:

1. ``held``: a process holds ``--held`` values (default 5,000) of a sequence in an open ORM
   transaction when Redis is emptied (``FLUSHALL``); a new process then inserts as many rows. Its
   column floor cannot see uncommitted rows, so it resumes at the table's maximum plus the
   headroom (1,000 unbuffered). On the same table its batches that hold one of those values fail
   (``IntegrityError`` once the holder commits); with one sequence bound to two tables (the new
   process inserts into the other one) they commit, and the tables share values. Deterministic:
   ``max(0, held - headroom)`` values repeated. PostgreSQL (``--db-url``, default the local server).
2. ``double-failover``: a master, a replica and three Sentinels (``from_sentinel``'s default,
   ``replicas=1``). The master is paused (``SIGSTOP``); Sentinel promotes the replica, which has
   no replica of its own and issues without ``WAIT``; after the other processes drew from it, it is
   killed, the old master resumed and promoted back, its replication ID unchanged. A process that
   last drew from the old master (*idle*) then draws until it passes what the lost master issued.
   *idle*: the processes that drew from the lost master are gone; *busy*: they draw on.
3. ``rewind``: an older snapshot loaded into the same server (``SAVE``, 0.6 s of load,
   ``DEBUG RELOAD NOSAVE``) under processes drawing a buffered sequence (``block=``, adapted up to
   its ceiling). A process whose last call came before the snapshot (*idle*) draws right after the
   reload. *idle*: the other processes stop at the reload; *busy*: they draw on.

A *process* of ``held`` and ``double-failover`` is a ``RedisIds`` of its own (its own marks and
connections; the drawing ones in threads); those of ``rewind`` are spawned processes. Every value
is counted (buffered runs as intervals); nothing is asserted here. The figures are
the ones the guarantees table of the operating page quotes.
"""

from __future__ import annotations

import argparse
import logging
import math
import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import BigInteger, Engine, create_engine, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from benchmarks.report import table
from sa_redis_ids import RedisIds, SaRedisIdsError, redis_id
from tests.support.cpu_load import cpu_load
from tests.support.faults import reports, stop_all
from tests.support.servers import RedisServer
from tests.support.services import POSTGRES_URL
from tests.support.topologies import SentinelTopology, wait_until

SCENARIOS = ("held", "double-failover", "rewind")


# --- held: values held past the headroom -------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """One ``held`` run: what the holder held, where the new process resumed, what failed."""

    held: int
    headroom: int
    batch: int
    batches: int
    """Batches the new process inserted into the holder's table."""
    failed: int
    """Of them, failed with ``IntegrityError`` (one of their values was held)."""
    repeated: int
    """Values the new process drew that the holder held (same table)."""
    committed_twice: int
    """Values committed in both tables (one sequence bound to two tables)."""


def _sequence_model(
    ids: RedisIds, tables: Sequence[str], headroom: int | None = None
) -> tuple[Any, list[Any]]:
    """One sequence of ``ids`` and one mapped class per table name, every ``id`` from it (its
    column floor is every table's column): what one process of the application defines."""
    sequence = ids.sequence("held", headroom=headroom)

    class Base(DeclarativeBase):
        pass

    return sequence, [
        type(
            f"Row{i}",
            (Base,),
            {
                "__tablename__": name,
                "id": mapped_column(
                    BigInteger, primary_key=True, autoincrement=False, default=redis_id(sequence)
                ),
                "__annotations__": {"id": Mapped[int]},
            },
        )
        for i, name in enumerate(tables)
    ]


def _insert_batches(engine: Engine, row: Any, count: int, batch: int) -> tuple[list[int], int]:
    """Insert ``count`` rows of ``row`` in committed batches; (every value drawn, failed batches)."""
    drawn: list[int] = []
    failed = 0
    for start in range(0, count, batch):
        with Session(engine, expire_on_commit=False) as session:
            objects = [row() for _ in range(min(batch, count - start))]
            session.add_all(objects)
            try:
                session.commit()
            except IntegrityError:
                failed += 1
            # assigned before the INSERT, kept on the objects whether it succeeded or not
            drawn += [obj.__dict__["id"] for obj in objects]
    return drawn, failed


def _held_case(
    server: RedisServer,
    engine: Engine,
    *,
    held: int,
    batch: int,
    two: bool,
    headroom: int | None = None,
) -> Held:
    """A holder keeps ``held`` values of a sequence in an open transaction; Redis is emptied; a new
    process inserts ``held`` rows into the same table (``two=False``) or another table bound to
    the same sequence; the holder commits once the new process has read its floor."""
    tag = uuid.uuid4().hex[:8]
    names = [f"limits_held_{tag}_a", f"limits_held_{tag}_b"][: 2 if two else 1]
    prefix = f"lim{tag}"
    _, holder = _sequence_model(RedisIds.from_url(server.url, prefix=prefix), names, headroom)
    holder[0].metadata.create_all(engine)
    try:
        with Session(engine) as session:  # rows committed before: the table's floor
            session.add_all([holder[0]() for _ in range(100)])
            session.commit()
        holding = Session(engine)
        objects = [holder[0]() for _ in range(held)]
        holding.add_all(objects)
        holding.flush()
        held_values = {obj.id for obj in objects}
        server.client().flushall()
        generator, newcomer = _sequence_model(
            RedisIds.from_url(server.url, prefix=prefix), names, headroom
        )
        target = newcomer[-1]
        result: dict[str, Any] = {}

        def insert() -> None:
            try:
                result["drawn"], result["failed"] = _insert_batches(engine, target, held, batch)
            except BaseException as exc:  # reported below
                result["error"] = exc

        inserting = threading.Thread(target=insert)
        inserting.start()
        # The holder commits once the newcomer's first flush read the floor and took its values
        # (the counter exists again): on the same table that flush may wait for the holder's rows.
        client = server.client()
        try:
            wait_until(
                lambda: client.exists(generator.counter_key) or not inserting.is_alive(),
                "the newcomer's first values",
            )
        finally:
            holding.commit()
            holding.close()
            inserting.join()
        if "error" in result:
            raise result["error"]
        drawn: list[int] = result["drawn"]
        repeated = len(held_values & set(drawn))
        twice = 0
        if two:
            first, second = (model.__table__ for model in newcomer)
            with engine.connect() as connection:
                twice = int(
                    connection.scalar(
                        select(func.count()).select_from(
                            first.join(second, first.c.id == second.c.id)
                        )
                    )
                    or 0
                )
        return Held(
            held=held,
            headroom=generator.headroom,
            batch=batch,
            batches=math.ceil(held / batch),
            failed=result["failed"],
            repeated=repeated,
            committed_twice=twice,
        )
    finally:
        holder[0].metadata.drop_all(engine)


def held(
    runs: int,
    *,
    values: int = 5000,
    batch: int = 100,
    db_url: str = POSTGRES_URL,
    headroom: int | None = None,
) -> list[Held]:
    """``runs`` runs of each ``held`` case (same table, then two tables), on a server of its own;
    ``headroom``: the sequence's ``headroom=`` (None: its default)."""
    server = RedisServer().start()
    engine = create_engine(db_url)
    try:
        found = []
        for _ in range(runs):
            same = _held_case(
                server, engine, held=values, batch=batch, two=False, headroom=headroom
            )
            other = _held_case(
                server, engine, held=values, batch=batch, two=True, headroom=headroom
            )
            found.append(
                Held(
                    held=same.held,
                    headroom=same.headroom,
                    batch=batch,
                    batches=same.batches,
                    failed=same.failed,
                    repeated=same.repeated,
                    committed_twice=other.committed_twice,
                )
            )
        return found
    finally:
        engine.dispose()
        server.stop()


# --- counting values drawn as intervals ---------------------------------------------------------


def runs_of(values: Sequence[int]) -> list[tuple[int, int]]:
    """``values`` as inclusive runs ``(first, last)`` of consecutive integers, in order drawn."""
    found: list[tuple[int, int]] = []
    for value in values:
        if found and value == found[-1][1] + 1:
            found[-1] = (found[-1][0], value)
        else:
            found.append((value, value))
    return found


def repeated(runs: Sequence[tuple[int, int]]) -> int:
    """Values covered more than once by ``runs`` (each extra copy counts): the duplicates."""
    events: list[tuple[int, int]] = []
    for first, last in runs:
        events += [(first, 1), (last + 1, -1)]
    events.sort()
    depth, previous, extra = 0, 0, 0
    for at, step in events:
        if depth > 1:
            extra += (depth - 1) * (at - previous)
        depth += step
        previous = at
    return extra


def total(runs: Sequence[tuple[int, int]]) -> int:
    """How many values ``runs`` hold, copies included."""
    return sum(last - first + 1 for first, last in runs)


@dataclass(frozen=True)
class Repeats:
    """One run of a scenario with an idle process: what was drawn and repeated."""

    variant: str
    drawn: int
    """Values handed out, every process included."""
    lost: int
    """Values the fault took back (issued by the lost master, or since the snapshot)."""
    idle_drew: int
    """Values the idle process drew after the fault."""
    by_idle: int
    """Of them, values another process had already received."""
    among_others: int
    """Values the other processes received twice among themselves."""
    idle_rewinds: int
    others_rewinds: int
    """Heals counted (``generator.rewinds``) by the idle process and by the others."""


# --- double-failover: a second failover inside the successor window -----------------------------


@dataclass
class _Drawer:
    """A process drawing ``next_ids(20)`` of an unbuffered sequence in a thread (its own
    ``RedisIds``, so its own marks), recording each batch with the phase it was drawn in."""

    generator: Any
    phase: list[str]
    drawn: list[tuple[str, list[int]]] = field(default_factory=list)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            phase = self.phase[0]
            try:
                self.drawn.append((phase, self.generator.next_ids(20)))
            except SaRedisIdsError:
                time.sleep(0.01)


def _draw_until(generator: Any, above: int, *, most: int, seconds: float) -> list[int]:
    """Draw ``next_ids(100)`` until a value exceeds ``above``, ``most`` values or ``seconds``."""
    drawn: list[int] = []
    deadline = time.monotonic() + seconds
    while len(drawn) < most and time.monotonic() < deadline:
        try:
            drawn += generator.next_ids(100)
        except SaRedisIdsError:
            time.sleep(0.01)
            continue
        if drawn[-1] > above:
            break
    return drawn


def double_failover_run(*, busy: bool, on_successor: int = 3000, most: int = 50_000) -> Repeats:
    """One double failover (see the module's docstring) with 2 drawing processes; the successor
    issues ``on_successor`` values to them before it is killed."""
    topology = SentinelTopology().start()
    try:
        topology.wait_replicas_in_sync()
        prefix = f"lim{uuid.uuid4().hex[:8]}"

        def process() -> Any:
            ids = RedisIds.from_sentinel(
                topology.addresses, topology.service, prefix=prefix, retry_after=0.1
            )
            return ids.sequence("ns")

        idle = process()
        before = idle.next_ids(10)
        phase = ["before"]
        drawers = [_Drawer(process(), phase) for _ in range(2)]
        stop = threading.Event()
        threads = [threading.Thread(target=d.run, args=(stop,)) for d in drawers]
        for thread in threads:
            thread.start()
        try:
            time.sleep(0.5)
            old = topology.master()
            old.pause()
            phase[0] = "paused"
            successor = topology.wait_master_other_than(old)
            phase[0] = "successor"

            def on_it() -> bool:
                got = sum(len(v) for d in drawers for p, v in d.drawn if p == "successor")
                return got >= on_successor

            wait_until(on_it, "values from the successor", timeout=30)
            if not busy:
                stop.set()
                for thread in threads:
                    thread.join()
            successor.kill()
            phase[0] = "killed"
            # Resumed once the Sentinels can see the successor down: the old master is then
            # never turned into its replica, and Sentinel promotes it back as it is.
            time.sleep(1.5)
            lost = [x for d in drawers for p, v in d.drawn if p == "successor" for x in v]
            after: list[int] = []
            # From here the idle process calls again, retrying until the old master serves.
            drawing = threading.Thread(
                target=lambda: after.extend(_draw_until(idle, max(lost), most=most, seconds=60))
            )
            old.resume()
            drawing.start()
            wait_until(
                lambda: {s.master_port_now() for s in topology.sentinels} == {old.port},
                "the old master promoted back",
                timeout=60,
            )
            phase[0] = "back"
            drawing.join()
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        others = [runs_of(v) for d in drawers for _, v in d.drawn]
        other_runs = [r for each in others for r in each]
        idle_runs = runs_of(before) + runs_of(after)
        return Repeats(
            variant="busy" if busy else "idle",
            drawn=total(other_runs) + total(idle_runs),
            lost=len(lost),
            idle_drew=len(after),
            by_idle=repeated([*other_runs, *idle_runs]) - repeated(other_runs),
            among_others=repeated(other_runs),
            idle_rewinds=idle.rewinds,
            others_rewinds=sum(d.generator.rewinds for d in drawers),
        )
    finally:
        topology.stop()


# --- rewind: an older snapshot loaded into the same server --------------------------------------


@dataclass(frozen=True)
class _RewindLoad:
    url: str
    prefix: str
    block: int
    role: str
    """``"busy"`` (draws until told to stop), ``"idle"`` (one value before, then after the
    reload), ``"stops"`` (busy until the reload, then stops)."""
    idle_draws: int = 0
    seconds: float = 30.0


def _rewind_worker(load: _RewindLoad, ready: Any, done: Any, stop: Any, out: Any) -> None:
    """A spawned process of the ``rewind`` scenario (see :class:`_RewindLoad`); puts
    ``("ok", (role, runs drawn, rewinds))`` on ``out``."""
    generator = RedisIds.from_url(load.url, prefix=load.prefix).sequence("ns", block=load.block)
    drawn = [generator.next_id()]
    ready.wait()
    deadline = time.monotonic() + load.seconds
    if load.role == "idle":
        done.wait(timeout=load.seconds)
        drawn += [generator.next_id() for _ in range(load.idle_draws)]
    else:
        until = done if load.role == "stops" else stop
        while not until.is_set() and time.monotonic() < deadline:
            for _ in range(1000):
                drawn.append(generator.next_id())
    out.put(("ok", (load.role, runs_of(drawn), generator.rewinds)))


def _spawned(
    loads: Sequence[_RewindLoad], fault: Callable[[], None], *, at: float, after: float
) -> list[Any]:
    """Spawn one :func:`_rewind_worker` per load; once all drew their first value, call
    ``fault()`` ``at`` s later, set ``done`` when it returned and ``stop`` ``after`` s later;
    the payloads. (As ``tests.support.faults.run_beside_fault``, without its CPU load: the
    caller chooses, see ``--cpu-load``.)"""
    ctx = multiprocessing.get_context("spawn")
    ready, done, stop, out = ctx.Barrier(len(loads) + 1), ctx.Event(), ctx.Event(), ctx.Queue()
    workers = [
        ctx.Process(target=_rewind_worker, args=(load, ready, done, stop, out)) for load in loads
    ]
    for process in workers:
        process.start()
    try:
        ready.wait(timeout=120)
        time.sleep(at)
        try:
            fault()
        finally:
            done.set()
            time.sleep(after)
            stop.set()
        return reports(workers, out, timeout=120)
    finally:
        stop_all(workers)


def rewind_run(
    *, busy: bool, processes: int = 3, block: int = 200, idle_draws: int = 200_000
) -> Repeats:
    """One in-place rewind (see the module's docstring): ``processes`` drawing processes and one
    idle process that draws ``idle_draws`` values right after the reload."""
    server = RedisServer(args=["--enable-debug-command", "yes"]).start()
    try:
        prefix = f"lim{uuid.uuid4().hex[:8]}"
        role = "busy" if busy else "stops"
        load = _RewindLoad(server.url, prefix, block, role)
        idle = _RewindLoad(server.url, prefix, block, "idle", idle_draws=idle_draws)
        marks: dict[str, int] = {}
        counter = RedisIds.from_url(server.url, prefix=prefix).sequence("ns").counter_key

        def rewind() -> None:
            client = server.client()
            client.save()
            marks["snapshot"] = int(client.get(counter) or 0)
            time.sleep(0.6)
            marks["reload"] = int(client.get(counter) or 0)
            client.execute_command("DEBUG", "RELOAD", "NOSAVE")  # type: ignore[no-untyped-call]

        payloads = _spawned([*[load] * processes, idle], rewind, at=0.5, after=1.0)
    finally:
        server.stop()
    other_runs = [r for who, runs, _ in payloads if who != "idle" for r in runs]
    idle_runs = [r for who, runs, _ in payloads if who == "idle" for r in runs]
    return Repeats(
        variant="busy" if busy else "idle",
        drawn=total(other_runs) + total(idle_runs),
        lost=marks["reload"] - marks["snapshot"],
        idle_drew=total(idle_runs) - 1,
        by_idle=repeated([*other_runs, *idle_runs]) - repeated(other_runs),
        among_others=repeated(other_runs),
        idle_rewinds=sum(rewinds for who, _, rewinds in payloads if who == "idle"),
        others_rewinds=sum(rewinds for who, _, rewinds in payloads if who != "idle"),
    )


# --- the command line ---------------------------------------------------------------------------


def _repeat_rows(found: Sequence[Repeats]) -> list[list[object]]:
    return [
        [
            run.variant,
            run.drawn,
            run.lost,
            run.idle_drew,
            run.by_idle,
            run.among_others,
            f"{run.idle_rewinds} / {run.others_rewinds}",
        ]
        for run in found
    ]


REPEAT_HEADERS = [
    "variant",
    "values drawn",
    "values lost",
    "idle drew after",
    "repeated by idle",
    "repeated among others",
    "heals counted idle / others",
]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--scenario", choices=SCENARIOS, action="append", help="(repeatable)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each case")
    parser.add_argument("--held", type=int, default=5000, help="values held (held)")
    parser.add_argument("--batch", type=int, default=100, help="rows per batch (held)")
    parser.add_argument("--db-url", default=POSTGRES_URL, help="database of held (not SQLite)")
    parser.add_argument("--headroom", type=int, help="the sequence's headroom= (held)")
    parser.add_argument("--on-successor", type=int, default=3000, help="double-failover")
    parser.add_argument("--block", type=int, default=200, help="first block size (rewind)")
    parser.add_argument("--idle-draws", type=int, default=200_000, help="rewind")
    parser.add_argument("--processes", type=int, default=3, help="drawing processes (rewind)")
    parser.add_argument(
        "--variant", choices=("idle", "busy"), action="append", help="(repeatable; default both)"
    )
    parser.add_argument(
        "--cpu-load", action="store_true", help="saturate every core with spinning processes"
    )
    args = parser.parse_args(argv)
    logging.getLogger("psycopg").setLevel(logging.ERROR)  # a failed batch's pipeline, noisily
    chosen = args.scenario or list(SCENARIOS)
    variants = [v == "busy" for v in args.variant or ("idle", "busy")]
    load: Callable[[], AbstractContextManager[Any]] = cpu_load if args.cpu_load else nullcontext
    print(
        f"CPU {'saturated' if args.cpu_load else 'not loaded by the benchmark'}, {args.runs} runs"
    )
    if "held" in chosen:
        with load():
            found = held(
                args.runs,
                values=args.held,
                batch=args.batch,
                db_url=args.db_url,
                headroom=args.headroom,
            )
        print(f"\nheld: {args.held} values held in an open transaction, FLUSHALL, a new process")
        print(
            table(
                [
                    "held",
                    "headroom",
                    "same table: failed batches",
                    "of",
                    "values repeated",
                    "two tables: committed twice",
                ],
                [
                    [r.held, r.headroom, r.failed, r.batches, r.repeated, r.committed_twice]
                    for r in found
                ],
            )
        )
    if "double-failover" in chosen:
        doubled: list[Repeats] = []
        for busy in variants:
            for _ in range(args.runs):
                with load():
                    doubled.append(double_failover_run(busy=busy, on_successor=args.on_successor))
        print("\ndouble-failover: master paused, replica promoted and issuing without WAIT,")
        print("killed, the old master promoted back (from_sentinel defaults)")
        print(table(REPEAT_HEADERS, _repeat_rows(doubled)))
    if "rewind" in chosen:
        rewound: list[Repeats] = []
        for busy in variants:
            for _ in range(args.runs):
                with load():
                    rewound.append(
                        rewind_run(
                            busy=busy,
                            processes=args.processes,
                            block=args.block,
                            idle_draws=args.idle_draws,
                        )
                    )
        print("\nrewind: SAVE, 0.6 s of load, DEBUG RELOAD NOSAVE; buffered sequence")
        print(table(REPEAT_HEADERS, _repeat_rows(rewound)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
