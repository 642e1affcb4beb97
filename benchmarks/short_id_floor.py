"""What a ShortId's column floor costs a new process: the first ``next_id`` with 1,000,000 rows.

``python -m benchmarks.short_id_floor --redis-url redis://127.0.0.1:6379/0`` (``--rows``,
``--db-url`` for PostgreSQL, ``--runs``). A table of ``--rows`` short IDs is filled once; then
fresh processes (``spawn``) each time their first ID: ``assign_ids`` of one pending row, the
ID through the ORM binding, which reads the column floor inside the session. Three kinds of
process, their runs interleaved so that all see the same load:

* **no floor**: the model binds the generator with ``column_floor=False``;
* **marker**: the column floor, after the floor was merged into the node's bitmap by an earlier
  process (the node's marker matches: the process checks it and reads nothing from the table);
* **merge**: the column floor on a node whose marker is gone (a new node state, e.g. after a
  loss): this process streams the column and merges it; what every process paid before the
  marker existed.

The target: a new process's first ``next_id()`` adds at most 50 ms over one without a floor
(**marker − no floor**, medians). Redis keys live under a fresh prefix and the table is dropped
at the end.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import redis
from sqlalchemy import BigInteger, Integer, create_engine, insert
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from benchmarks.report import machine, table, write_json
from sa_redis_ids import RedisIds, redis_id
from sa_redis_ids.orm import assign_ids

TABLE = "bench_sid_floor"
POOL, OFFSET = 10_000_000, 10_000_000
TARGET_MS = 50.0


def model(redis_url: str, prefix: str, *, column_floor: bool) -> Any:
    ids = RedisIds.from_url(redis_url, prefix=prefix)

    class Base(DeclarativeBase):
        pass

    generator = ids.short_id("shorts", pool_size=POOL, offset=OFFSET)

    class Row(Base):
        __tablename__ = TABLE
        id: Mapped[int] = mapped_column(Integer, primary_key=True)
        short: Mapped[int] = mapped_column(
            BigInteger, default=redis_id(generator, column_floor=column_floor)
        )

    return Row


def first_id_ms(redis_url: str, db_url: str, prefix: str, column_floor: bool) -> float:
    """In a new process: ms for the first ID through the ORM (nothing is written)."""
    row = model(redis_url, prefix, column_floor=column_floor)
    engine = create_engine(db_url)
    with Session(engine) as session:
        session.add(row())
        started = time.perf_counter()
        assign_ids(session)
        elapsed = (time.perf_counter() - started) * 1000
        session.rollback()
    engine.dispose()
    return elapsed


def fill(db_url: str, redis_url: str, prefix: str, rows: int) -> None:
    row = model(redis_url, prefix, column_floor=False)
    engine = create_engine(db_url)
    row.metadata.drop_all(engine)
    row.metadata.create_all(engine)
    step = POOL // rows
    with engine.begin() as connection:
        for start in range(0, rows, 100_000):
            chunk = range(start, min(rows, start + 100_000))
            connection.execute(insert(row), [{"short": OFFSET + i * step} for i in chunk])
    engine.dispose()


def run(redis_url: str, db_url: str, rows: int, runs: int) -> dict[str, Any]:
    prefix = f"benchsid{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    marker = f"{prefix}:{{shorts}}:sid:floor"
    fill(db_url, redis_url, prefix, rows)
    found: dict[str, list[float]] = {"no floor": [], "marker": [], "merge": []}
    ctx = multiprocessing.get_context("spawn")
    try:
        with ctx.Pool(1, maxtasksperchild=1) as pool:

            def one(column_floor: bool) -> float:
                ms: float = pool.apply(first_id_ms, (redis_url, db_url, prefix, column_floor))
                return ms

            one(True)  # the first merge: the node's marker exists from now on
            for _ in range(runs):
                found["no floor"].append(one(False))
                found["marker"].append(one(True))
                client.delete(marker)  # a new node state: the next process merges
                found["merge"].append(one(True))
                found["marker"].append(one(True))
    finally:
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)
        engine = create_engine(db_url)
        model(redis_url, prefix, column_floor=False).metadata.drop_all(engine)
        engine.dispose()
    medians = {name: statistics.median(values) for name, values in found.items()}
    added = medians["marker"] - medians["no floor"]
    return {
        "rows": rows,
        "runs": runs,
        "prefix": prefix,
        "db": db_url.split(":", 1)[0],
        "median_ms": medians,
        "samples_ms": found,
        "marker_added_ms": added,
        "marker_over_no_floor": medians["marker"] / medians["no floor"],
        "merge_over_no_floor": medians["merge"] / medians["no floor"],
        "target": {"added_ms_at_most": TARGET_MS, "met": added <= TARGET_MS},
        "machine": machine(),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--redis-url", default=os.environ.get("SA_REDIS_IDS_URL", "redis://127.0.0.1:6379/0")
    )
    parser.add_argument("--db-url", default=None, help="default: a SQLite file")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        db_url = args.db_url or f"sqlite:///{Path(directory) / 'floor.sqlite3'}"
        result = run(args.redis_url, db_url, args.rows, args.runs)
    medians = result["median_ms"]
    print(
        table(
            ["first ID of a new process", "median ms", "× no floor"],
            [
                [name, f"{ms:.1f}", f"{ms / medians['no floor']:.2f}"]
                for name, ms in medians.items()
            ],
        )
    )
    met = "met" if result["target"]["met"] else "NOT met"
    print(
        f"marker − no floor: {result['marker_added_ms']:.1f} ms (target ≤ {TARGET_MS:.0f} ms: {met})"
    )
    print(f"written to {write_json('short_id_floor', result)}")


if __name__ == "__main__":
    main()
