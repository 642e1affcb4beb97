"""Primary-key types on PostgreSQL: a ``BIGINT`` against a 16-byte UUIDv7, in one run.

``python -m benchmarks.key_types [--rows 200000] [--repeat 3] [--batch 1000] [--db-url URL]``

Each key type gets a fresh table ``(id <key> PRIMARY KEY, n integer NOT NULL)`` and the same
number of rows, inserted in statements of ``--batch`` rows (``INSERT … SELECT`` from ``unnest`` of
arrays) in one transaction. The keys are made, and written as text, before the clock starts, so
the time is the database's (parsing, the heap, the index), not the generator's or the driver's
(``benchmarks.ids`` times the generators):

- ``bigint``: ascending ``BIGINT`` values made in Python, as sa_redis_ids' sequences, snowflakes
  and date-prefixed IDs are;
- ``bigint identity``: ``GENERATED ALWAYS AS IDENTITY``, the database's own sequence;
- ``uuid7``: time-ordered UUIDs made in Python (``uuid.uuid7()`` on Python 3.14+, else
  ``uuid_utils.uuid7()`` from the ``bench`` extra);
- ``uuidv7() default``: the server's ``uuidv7()`` (PostgreSQL 18+; reported as missing before);
- ``uuid4``: random UUIDs, for contrast: what a key without time order costs.

After a warm-up round, rounds are interleaved (every type once per round) and each type's best
time is kept, since the machine may be shared. It prints rows per second, the time and the primary key index's size
(``pg_relation_size`` of the index) as ratios to ``bigint``, and the table's size, and writes JSON
to ``benchmarks/results/``. Tables get a fresh name and are dropped at the end.
"""

from __future__ import annotations

import argparse
import gc
import secrets
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import psycopg

from benchmarks.report import describe_machine, machine, markdown_table, table, write_json

DEFAULT_DB_URL = "postgresql://postgres@127.0.0.1:5432/test"
BASELINE = "bigint"


def uuid7_maker() -> tuple[Callable[[], uuid.UUID], str] | None:
    """A UUIDv7 function and its name: the standard library's (3.14+), else uuid-utils'."""
    stdlib = getattr(uuid, "uuid7", None)
    if stdlib is not None:
        return stdlib, "uuid.uuid7()"
    try:
        import uuid_utils
    except ImportError:
        return None
    return (lambda: uuid.UUID(bytes=uuid_utils.uuid7().bytes)), "uuid_utils.uuid7()"


@dataclass(frozen=True)
class KeyType:
    """How one table's key is declared and where its values come from."""

    name: str
    column: str
    """The key column's declaration."""
    values: Callable[[int], list[Any]] | None
    """Makes the keys of ``n`` rows in Python; None: the server fills the column itself."""


def version(server_version: int) -> str:
    """PostgreSQL's ``server_version_num`` (such as 150020) as people write it (15.20)."""
    return f"{server_version // 10000}.{server_version % 10000}"


def key_types(server_version: int) -> tuple[list[KeyType], dict[str, str]]:
    """The key types this Python and server can measure, and why any other is missing."""
    missing: dict[str, str] = {}
    found = [
        KeyType(BASELINE, "bigint PRIMARY KEY", lambda n: list(range(1, n + 1))),
        KeyType("bigint identity", "bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY", None),
    ]
    maker = uuid7_maker()
    if maker is None:
        missing["uuid7"] = "needs Python 3.14 or uuid-utils (pip install -e '.[bench]')"
    else:
        make, _ = maker
        found.append(KeyType("uuid7", "uuid PRIMARY KEY", lambda n: [make() for _ in range(n)]))
    if server_version >= 180000:
        found.append(KeyType("uuidv7() default", "uuid DEFAULT uuidv7() PRIMARY KEY", None))
    else:
        missing["uuidv7() default"] = (
            f"needs PostgreSQL 18 (the server is {version(server_version)})"
        )
    found.append(KeyType("uuid4", "uuid PRIMARY KEY", lambda n: [uuid.uuid4() for _ in range(n)]))
    return found, missing


@dataclass
class Measured:
    key: str
    rows: int
    seconds: float
    rows_per_s: float
    time_ratio: float | None
    index_bytes: int
    index_ratio: float | None
    table_bytes: int


