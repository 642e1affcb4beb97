"""ORM insert throughput per strategy against an autoincrement table, SQLite and PostgreSQL in one run.

``python -m benchmarks.orm_insert [--rows 20000] [--redis-url URL] [--db-url URL ...]`` (also
``sa-redis-ids bench orm``) inserts ``rows`` rows into one table per strategy present, into an
autoincrement table and into a UUIDv7 table (a ``Uuid`` primary key filled in Python by
``uuid_utils.uuid7()``, when uuid-utils is installed: a peer that needs no Redis), on each database,
through two paths:

- ``add_all``: ``session.add_all(objects)`` + ``commit()`` (one flush: the IDs of all objects are
  reserved with one ``next_ids(n)``);
- ``executemany``: ``session.execute(insert(Model), dicts)`` + ``commit()`` (one reservation for
  the statement).

Each (database, path, table) is measured ``--repeat`` times, interleaved with the others, and the
best time is kept (the machine is shared; the best run is the least disturbed one). It prints rows/s,
the ratio of time to the autoincrement table (1.00 = as fast, lower is faster), the Redis round
trips counted per flush/statement and, on PostgreSQL, each table's size after the insert
(``pg_total_relation_size``, ``pg_relation_size``, ``pg_indexes_size``), checks the targets, and
writes JSON to ``benchmarks/results/``. Without ``--db-url``: a SQLite file plus the PostgreSQL at
``$SA_REDIS_IDS_BENCH_PG_URL`` (default the local test server; a plain ``postgresql://`` URL
is read with psycopg) when it answers. Tables get a fresh
name and are dropped at the end; Redis keys live under a fresh prefix and are deleted at the end.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import BigInteger, Integer, String, Uuid, create_engine, insert, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Session, mapped_column

from benchmarks.report import (
    RESULTS,
    Progress,
    describe_machine,
    machine,
    markdown_table,
    table,
    write_json,
)
from sa_redis_ids import IdGenerator, RedisIds, redis_id_column

try:
    import uuid_utils
except ImportError:  # the UUIDv7 peer needs the bench extra
    uuid_utils = None

URL_ENV = "SA_REDIS_IDS_URL"
PG_ENV = "SA_REDIS_IDS_BENCH_PG_URL"
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"

#: Strategies measured when their factory exists, with options that hold a whole run's IDs.
STRATEGIES: dict[str, dict[str, Any]] = {
    "sequence": {},
    "date_prefixed": {},
    "snowflake": {},
    "short_id": {},
    "daily_code": {"digits": 9},
}
PATHS = ("add_all", "executemany")
AUTOINCREMENT = "autoincrement"
UUID7 = "uuid7"
"""The UUIDv7 primary key table: a peer, measured like the strategies but with no targets."""

#: The targets: time ratio to autoincrement per database (other databases: no target).
RATIO_TARGETS = {"sqlite": 1.0, "postgresql": 1.05}


@dataclass
class Measured:
    """The best of ``repeat`` runs of one (database, path, table)."""

    database: str
    path: str
    table: str
    rows: int
    seconds: float
    rows_per_s: float
    ratio: float | None
    """Time relative to the autoincrement table on the same database and path."""
    round_trips: float | None
    """Redis round trips per flush (``add_all``) or per statement (``executemany``)."""
    runs: list[float]
    total_bytes: int | None = None
    """PostgreSQL only: ``pg_total_relation_size`` after the insert (table, indexes, TOAST)."""
    table_bytes: int | None = None
    """PostgreSQL only: ``pg_relation_size`` (the table's main fork)."""
    index_bytes: int | None = None
    """PostgreSQL only: ``pg_indexes_size`` (here the primary key's index)."""


def uuid7() -> uuid.UUID:
    """A UUIDv7 from uuid-utils as the standard library's ``uuid.UUID`` (what ``Uuid`` takes)."""
    assert uuid_utils is not None
    return uuid.UUID(bytes=uuid_utils.uuid7().bytes)


class _Counter:
    """Counts Redis round trips by wrapping the node set's entry points: every generator call
    goes through ``call_plan``, calls on every node through ``each`` or ``each_plan``."""

    def __init__(self, ids: RedisIds):
        self.count = 0
        nodes = ids.nodes

        def counted(entry: Callable[[str, Callable[[Any], Any]], Any]) -> Any:
            def wrapper(namespace: str, action: Callable[[Any], Any]) -> Any:
                self.count += 1
                return entry(namespace, action)

            return wrapper

        nodes.call_plan = counted(nodes.call_plan)  # type: ignore[method-assign]
        nodes.each = counted(nodes.each)  # type: ignore[method-assign]
        nodes.each_plan = counted(nodes.each_plan)  # type: ignore[method-assign]


def _models(ids: RedisIds, names: Sequence[str], tag: str) -> tuple[Any, dict[str, Any]]:
    """One declarative base with the autoincrement table and one table per strategy."""

    class Base(DeclarativeBase):
        pass

    def columns(table_name: str, id_column: Any) -> dict[str, Any]:
        return {
            "__tablename__": table_name,
            "id": id_column,
            "name": mapped_column(String(40)),
            "amount": mapped_column(Integer),
        }

    autoincrement = mapped_column(BigInteger().with_variant(Integer(), "sqlite"), primary_key=True)
    models: dict[str, Any] = {
        AUTOINCREMENT: type(
            "AutoIncrement", (Base,), columns(f"bench_{tag}_{AUTOINCREMENT}", autoincrement)
        )
    }
    for name in names:
        generator: IdGenerator[Any] = getattr(ids, name)(f"bench_{name}", **STRATEGIES[name])
        body = columns(f"bench_{tag}_{name}", redis_id_column(generator))
        models[name] = type(f"Bench_{name}", (Base,), body)
    if uuid_utils is not None:
        column = mapped_column(Uuid(), primary_key=True, default=uuid7)
        models[UUID7] = type("BenchUuid7", (Base,), columns(f"bench_{tag}_{UUID7}", column))
    return Base, models


def _sizes(engine: Engine, model: Any) -> dict[str, int | None]:
    """A PostgreSQL table's size with its indexes, of the table alone and of its indexes."""
    if engine.dialect.name != "postgresql":
        return {"total_bytes": None, "table_bytes": None, "index_bytes": None}
    query = text(
        "SELECT pg_total_relation_size(CAST(:t AS regclass)), "
        "pg_relation_size(CAST(:t AS regclass)), pg_indexes_size(CAST(:t AS regclass))"
    )
    with engine.connect() as conn:
        total, heap, indexes = conn.execute(query, {"t": model.__tablename__}).one()
    return {"total_bytes": int(total), "table_bytes": int(heap), "index_bytes": int(indexes)}


def _server_version(engine: Engine) -> str | None:
    if engine.dialect.name != "postgresql":
        return None
    with engine.connect() as conn:
        found = conn.execute(text("SHOW server_version")).scalar()
    return str(found).split()[0] if found else None


def _sqlalchemy_pg(url: str) -> str:
    """``postgresql://`` (libpq form, psycopg2 to SQLAlchemy) read with psycopg instead."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def _clear(engine: Engine, model: Any) -> None:
    name = model.__tablename__
    with engine.begin() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text(f"TRUNCATE {name}"))
        else:
            conn.execute(text(f"DELETE FROM {name}"))


def _insert_once(engine: Engine, model: Any, path: str, rows: int) -> float:
    dicts = [{"name": f"row {i}", "amount": i} for i in range(rows)]
    gc.collect()
    start = time.perf_counter()
    with Session(engine) as session:
        if path == "add_all":
            session.add_all([model(**row) for row in dicts])
        else:
            session.execute(insert(model), dicts)
        session.commit()
    return time.perf_counter() - start


def _database_urls(given: Sequence[str] | None, workdir: Path) -> list[str]:
    if given:
        return list(given)
    urls = [f"sqlite:///{workdir / 'orm_insert.sqlite3'}"]
    pg = _sqlalchemy_pg(os.environ.get(PG_ENV, DEFAULT_PG_URL))
    try:
        probe = create_engine(pg)
        with probe.connect():
            pass
        probe.dispose()
        urls.append(pg)
    except Exception as exc:  # no PostgreSQL here: measure SQLite alone and say so
        print(f"PostgreSQL at {pg} not reachable ({type(exc).__name__}); measuring SQLite only")
    return urls


def run(
    rows: int = 20_000,
    redis_url: str | None = None,
    *,
    db_urls: Sequence[str] | None = None,
    repeat: int = 3,
    cluster: bool = False,
    quiet: bool = True,
) -> dict[str, Any]:
    """Measure and return the result (also the hook ``benchmarks.ids --orm-rows`` calls)."""
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    ids = (
        RedisIds.from_url(redis_url, prefix=prefix, cluster=cluster, socket_timeout=10)
        if redis_url
        else RedisIds.embedded(prefix=prefix)
    )
    redis_info: dict[str, Any] | None = None
    if redis_url and not cluster:
        redis_info = ids.nodes.nodes[0].client.info("server")
    names = [name for name in STRATEGIES if callable(getattr(ids, name, None))]
    tag = uuid.uuid4().hex[:8]
    base, models = _models(ids, names, tag)
    counter = _Counter(ids)
    workdir = Path(tempfile.mkdtemp(prefix="sa_redis_ids_bench_"))
    urls = _database_urls(db_urls, workdir)
    progress = Progress(len(urls) * len(PATHS) * repeat * len(models), quiet=quiet)
    measured: list[Measured] = []
    pg_version: str | None = None
    try:
        for url in urls:
            engine = create_engine(url)
            database = engine.dialect.name
            pg_version = pg_version or _server_version(engine)
            base.metadata.drop_all(engine)
            base.metadata.create_all(engine)
            try:
                for path in PATHS:
                    runs: dict[str, list[float]] = {name: [] for name in models}
                    trips: Counter[str] = Counter()
                    for _ in range(repeat):
                        for name, model in models.items():
                            _clear(engine, model)
                            before = counter.count
                            runs[name].append(_insert_once(engine, model, path, rows))
                            trips[name] += counter.count - before
                            progress.step(f"{database} {path} {name}")
                    auto = min(runs[AUTOINCREMENT])
                    for name, seconds in runs.items():
                        best = min(seconds)
                        redis_backed = name not in (AUTOINCREMENT, UUID7)
                        measured.append(
                            Measured(
                                database=database,
                                path=path,
                                table=name,
                                rows=rows,
                                seconds=best,
                                rows_per_s=rows / best,
                                ratio=None if name == AUTOINCREMENT else best / auto,
                                round_trips=trips[name] / repeat if redis_backed else None,
                                runs=seconds,
                                **_sizes(engine, models[name]),  # the last insert of this path
                            )
                        )
            finally:
                base.metadata.drop_all(engine)
                engine.dispose()
    finally:
        progress.finish()
        base.registry.dispose()
        _delete_keys(ids, prefix)
        ids.close()
    found_machine = machine(redis_info)
    if pg_version:
        found_machine["postgresql_server"] = pg_version
    return {
        "benchmark": "orm_insert",
        "rows": rows,
        "repeat": repeat,
        "redis": ids.nodes.nodes[0].name,
        "redis_prefix": prefix,
        "databases": [make_url(u).render_as_string(hide_password=True) for u in urls],
        "machine": found_machine,
        "results": [asdict(m) for m in measured],
        "targets": targets(measured),
        "uuid7": "measured" if UUID7 in models else "not available: pip install uuid-utils",
    }


def _delete_keys(ids: RedisIds, prefix: str) -> None:
    client = ids.nodes.nodes[0].client
    for key in list(client.scan_iter(match=f"{prefix}:*", count=1000)):
        client.delete(key)


def targets(measured: Sequence[Measured]) -> list[dict[str, Any]]:
    """Each strategy's ratio against its database's target, and one round trip per flush (the
    autoincrement and UUIDv7 tables are the references: no targets)."""
    found: list[dict[str, Any]] = []
    for m in measured:
        if m.table in (AUTOINCREMENT, UUID7):
            continue
        limit = RATIO_TARGETS.get(m.database)
        if limit is not None and m.ratio is not None:
            found.append(
                {
                    "target": f"{m.database} {m.path} {m.table}: time ratio <= {limit}",
                    "measured": round(m.ratio, 3),
                    "met": m.ratio <= limit,
                }
            )
        found.append(
            {
                "target": f"{m.database} {m.path} {m.table}: 1 round trip per flush/statement",
                "measured": m.round_trips,
                "met": m.round_trips == 1,
            }
        )
    return found


HEADERS = [
    "database",
    "path",
    "table",
    "rows/s",
    "× autoincrement (time)",
    "round trips/flush",
    "total KiB",
    "table KiB",
    "index KiB",
]


def _kib(value: int | None) -> object:
    return "-" if value is None else round(value / 1024)


def render(result: dict[str, Any], *, markdown: bool = False) -> str:
    """The table and the targets as text (or Markdown, for the README)."""
    make = markdown_table if markdown else table
    cells = [
        [
            r["database"],
            r["path"],
            r["table"],
            round(r["rows_per_s"]),
            "-" if r["ratio"] is None else f"{r['ratio']:.2f}",
            "-" if r["round_trips"] is None else r["round_trips"],
            _kib(r.get("total_bytes")),
            _kib(r.get("table_bytes")),
            _kib(r.get("index_bytes")),
        ]
        for r in result["results"]
    ]
    missed = [t for t in result["targets"] if not t["met"]]
    lines = [
        f"ORM inserts: {result['rows']:,} rows per run, best of {result['repeat']}; "
        f"Redis {result['redis']}",
        f"Machine: {describe_machine(result['machine'])}",
        "",
        make(HEADERS, cells),
        "",
        f"Targets: {len(result['targets']) - len(missed)} of {len(result['targets'])} met",
    ]
    lines += [f"- NOT met: {t['target']} (measured {t['measured']})" for t in missed]
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m benchmarks.orm_insert`` and ``sa-redis-ids bench orm``."""
    parser.add_argument("--rows", type=int, default=20_000, help="rows per run (default 20000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per table; best kept (3)")
    parser.add_argument(
        "--redis-url",
        default=os.environ.get(URL_ENV),
        metavar="URL",
        help=f"Redis to use (default ${URL_ENV}, else the embedded fakeredis)",
    )
    parser.add_argument("--cluster", action="store_true", help="the URL names a Redis Cluster")
    parser.add_argument(
        "--db-url",
        action="append",
        metavar="URL",
        help=f"a database to measure (repeat; default a SQLite file and ${PG_ENV} if reachable)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def run_from_args(args: argparse.Namespace) -> int:
    """Run, print the table, write JSON; the exit status is 0."""
    if args.rows < 1 or args.repeat < 1:
        raise SystemExit("--rows and --repeat must be at least 1")
    result = run(
        rows=args.rows,
        redis_url=args.redis_url,
        db_urls=args.db_url,
        repeat=args.repeat,
        cluster=args.cluster,
        quiet=args.quiet,
    )
    path = write_json("orm_insert", result, args.out)
    print(render(result, markdown=args.markdown))
    print(f"\nJSON: {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.orm_insert", description=__doc__)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
