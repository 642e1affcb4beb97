"""Snowflake and its column floor across processes: starts are not losses, losses still are.

Processes bound to a column through the ORM read the column as their floor at their first flush.
Rows from the last seconds lie in the state's own milliseconds, or one millisecond behind it: that
is no loss, so 8 processes started 0.3 s apart against a table holding fresh rows log and count
no rewind and leave the namespace's state at the Redis clock, not ahead of it. A state deleted
while a process holds IDs above what the table holds is a loss: it is healed, logged and counted
once by each process that finds it, and no ID comes twice. On a real Redis and a real Cluster,
with a SQLite file and PostgreSQL.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import BigInteger, Column, Integer, MetaData, Table, create_engine, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import redis_id
from sa_redis_ids.generators.snowflake import SnowflakeGenerator
from tests.conftest import Backend, _backend
from tests.support.processes import process_context
from tests.support.uniqueness import GeneratorSpec, duplicates

PROCESSES = 8
START_APART_S = 0.3
FLUSHES, ROWS = 25, 10
LOSS_PROCESSES, LOSS_FLUSHES = 4, 10
AHEAD_MOST_MS = 50
"""How far the state may lie ahead of Redis ``TIME`` when nothing was lost: a floor adds at most
one millisecond, and these few IDs per millisecond borrow none."""


TABLE = Table(
    "sf_rows",
    MetaData(),
    Column("id", Integer, primary_key=True),
    Column("flake", BigInteger, unique=True),
)
"""The table as created, dropped and read by the test itself."""


def model(generator: Any) -> Any:
    """The table: a snowflake column filled by ``generator``, bound by ``redis_id`` (so its
    floor is the column itself; no ``floor=`` anywhere)."""

    class Base(DeclarativeBase):
        pass

    class Row(Base):
        __tablename__ = "sf_rows"
        id: Mapped[int] = mapped_column(Integer, primary_key=True)
        flake: Mapped[int] = mapped_column(BigInteger, default=redis_id(generator), unique=True)

    return Row


class Counted(logging.Handler):
    """Counts the records of the rewinds logger."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


class Inserter:
    """One process's generator, bound to the table, and what it did: the values it assigned,
    the rewinds it counted and those logged."""

    def __init__(self, spec: GeneratorSpec, db_url: str):
        generator = spec.build()
        assert isinstance(generator, SnowflakeGenerator)
        self.generator = generator
        self.row = model(generator)
        self.engine = create_engine(db_url)
        self.logged = Counted()
        logging.getLogger("sa_redis_ids.rewinds").addHandler(self.logged)
        self.values: list[int] = []

    def flush(self) -> None:
        """Insert ROWS rows in one flush through the ORM."""
        with Session(self.engine, expire_on_commit=False) as session:
            rows = [self.row() for _ in range(ROWS)]
            session.add_all(rows)
            session.commit()
        self.values += [r.flake for r in rows]
        time.sleep(0.01)

    def close(self) -> dict[str, Any]:
        logging.getLogger("sa_redis_ids.rewinds").removeHandler(self.logged)
        self.engine.dispose()
        return {
            "rewinds": self.generator.rewinds,
            "logged": self.logged.count,
            "values": self.values,
        }


def insert_flushes(spec: GeneratorSpec, db_url: str, flushes: int) -> dict[str, Any]:
    """A process's life: ``flushes`` flushes of ROWS rows; what it did (see `Inserter`)."""
    inserter = Inserter(spec, db_url)
    try:
        for _ in range(flushes):
            inserter.flush()
    finally:
        found = inserter.close()
    return found


def _child(spec: GeneratorSpec, db_url: str, flushes: int, out: Any) -> None:
    try:
        out.put(insert_flushes(spec, db_url, flushes))
    except BaseException as exc:  # reported to the parent
        out.put({"error": repr(exc)})


def _child_through_a_loss(
    spec: GeneratorSpec, db_url: str, started: Any, lost: Any, out: Any
) -> None:
    """Insert flushes until the parent says the state was deleted, then LOSS_FLUSHES more."""
    try:
        inserter = Inserter(spec, db_url)
        try:
            inserter.flush()
            started.put(True)
            while not lost.is_set():
                inserter.flush()
            for _ in range(LOSS_FLUSHES):
                inserter.flush()
        finally:
            found = inserter.close()
        out.put(found)
    except BaseException as exc:  # reported to the parent
        out.put({"error": repr(exc)})


def state_and_time(backend: Backend, generator: SnowflakeGenerator) -> tuple[int, int]:
    """The state's last millisecond and the Redis time (ms since the layout's epoch), read on the
    node that holds the state (one script call: on a Cluster it runs on the key's node)."""
    ms, now = backend.client.eval(
        "local t = redis.call('TIME') "
        "return {redis.call('HGET', KEYS[1], 'ms'), t[1] * 1000 + math.floor(t[2] / 1000)}",
        1,
        generator.state_key,
    )
    return int(ms), int(now) - generator.layout.epoch_ms