def insert_rows(
    conn: psycopg.Connection[Any], name: str, key: KeyType, rows: int, batch: int
) -> float:
    """Create the table, insert ``rows`` rows, commit: the seconds the inserts took."""
    with conn.cursor() as cur:
        cur.execute(f'DROP TABLE IF EXISTS "{name}"')
        cur.execute(f'CREATE TABLE "{name}" (id {key.column}, n integer NOT NULL)')
    conn.commit()
    keys = [str(k) for k in key.values(rows)] if key.values else None
    cast = key.column.split()[0]
    if keys is not None:
        sql = (
            f'INSERT INTO "{name}" (id, n) SELECT CAST(k AS {cast}), n '
            "FROM unnest(CAST(%s AS text[]), CAST(%s AS integer[])) AS u(k, n)"
        )
    else:
        sql = f'INSERT INTO "{name}" (n) SELECT n FROM unnest(CAST(%s AS integer[])) AS u(n)'
    statements = []
    for start in range(0, rows, batch):
        numbers = list(range(start, min(start + batch, rows)))
        if keys is not None:
            statements.append((sql, [keys[start : start + batch], numbers]))
        else:
            statements.append((sql, [numbers]))
    gc.collect()
    began = time.perf_counter()
    with conn.cursor() as cur:
        for sql, params in statements:
            cur.execute(sql, params)
    conn.commit()
    return time.perf_counter() - began


def sizes(conn: psycopg.Connection[Any], name: str) -> tuple[int, int]:
    """The primary key index's size and the table's (main fork), in bytes."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pg_relation_size(i.indexrelid), pg_relation_size(i.indrelid) "
            "FROM pg_index i WHERE i.indrelid = CAST(%s AS regclass) AND i.indisprimary",
            (f'"{name}"',),
        )
        found = cur.fetchone()
    assert found is not None, f"{name} has no primary key"
    return int(found[0]), int(found[1])


def run(
    *, rows: int = 200_000, repeat: int = 3, batch: int = 1000, db_url: str = DEFAULT_DB_URL
) -> dict[str, Any]:
    """Measure every key type; the result as a JSON-ready dict."""
    if rows < 1 or repeat < 1 or batch < 1:
        raise ValueError("rows, repeat and batch must be 1 or more")
    stem = f"bench_keys_{secrets.token_hex(4)}"
    with psycopg.connect(db_url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        server_version = conn.info.server_version
        types, missing = key_types(server_version)
        names = {key.name: f"{stem}_{n}" for n, key in enumerate(types)}
        best: dict[str, float] = {}
        found_sizes: dict[str, tuple[int, int]] = {}
        try:
            for key in types:  # a warm-up, not counted: the catalogue, the caches, the driver
                insert_rows(conn, names[key.name], key, min(rows, batch), batch)
            for _ in range(repeat):
                for key in types:
                    seconds = insert_rows(conn, names[key.name], key, rows, batch)
                    best[key.name] = min(seconds, best.get(key.name, seconds))
                    found_sizes[key.name] = sizes(conn, names[key.name])
        finally:
            conn.rollback()
            with conn.cursor() as cur:
                for name in names.values():
                    cur.execute(f'DROP TABLE IF EXISTS "{name}"')
            conn.commit()
    base_time, (base_index, _) = best[BASELINE], found_sizes[BASELINE]
    measured = [
        Measured(
            key=key.name,
            rows=rows,
            seconds=best[key.name],
            rows_per_s=rows / best[key.name],
            time_ratio=None if key.name == BASELINE else best[key.name] / base_time,
            index_bytes=found_sizes[key.name][0],
            index_ratio=None if key.name == BASELINE else found_sizes[key.name][0] / base_index,
            table_bytes=found_sizes[key.name][1],
        )
        for key in types
    ]
    maker = uuid7_maker()
    found_machine = machine()
    found_machine["postgresql_server"] = version(server_version)
    return {
        "benchmark": "key_types",
        "rows": rows,
        "repeat": repeat,
        "batch": batch,
        "uuid7_source": maker[1] if maker else None,
        "machine": found_machine,
        "results": [asdict(m) for m in measured],
        "missing": missing,
    }


HEADERS = ("key", "rows/s", "× bigint time", "PK index KiB", "× bigint index", "table KiB")


def rows_of(result: dict[str, Any]) -> list[list[object]]:
    return [
        [
            r["key"],
            r["rows_per_s"],
            "-" if r["time_ratio"] is None else f"{r['time_ratio']:.2f}",
            r["index_bytes"] // 1024,
            "-" if r["index_ratio"] is None else f"{r['index_ratio']:.2f}",
            r["table_bytes"] // 1024,
        ]
        for r in result["results"]
    ]


def render(result: dict[str, Any], *, markdown: bool = False) -> str:
    lines = [
        f"{result['rows']:,} rows per table, best of {result['repeat']}, "
        f"{result['batch']} rows per INSERT; UUIDv7 from {result['uuid7_source']}",
        describe_machine(result["machine"]),
        "",
        (markdown_table if markdown else table)(HEADERS, rows_of(result)),
    ]
    lines += [f"not measured: {key}: {why}" for key, why in result["missing"].items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows per table")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the best time is kept")
    parser.add_argument("--batch", type=int, default=1000, help="rows per INSERT statement")
    parser.add_argument("--db-url", default=DEFAULT_DB_URL, help="a PostgreSQL URL")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = parser.parse_args(argv)
    result = run(rows=args.rows, repeat=args.repeat, batch=args.batch, db_url=args.db_url)
    print(render(result, markdown=args.markdown))
    print(f"\nwritten to {write_json('key_types', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
