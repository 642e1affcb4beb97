"""The seeded scheduler of the model: `plan` turns a seed into steps, `execute` runs them.

A plan is a list of plain strings (the replayable trace): it depends on the seed alone, never on
what Redis answered, so a failing seed runs the same steps again (``python -m benchmarks.soak
--seed S``), and a trace cut short or edited by hand runs with `execute` too. Where a step needs
a choice that depends on the data (which key to delete, which of a process's short IDs to give
back), it is drawn from a `random.Random` seeded with the seed and the step's index.

Steps:

- ``world direct|sentinel``: the topology (first step, see `World`);
- ``spawn P1 sync|asyncio``: a new process (its ``RedisIds`` or ``AsyncRedisIds``, the tables);
- ``P1 draw|threads|flush|mix|fork|reserve|release|maintenance|exit ...``: a command of
  `tests.support.model.worker`; ``stalled`` at the end of a ``threads`` or ``mix`` step: Redis
  holds writes for `STALL_MS` as it starts, so its callers queue and share calls;
- ``wait MS``: time passes, and ``fault delete-key KEY``: that key (after the prefix) is
  deleted (never planned; for traces written by hand);
- ``fault NAME``: a fault of `World` (``flushall``, ``delete-key``, ``restart-empty``,
  ``restart-aof``, ``restart-rdb``, ``cut-connections``, ``replica-cut``, ``promote``,
  ``sentinel-switch``).

After every step the `Ledger` checks its invariants; the run stops at the first step that breaks
one, so the trace up to there reproduces it.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, select

from sa_redis_ids import RedisIds
from tests.support.model.ledger import Ledger
from tests.support.model.locks import database_locks
from tests.support.model.schema import (
    BY_LABEL,
    LABELS,
    POOL_OFFSET,
    POOL_SIZE,
    TABLE_COLUMNS,
    models,
)
from tests.support.model.worker import WorkerSpec, main
from tests.support.model.world import World, lost_namespaces, settle
from tests.support.processes import process_context

PREFIX = "model"
STEP_SECONDS = 120.0
"""The longest one step may take before the run calls it hung."""
DIRECT_FAULTS = (
    "flushall",
    "delete-key",
    "restart-empty",
    "restart-aof",
    "restart-rdb",
    "cut-connections",
)
SENTINEL_FAULTS = ("flushall", "delete-key", "cut-connections")
RESTARTS_WITH_DATA = frozenset({"restart-aof", "restart-rdb"})
MOVES = frozenset({"promote", "sentinel-switch"})
"""Faults after which the node is another server (a promoted replica): the documented defence
heals every namespace in every process, whether or not the replica missed writes, so a rewind
logged then is not held against a process (the data comparison alone would call an in-sync
promotion lossless)."""
MOST_PROCESSES = 5
STALL_MS = 150
"""How long a ``stalled`` step's Redis holds writes (``CLIENT PAUSE ... WRITE``)."""


# -- planning ----------------------------------------------------------------------------------


def plan(
    seed: int,
    steps: int = 30,
    *,
    mode: str | None = None,
    fronts: tuple[str, ...] = ("sync", "asyncio"),
) -> list[str]:
    """The trace of ``seed``: setup steps, then ``steps`` actions and faults. ``mode`` fixes the
    topology (else the seed picks it); processes use the front ends in ``fronts``."""
    rng = random.Random(seed)
    chosen = mode or ("sentinel" if rng.random() < 0.15 else "direct")
    trace = [f"world {chosen}"]
    live: dict[str, str] = {}
    count = 0

    def spawn(front: str) -> None:
        nonlocal count
        count += 1
        live[f"P{count}"] = front
        trace.append(f"spawn P{count} {front}")

    for front in (fronts[0], fronts[-1], rng.choice(fronts)):
        spawn(front)
    replica_cut = switched = False
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.2:
            if chosen == "sentinel":
                names = list(SENTINEL_FAULTS) + ([] if switched else ["sentinel-switch"])
            else:
                names = list(DIRECT_FAULTS) + (["promote"] if replica_cut else ["replica-cut"])
            name = rng.choice(names)
            replica_cut = (replica_cut or name == "replica-cut") and name != "promote"
            switched = switched or name == "sentinel-switch"
            trace.append(f"fault {name}")
            if name == "delete-key" and rng.random() < 0.5:  # a lone lost key, then a pool call
                who = rng.choice(sorted(live))
                trace.append(f"{who} {_pool_call(rng)}")
            continue
        if roll < 0.24 and len(live) < MOST_PROCESSES:
            spawn(rng.choice(fronts))
            continue
        who = rng.choice(sorted(live))
        if roll < 0.26 and len(live) > 2:
            trace.append(f"{who} exit")
            del live[who]
            continue
        trace.append(f"{who} {_action(rng, live[who])}")
    return trace