@pytest.fixture
def setting(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Backend, str]]:
    """A real Redis backend and a database (a SQLite file, or PostgreSQL with the table dropped
    afterwards), by name: each test runs on each backend and each database once, not on every
    pair (the processes take long to start on a busy machine)."""
    backend_name, database = request.param
    if database == "sqlite":
        url = f"sqlite:///{tmp_path / 'flakes.sqlite3'}"
    else:
        url = request.getfixturevalue("postgresql_url")
    for backend in _backend(request, backend_name):
        yield backend, url
    if database != "sqlite":
        engine = create_engine(url)
        TABLE.metadata.drop_all(engine)
        engine.dispose()


@pytest.mark.parametrize(
    "setting", [("redis", "sqlite"), ("cluster", "postgresql")], indirect=True, ids="-".join
)
def test_processes_starting_against_fresh_rows_log_no_rewind_and_stay_at_the_clock(
    setting: tuple[Backend, str],
) -> None:
    real_backend, database = setting
    spec = real_backend.spec("snowflake", "flake")
    engine = create_engine(database)
    TABLE.metadata.drop_all(engine)
    TABLE.metadata.create_all(engine)
    engine.dispose()
    first = insert_flushes(spec, database, 5)  # fresh rows: the state's own milliseconds
    generator = spec.build()  # (draws nothing: the parent only reads the state)
    assert isinstance(generator, SnowflakeGenerator)
    ahead: list[int] = []  # the state's lead on the Redis clock, sampled while processes start

    def sample() -> None:
        state_ms, now_ms = state_and_time(real_backend, generator)
        ahead.append(state_ms - now_ms)

    context = process_context()
    out = context.Queue()
    children = []
    for _ in range(PROCESSES):
        child = context.Process(target=_child, args=(spec, database, FLUSHES, out))
        child.start()
        children.append(child)
        started = time.monotonic()
        while time.monotonic() - started < START_APART_S:
            sample()
            time.sleep(0.01)
    found: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    while len(found) < PROCESSES and time.monotonic() < deadline:
        sample()
        with contextlib.suppress(queue.Empty):
            found.append(out.get(timeout=0.01))
    for child in children:
        child.join(timeout=30)
    assert [f.get("error") for f in found] == [None] * PROCESSES
    sample()
    values = first["values"] + [v for f in found for v in f["values"]]
    engine = create_engine(database)
    with engine.connect() as connection:
        stored = list(connection.scalars(select(TABLE.c.flake)))
    engine.dispose()
    assert [(f["rewinds"], f["logged"]) for f in [first, *found]] == [(0, 0)] * (PROCESSES + 1)
    assert duplicates(values) == {}
    assert sorted(stored) == sorted(values) and len(values) == (5 + PROCESSES * FLUSHES) * ROWS
    assert max(ahead) <= AHEAD_MOST_MS, f"the state ran up to {max(ahead)} ms ahead of the clock"


@pytest.mark.parametrize(
    "setting", [("redis", "postgresql"), ("cluster", "sqlite")], indirect=True, ids="-".join
)
def test_a_state_lost_while_processes_insert_is_healed_once_and_repeats_nothing(
    setting: tuple[Backend, str],
) -> None:
    """The state key is deleted while 4 processes insert (each holds IDs it assigned and has not
    committed, above what the table holds): the first process to call heals it, logs it and
    counts it; the others find the healed state above what they received, which is no loss for
    them. Every row keeps its own ID."""
    real_backend, database = setting
    spec = real_backend.spec("snowflake", "flake")
    engine = create_engine(database)
    TABLE.metadata.drop_all(engine)
    TABLE.metadata.create_all(engine)
    context = process_context()
    started, out, lost = context.Queue(), context.Queue(), context.Event()
    children = [
        context.Process(target=_child_through_a_loss, args=(spec, database, started, lost, out))
        for _ in range(LOSS_PROCESSES)
    ]
    for child in children:
        child.start()
    for _ in children:
        started.get(timeout=120)
    generator = spec.build()
    assert isinstance(generator, SnowflakeGenerator)
    assert real_backend.client.delete(generator.state_key) == 1
    lost.set()
    found = [out.get(timeout=120) for _ in children]
    for child in children:
        child.join(timeout=30)
    assert [f.get("error") for f in found] == [None] * LOSS_PROCESSES
    with engine.connect() as connection:
        stored = list(connection.scalars(select(TABLE.c.flake)))
    engine.dispose()
    values = [v for f in found for v in f["values"]]
    assert duplicates(values) == {}
    assert sorted(stored) == sorted(values)
    assert sorted(f["rewinds"] for f in found) == [0] * (LOSS_PROCESSES - 1) + [1]
    assert [f["logged"] for f in found] == [f["rewinds"] for f in found]