def _action(rng: random.Random, front: str) -> str:
    kind = rng.choices(
        ("draw", "threads", "flush", "mix", "fork", "reserve", "release", "maintenance"),
        weights=(25, 15, 20, 10, 5 if front == "sync" else 0, 4, 4, 4),
    )[0]
    if kind == "draw":
        label = rng.choice(LABELS)
        n = rng.choice((1, 3, 10, 30, 70 if label == "seqb" else 20))
        return f"draw {label} {n} {rng.choice(('one', 'many')) if n <= 10 else 'many'}"
    if kind == "threads":
        label = rng.choice(("sid", "sid", "seq", "seqb", "sf", "dc", "dp"))
        crowd = label == "sid" and rng.random() < 0.25  # enough callers for one call of 256+
        return f"threads {label} {300 if crowd else rng.randint(4, 16)}" + _stall(rng)
    if kind in ("flush", "mix"):
        n = rng.randint(1, 20) if kind == "flush" else rng.randint(4, 12)
        return f"{kind} {rng.choice(tuple(TABLE_COLUMNS))} {n}" + (
            "" if kind == "flush" else _stall(rng)
        )
    if kind == "fork":
        return f"fork {rng.choice(LABELS)} {rng.randint(1, 20)}"
    if kind in ("reserve", "release"):
        return _pool_call(rng, kind)
    return "maintenance"


def _stall(rng: random.Random) -> str:
    """Half the time, Redis stalls writes for `STALL_MS` as the step starts (``CLIENT PAUSE``):
    its concurrent callers queue up and share calls, as they do on a busy server."""
    return " stalled" if rng.random() < 0.5 else ""


def _pool_call(rng: random.Random, kind: str | None = None) -> str:
    """A short-ID ``reserve`` of random pool values or a ``release`` of an issued one."""
    if (kind or rng.choice(("reserve", "release"))) == "reserve":
        values = [POOL_OFFSET + rng.randrange(POOL_SIZE) for _ in range(rng.randint(1, 5))]
        return "reserve " + ",".join(map(str, values))
    return f"release {rng.randrange(1000)}"


def command_of(words: list[str]) -> tuple[Any, ...]:
    """A worker command from a step's words after the process name."""
    kind, args = words[0], words[1:]
    if kind == "draw":
        return ("draw", args[0], int(args[1]), args[2])
    if kind in ("threads", "fork"):
        return (kind, args[0], int(args[1]))
    if kind in ("flush", "mix"):
        return (kind, args[0], int(args[1]))
    if kind == "reserve":
        return ("reserve", [int(v) for v in args[0].split(",")])
    if kind == "release":
        return ("release", int(args[0]))
    return (kind,)


# -- running -----------------------------------------------------------------------------------


@dataclass
class Report:
    seed: int | None
    trace: list[str]
    log: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    failed_at: int | None = None
    seconds: float = 0.0
    received: int = 0
    steps_run: int = 0
    limits: list[str] = field(default_factory=list)
    """Repeats outside the documented guarantees (see `Ledger.limits`)."""

    @property
    def failed(self) -> bool:
        return bool(self.violations)

    def text(self) -> str:
        """The violations, the replayable trace (up to the failing step) and the run's log."""
        head = f"seed {self.seed}" if self.seed is not None else "trace"
        limits = f", {len(self.limits)} documented repeats" if self.limits else ""
        if not self.failed:
            return (
                f"{head}: {self.steps_run} steps, {self.received} values, "
                f"{self.seconds:.1f} s{limits}"
            )
        end = len(self.trace) if self.failed_at is None else self.failed_at + 1
        lines = [f"{head} FAILED at step {self.failed_at} ({self.seconds:.1f} s):"]
        lines += [f"  ! {v}" for v in self.violations]
        lines.append("replayable trace (run it with tests.support.model.run.execute):")
        lines += [f"  {i:3} {step}" for i, step in enumerate(self.trace[:end])]
        lines.append("log:")
        lines += [f"  {entry}" for entry in self.log]
        return "\n".join(lines)


class Process:
    """A worker process (`process_context`) and its pipe."""

    def __init__(self, spec: WorkerSpec):
        ctx = process_context()
        self.name = spec.name
        self.front = spec.front
        self.conn, theirs = ctx.Pipe()
        self.process = ctx.Process(target=main, args=(spec, theirs), daemon=True)
        self.process.start()
        self.ready = False

    def wait_ready(self) -> None:
        if not self.ready:
            reply = self._receive()
            if "fatal" in reply:
                raise RuntimeError(f"{self.name} could not start:\n{reply['fatal']}")
            self.ready = True

    def _receive(self) -> dict[str, Any]:
        if not self.conn.poll(STEP_SECONDS):
            raise TimeoutError(f"{self.name} did not answer within {STEP_SECONDS:g} s")
        reply: dict[str, Any] = self.conn.recv()
        return reply

    def call(self, command: tuple[Any, ...]) -> dict[str, Any]:
        self.wait_ready()
        self.conn.send(command)
        return self._receive()

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()  # by its own pid
        self.process.join(timeout=10)


def _summary(outcome: dict[str, Any]) -> str:
    got = ", ".join(f"{label} {len(v)}" for label, v in outcome["values"].items() if v)
    unread = ", ".join(f"{label} {len(v)}" for label, v in outcome["floorless"].items() if v)
    got += f" (before the floor: {unread})" if unread else ""
    errors = "; ".join(f"{kind}: {message[:160]}" for kind, _, message in outcome["errors"])
    notes = "; ".join(outcome["notes"])
    return " | ".join(part for part in (got, errors, notes) if part)


def touched(command: list[str], outcome: dict[str, Any]) -> set[str]:
    """The namespaces a process's command called with a script that checks the node's
    identity, widely counted: after a promotion, one of them may have seen it (and healed), so a
    repeat is no longer excused by a restart that hid it. Every generator that handed out a value
    (floorless ones too); the short IDs for ``reserve`` and ``release``; and for a command that
    raised, every generator it could have called. Not ``maintenance``: its calls (precreating
    and purging days, a pool's statistics) do not look at the node's identity, so they cannot
    see a promotion."""
    found = {label for part in ("values", "floorless") for label, v in outcome[part].items() if v}
    kind = command[0]
    if kind in ("reserve", "release"):
        found.add("sid")
    if outcome["errors"]:
        if kind in ("draw", "threads", "fork"):
            found |= {command[1], *TABLE_COLUMNS[BY_LABEL[command[1]].table].values()}
        elif kind in ("flush", "mix"):
            found |= set(TABLE_COLUMNS[command[1]].values())
        else:
            found |= set(LABELS)
    return found


def lock_holders(db_path: Path, processes: dict[str, Process]) -> str:
    """Who holds a lock on the shared database file now, by worker name: what a "database is
    locked" failure needs to say (SQLite waits up to 60 s)."""
    names = {process.process.pid: name for name, process in processes.items()}
    names[os.getpid()] = "the harness"
    held = [f"{names.get(pid, f'pid {pid}')}: {kind}" for pid, kind in database_locks(db_path)]
    return "locks on the database: " + ("; ".join(held) or "none")


def table_values(db_path: Path) -> dict[str, list[Any]]:
    """Every committed generator value, per generator label, read from the shared database."""
    engine = create_engine(f"sqlite:///{db_path}", connect_args={"timeout": 60})
    ids = RedisIds.from_url("redis://127.0.0.1:1/0", prefix=PREFIX)  # never called
    found: dict[str, list[Any]] = {label: [] for label in LABELS}
    try:
        _base, alpha, beta = models(_unbound_generators(ids))
        with engine.connect() as conn:
            for kind in (alpha, beta):
                for column, label in TABLE_COLUMNS[kind.__tablename__].items():
                    query = select(getattr(kind, column)).where(getattr(kind, column).is_not(None))
                    found[label].extend(conn.scalars(query))
    finally:
        engine.dispose()
    return found


def _unbound_generators(ids: RedisIds) -> dict[str, Any]:
    from tests.support.model.schema import generators

    return generators(ids)


def create_tables(db_path: Path) -> None:
    engine = create_engine(f"sqlite:///{db_path}")
    ids = RedisIds.from_url("redis://127.0.0.1:1/0", prefix=PREFIX)  # never called
    base, _alpha, _beta = models(_unbound_generators(ids))
    base.metadata.create_all(engine)
    engine.dispose()


def execute(trace: list[str], *, seed: int | None = None, check_every: int = 5) -> Report:
    """Run ``trace`` on servers started here; the report says what broke, if anything."""
    report = Report(seed=seed, trace=list(trace))
    ledger = Ledger()
    directory = Path(tempfile.mkdtemp(prefix="sa_redis_ids_model_"))
    db_path = directory / "model.sqlite3"
    create_tables(db_path)
    world: World | None = None
    processes: dict[str, Process] = {}
    moved_at: dict[str, float] = {}
    """The namespaces that no process which had called them before the node last moved (a
    promotion: when it began) has called since; a restart from the server's data then hides the
    move from them. A process calling a namespace for the first time sees no move."""
    started = time.monotonic()
    try:
        for index, step in enumerate(trace):
            began = time.monotonic()
            loss_open = ledger.snowflake_loss_open()
            before = len(ledger.violations)
            words = step.split()
            report.steps_run = index + 1
            if words[0] == "world":
                world = World(words[1], PREFIX)  # known before it starts: stopped if cut short
                world.start()
                report.log.append(f"{index:3} {step}: started")
                continue
            assert world is not None, "the first step of a trace is 'world ...'"
            if words[0] == "spawn":
                spec = WorkerSpec(words[1], words[2], world.target, PREFIX, str(db_path))
                processes[words[1]] = Process(spec)
                ledger.joined(words[1])
                report.log.append(f"{index:3} {step}")
                continue
            for process in processes.values():  # spawned ones start together
                process.wait_ready()
            if words[0] == "wait":  # time passes (not planned: for traces written by hand)
                time.sleep(int(words[1]) / 1000)
                report.log.append(f"{index:3} {step}")
                report.steps_run = index + 1
                continue
            if words[0] == "fault":
                settle(0.1)
                committed = table_values(db_path)
                began = time.monotonic()
                state = world.state()
                key = words[2] if len(words) > 2 else None  # delete-key KEY: that key
                done = world.fault(words[1], random.Random(f"{seed}/{index}"), key)
                lost = lost_namespaces(state, world.state())
                moved = frozenset(lost) if done.startswith("lagging") else frozenset()
                if words[1] == "replica-cut":
                    ledger.replica_cut(began)
                if words[1] in MOVES:  # documented: a new identity makes every process heal
                    lost |= set(LABELS)
                    done += " (the node moved: every namespace heals)"
                    moved_at = dict.fromkeys(LABELS, began)
                elif words[1] in RESTARTS_WITH_DATA:
                    for label, moved in moved_at.items():
                        ledger.promotion_unseen(label, moved)
                    if moved_at:
                        done += (
                            f" (the promoted replica restarted before any process called "
                            f"{', '.join(sorted(moved_at))}: for them its promotion goes unseen, "
                            "documented as not covered)"
                        )
                    moved_at = {}
                ledger.lost(lost, began, committed, moved=moved)
                entry = f"{done}; lost: {', '.join(sorted(lost)) or 'nothing'}"
            else:
                process = processes[words[0]]
                if words[-1] == "stalled":
                    words = words[:-1]
                    world.client().client_pause(STALL_MS, all=False)
                called = time.monotonic()
                outcome = process.call(command_of(words[1:]))
                heals = len(ledger.healed)
                ledger.outcome(step, words[0], outcome)
                reached = touched(words[1:], outcome)
                for label in reached:  # it may have seen the move, if it saw the node before
                    first = ledger.first_taken[label].get(words[0])
                    if label in moved_at and first is not None and first[0] < moved_at[label]:
                        del moved_at[label]
                ledger.touched(words[0], reached, called)
                if words[1] == "reserve" and not outcome["errors"]:
                    ledger.reserve(command_of(words[1:])[1], f"at step {index}")
                if words[1] == "exit":
                    process.stop()
                    del processes[words[0]]
                    ledger.left(words[0])
                entry = _summary(outcome)
                if len(ledger.healed) > heals:
                    rewound = [h.rsplit(": ", 1)[1] for h in ledger.healed[heals:]]
                    entry += f" | rewinds: {', '.join(rewound)}"
            lead, now_ms = world.snowflake_lead()
            ledger.snowflake(step, loss_open, lead, now_ms)
            last = index == len(trace) - 1
            if index % check_every == 0 or last or len(ledger.violations) > before:
                ledger.tables(table_values(db_path))
            report.log.append(
                f"{index:3} {step}: {entry} [sf lead {lead} ms, {time.monotonic() - began:.2f} s]"
            )
            report.steps_run = index + 1
            if len(ledger.violations) > before:
                report.failed_at = index
                break
    except Exception as exc:  # the harness itself failed: report it with the trace
        report.violations.append(f"the run stopped: {type(exc).__name__}: {exc}")
        report.failed_at = report.steps_run
    finally:
        if any("database is locked" in line for line in [*ledger.violations, *report.violations]):
            report.log.append(lock_holders(db_path, processes))
        for process in processes.values():
            process.stop()
        if world is not None:
            world.stop()
        shutil.rmtree(directory, ignore_errors=True)
    report.violations[:0] = ledger.violations
    report.received = ledger.received
    report.limits = ledger.limits
    report.seconds = time.monotonic() - started
    return report


def run_seed(
    seed: int,
    steps: int = 30,
    *,
    mode: str | None = None,
    fronts: tuple[str, ...] = ("sync", "asyncio"),
) -> Report:
    """Plan ``seed`` and execute it."""
    return execute(plan(seed, steps, mode=mode, fronts=fronts), seed=seed)
