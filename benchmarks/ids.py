"""IDs per second of every strategy against the floor of one Redis round trip and against peers.

``python -m benchmarks.ids [--redis-url URL] [--pg-url URL] [--quick]`` (also ``sa-redis-ids bench
ids``) measures, in one run on one Redis, each call timed alternately with a ``PING``:

1. a redis-py ``PING`` on the same connection the generators use: the floor of one round trip, and
   an empty ``EVALSHA``: the floor of any Lua strategy;
2. peers: ``INCR`` on the same client; PostgreSQL ``nextval`` through psycopg, one per call and 1000
   per call (on a sequence the benchmark creates and drops; ``--pg-url``, default
   ``$SA_REDIS_IDS_BENCH_PG_URL`` or the local server); pottery's ``NextID`` on the same Redis;
   ``uuid_utils.uuid7()`` (no Redis: the in-process floor); a plain in-process snowflake
   (``snowflake-id``, its worker number given by hand);
3. per strategy present, ``next_id()`` and ``next_ids(1000)``: IDs/s, the median per-ID latency and
   its ratio to ``PING``; a daily code with ``secret=`` against a plain one, called alternately
   (``benchmarks.secret_codes``), for 4 and 9 digits;
4. concurrency, unbuffered (``benchmarks.concurrency``): ``next_id()`` of one generator per
   strategy from 64 asyncio tasks and from 16 threads, against ``INCR`` from as many tasks
   (``redis.asyncio``) or threads (redis-py), in alternating rounds: IDs/s and the ratio to ``INCR``;
5. the server's cost per call (``benchmarks.server_info``): ``INFO commandstats`` time and
   ``INFO cpu`` per call of ``INCR``, an empty ``EVALSHA`` and each strategy's ``next_id()``;
6. buffered Sequence / DatePrefixed (``block=``) in one thread, in 4 threads sharing one generator,
   and in 4 processes: IDs/s and the ratio to the unbuffered ``INCR``;
7. the ORM insert benchmark (``benchmarks/orm_insert.py``) when ``--orm-rows N`` is given.

A peer that cannot run (PostgreSQL unreachable, a package missing) gets a row saying so. It prints
five tables and the targets (met or not), writes JSON to ``benchmarks/results/`` and, if matplotlib
is installed (extra ``plot``), a PNG chart. Keys live under a fresh prefix and are deleted at the
end; nothing else on the server is touched.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import multiprocessing
import os
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from benchmarks import secret_codes
from benchmarks.concurrency import Measured, measure_async, measure_threads, threads_seconds
from benchmarks.report import (
    RESULTS,
    Progress,
    Timing,
    bar_chart,
    describe_machine,
    machine,
    markdown_table,
    table,
    time_calls,
    time_loop,
    time_paired,
    write_json,
)
from benchmarks.server_info import command_of, measure_server
from sa_redis_ids import Buffering, IdGenerator, RedisIds

URL_ENV = "SA_REDIS_IDS_URL"
PG_ENV = "SA_REDIS_IDS_BENCH_PG_URL"
SCRIPT_ENV = "SA_REDIS_IDS_BENCH_HENGYUNABC"
HENGYUNABC = "hengyunabc script"
HENGYUNABC_HOW = (
    "not run: pass --hengyunabc-script FILE, redis-script-node1.lua of "
    "github.com/hengyunabc/redis-id-generator (not shipped with this project)"
)
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

#: The strategies measured when their factory exists, with options that let a run take many IDs.
STRATEGIES: dict[str, dict[str, Any]] = {
    "sequence": {},
    "snowflake": {},
    "short_id": {},
    "date_prefixed": {},
    "daily_code": {"digits": 9},  # a day of 10^9 codes; the default 4 digits hold only 9,999
}

#: Smaller pools on the embedded fakeredis, whose Lua copies the whole bitmap on every call.
EMBEDDED_OPTIONS: dict[str, dict[str, Any]] = {
    "short_id": {"pool_size": 100_000, "offset": 100_000}
}

#: The strategies measured with segment buffering (``block=``).
BUFFERED = ("sequence", "date_prefixed")

SEQUENCE_PING_TARGET = 1.10
"""``sequence.next_id()`` latency, as a multiple of a ``PING`` on the same connection."""
STRATEGY_PING_TARGET = 1.20
"""Every strategy's ``next_id()`` latency, as a multiple of ``PING``."""
NEXTVAL_TARGET = 1.0
"""``sequence.next_id()`` time per ID relative to PostgreSQL ``nextval`` per ID (both × PING)."""
ASYNC_VS_INCR_TARGET = 5.0
"""Unbuffered IDs/s of 64 asyncio tasks sharing a generator, as a multiple of ``redis.asyncio``
``INCR``'s at 64 tasks (sequence, snowflake, daily_code)."""
THREADS_VS_INCR_TARGET = 3.0
"""Unbuffered IDs/s of 16 threads sharing a generator, as a multiple of redis-py ``INCR``'s at 16
threads."""
CONCURRENCY_TARGETED = ("sequence", "snowflake", "daily_code")
SERVER_CPU_SEQUENCE_TARGET = 1.3
"""Server CPU per ``sequence.next_id()`` call (``INFO cpu``), as a multiple of an ``INCR``'s."""
SERVER_CPU_TARGET = 1.6
"""Server CPU per ``next_id()`` call of every strategy, as a multiple of an ``INCR``'s."""
SERVER_USEC_SEQUENCE_TARGET = 5.0
"""``INFO commandstats`` µs per ``sequence.next_id()`` call (its transaction's ``MULTI`` and ``EXEC``)."""
BATCH_SPEEDUP_TARGET = 100.0
SHORT_ID_BATCH_TARGET = 200.0
"""``short_id.next_ids(1000)`` IDs/s as a multiple of its ``next_id()``'s."""
DAILY_CODE_BATCH_TARGET = 1.5
"""``daily_code.next_ids(1000)`` time per ID as a multiple of ``sequence.next_ids(1000)``'s."""
BUFFERED_VS_INCR_TARGET = 300.0
BUFFERED_IDS_PER_S_TARGET = 1_000_000.0


@dataclass
class Settings:
    """How much to measure. ``quick()`` is a smoke run of a few seconds (the test suite uses it)."""

    redis_url: str | None = None
    cluster: bool = False
    calls: int = 5000
    batches: int = 300
    batch: int = 1000
    buffered_ids: int = 2_000_000
    warmup_ids: int = 300_000
    block: int = 1000
    threads: int = 4
    processes: int = 4
    budget_s: float = 10.0
    pg_url: str | None = None
    """PostgreSQL for the ``nextval`` peer (``None``: ``$SA_REDIS_IDS_BENCH_PG_URL`` or the local
    server); a libpq URL or an SQLAlchemy ``postgresql+psycopg://`` one."""
    async_tasks: int = 64
    async_ids: int = 20_000
    """IDs per async contender, drawn in ``async_rounds`` rounds alternating with the others."""
    async_rounds: int = 4
    concurrent_threads: int = 16
    threads_ids: int = 20_000
    """IDs per thread contender, drawn in ``async_rounds`` rounds alternating with the others."""
    server_calls: int = 2000
    """Single calls per contender and round of the server-cost table."""
    server_rounds: int = 10
    """Alternating rounds of the server-cost table: the lowest commandstats time of each
    contender, its median CPU per call, and the CPU ratio to ``INCR`` the median of the rounds'
    own ratios: ``INFO cpu`` per call moves by half between minutes of a shared machine."""
    orm_rows: int | None = None
    peer_script: Path | None = None
    """hengyunabc's ``redis-script-node1.lua`` for its peer row (None: the row says how to add it):
    ``KEYS[1]`` a tag, ``KEYS[2]`` a partition, answering ``{second, microsecond, partition,
    sequence}``, from which the client composes the ID as its Java client does."""
    chart: bool = True
    out_dir: Path = field(default=RESULTS)
    quiet: bool = False

    def quick(self) -> Settings:
        return replace(
            self,
            calls=100,
            batches=5,
            buffered_ids=20_000,
            warmup_ids=2_000,
            processes=2,
            budget_s=2.0,
            async_ids=1_280,
            async_rounds=2,
            threads_ids=640,
            server_calls=50,
            server_rounds=1,
        )


@dataclass
class Row:
    """One measured line of a table."""

    group: str
    strategy: str
    mode: str
    ids: int
    seconds: float
    ids_per_s: float
    us_per_id: float | None = None
    ratio: float | None = None
    """``× PING`` (call latency) in the strategies table, ``× INCR`` (throughput) in the buffered
    one, ``× redis.asyncio INCR`` (throughput) in the async one; ``None`` when not measured."""
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def _connect(settings: Settings, prefix: str) -> RedisIds:
    url = settings.redis_url
    if url:
        return RedisIds.from_url(url, prefix=prefix, cluster=settings.cluster, socket_timeout=10)
    return RedisIds.embedded(prefix=prefix)


def _ping_call(ids: RedisIds, key: str) -> Callable[[], object]:
    """``PING`` on the connection the generators use (on a cluster: the node of the namespace)."""
    client = ids.nodes.nodes[0].client
    if hasattr(client, "get_node_from_key"):
        node = client.get_node_from_key(key)
        connection = client.get_redis_connection(node)
        return connection.ping  # type: ignore[no-any-return]
    return client.ping  # type: ignore[no-any-return]


def _available(ids: RedisIds) -> list[str]:
    return [name for name in STRATEGIES if callable(getattr(ids, name, None))]


def _generator(ids: RedisIds, name: str, namespace: str, **extra: Any) -> IdGenerator[Any]:
    factory = getattr(ids, name)
    options = dict(STRATEGIES[name])
    if ids.nodes.nodes[0].name == "embedded":
        options.update(EMBEDDED_OPTIONS.get(name, {}))
    made: IdGenerator[Any] = factory(namespace, **options, **extra)
    return made


def _cleanup(ids: RedisIds, prefix: str) -> int:
    client = ids.nodes.nodes[0].client
    if client.__class__.__module__.startswith("fakeredis"):
        return 0
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    for key in keys:
        client.delete(key)
    return len(keys)


# -- peers: what an application would use instead --------------------------------------------------


def pg_dsn(url: str) -> str:
    """A libpq URL for psycopg from a libpq or SQLAlchemy one (``postgresql+psycopg://...``)."""
    scheme, sep, rest = url.partition("://")
    if sep and scheme.split("+", 1)[0] in ("postgresql", "postgres") and "+" in scheme:
        return f"postgresql://{rest}"
    return url


def _safe_url(url: str) -> str:
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not an SQLAlchemy-style URL: show no more than the scheme
        return url.partition("://")[0] + "://..."


class PostgresSequence:
    """A PostgreSQL sequence of the benchmark's own, drawn through psycopg (autocommit: one
    statement, one round trip); dropped by `close`."""

    def __init__(self, url: str, name: str, batch: int):
        import psycopg

        self.connection = psycopg.connect(pg_dsn(url), autocommit=True, connect_timeout=5)
        try:
            row = self.connection.execute("SHOW server_version").fetchone()
            self.version = str(row[0]).split()[0] if row else "?"
            self.connection.execute(f"CREATE SEQUENCE {name}")
        except BaseException:
            self.connection.close()
            raise
        self.name = name
        self.cursor = self.connection.cursor()
        self._one = f"SELECT nextval('{name}')"
        self._many = f"SELECT nextval('{name}') FROM generate_series(1, {int(batch)})"

    def next_id(self) -> int:
        self.cursor.execute(self._one)  # type: ignore[arg-type]
        row = self.cursor.fetchone()
        assert row is not None
        return int(row[0])

    def next_ids(self) -> list[int]:
        self.cursor.execute(self._many)  # type: ignore[arg-type]
        return [int(row[0]) for row in self.cursor.fetchall()]

    def close(self) -> None:
        try:
            self.connection.execute(f"DROP SEQUENCE IF EXISTS {self.name}")
        finally:
            self.connection.close()


def _missing(group: str, strategy: str, mode: str, note: str) -> Row:
    """A row for something that could not be measured, saying why."""
    return Row(group, strategy, mode, 0, 0.0, 0.0, note=note)


def _measure_peers(
    settings: Settings,
    client: Any,
    prefix: str,
    ping_call: Callable[[], object],
    progress: Progress,
) -> tuple[list[Row], Timing, str | None]:
    """``INCR``, PostgreSQL ``nextval``, pottery's ``NextID`` and UUIDv7, each timed alternately
    with ``PING``. Returns the rows, the ``INCR`` timing and the PostgreSQL version (if reached)."""
    rows: list[Row] = []

    def paired(call: Callable[[], object], per_call: int = 1) -> tuple[Timing, Timing]:
        calls = settings.calls if per_call == 1 else settings.batches
        return time_paired(
            call, ping_call, calls=calls, per_call=per_call, budget_s=settings.budget_s
        )

    progress.step("INCR")
    incr_key = f"{prefix}:{{bench}}:incr"
    client.incr(incr_key)
    incr, floor = paired(lambda: client.incr(incr_key))
    rows.append(_row("peers", "redis-py", "INCR", incr, floor))

    progress.step("PostgreSQL nextval")
    pg_url = settings.pg_url or os.environ.get(PG_ENV, DEFAULT_PG_URL)
    pg_version: str | None = None
    pg: PostgresSequence | None = None
    try:
        pg = PostgresSequence(pg_url, f"{prefix}_seq", settings.batch)
    except ImportError:
        note = "not available: psycopg is not installed (pip install 'sa_redis_ids[bench]')"
    except Exception as exc:  # unreachable or refused: the row says so, the run goes on
        reached = "not reachable" if type(exc).__name__ == "OperationalError" else "not usable"
        note = f"PostgreSQL at {_safe_url(pg_url)} {reached} ({type(exc).__name__})"
    if pg is None:
        rows.append(_missing("peers", "PostgreSQL", "nextval()", note))
        rows.append(_missing("peers", "PostgreSQL", f"nextval() × {settings.batch}", note))
        progress.step("PostgreSQL nextval batched")
    else:
        try:
            pg_version = pg.version
            pg.next_ids()  # warm: the plans prepared, the sequence's page cached
            for _ in range(6):
                pg.next_id()
            single, floor = paired(pg.next_id)
            row = _row("peers", "PostgreSQL", "nextval()", single, floor)
            row.note = f"psycopg, PostgreSQL {pg.version}"
            rows.append(row)
            progress.step("PostgreSQL nextval batched")
            batch, floor = paired(pg.next_ids, settings.batch)
            row = _row("peers", "PostgreSQL", f"nextval() × {settings.batch}", batch, floor)
            row.note = f"SELECT nextval(...) FROM generate_series(1, {settings.batch})"
            rows.append(row)
        finally:
            pg.close()

    progress.step("pottery NextID")
    try:
        from pottery import NextID
    except ImportError:
        rows.append(
            _missing(
                "peers", "pottery", "NextID", "not available: pip install 'sa_redis_ids[bench]'"
            )
        )
    else:
        next_id = NextID(key=f"{prefix}:{{bench}}:pottery", masters={client}, num_tries=3)
        try:
            next(next_id)
            timing, floor = paired(lambda: next(next_id))
            row = _row("peers", "pottery", "NextID", timing, floor)
            row.note = "GET then a Lua SET, through a thread pool"
        except Exception as exc:  # a peer that fails here (a cluster client, say) is reported
            row = _missing("peers", "pottery", "NextID", f"failed: {type(exc).__name__}: {exc}")
        finally:
            client.delete(next_id.key)  # pottery prefixes its own "nextid:"
        rows.append(row)

    progress.step(HENGYUNABC)
    script = _peer_script(settings, client, prefix)
    if script is None:
        rows.append(_missing("peers", HENGYUNABC, "EVALSHA", HENGYUNABC_HOW))
    else:
        try:
            script()
            timing, floor = paired(script)
            row = _row("peers", HENGYUNABC, "EVALSHA", timing, floor)
            row.note = "one node's script; the client composes the ID"
        except Exception as exc:  # a script that does not run is reported, not fatal
            row = _missing("peers", HENGYUNABC, "EVALSHA", f"failed: {type(exc).__name__}: {exc}")
        rows.append(row)

    progress.step("UUIDv7")
    try:
        import uuid_utils
    except ImportError:
        rows.append(
            _missing(
                "peers", "uuid-utils", "uuid7()", "not available: pip install 'sa_redis_ids[bench]'"
            )
        )
    else:
        make = uuid_utils.uuid7
        make()
        timing, floor = paired(make)
        loop_rate = settings.calls * 20 / time_loop(make, settings.calls * 20)
        row = _row("peers", "uuid-utils", "uuid7()", timing, floor)
        row.extra["tight_loop_ids_per_s"] = loop_rate
        row.note = f"no Redis: the in-process floor; {loop_rate:,.0f}/s in a tight loop"
        rows.append(row)

    progress.step("snowflake-id")
    try:
        from snowflake import SnowflakeGenerator as PlainSnowflake
    except ImportError:
        rows.append(
            _missing("peers", "snowflake-id", "next()", "not available: pip install snowflake-id")
        )
    else:
        plain = PlainSnowflake(1)  # the worker number each process must be given by hand
        take = plain.__next__
        take()
        timing, floor = paired(take)
        loop_rate = settings.calls * 20 / time_loop(take, settings.calls * 20)
        row = _row("peers", "snowflake-id", "next()", timing, floor)
        row.extra["tight_loop_ids_per_s"] = loop_rate
        row.note = f"no Redis, worker number by hand; {loop_rate:,.0f}/s in a tight loop"
        rows.append(row)
    return rows, incr, pg_version


def _peer_script(settings: Settings, client: Any, prefix: str) -> Callable[[], int] | None:
    """hengyunabc's script as a call that returns one composed ID (None: no file given)."""
    if settings.peer_script is None:
        return None
    script = client.register_script(settings.peer_script.read_text(encoding="utf-8"))
    keys = [f"{prefix}:{{bench}}:hengyunabc", "0"]

    def next_id() -> int:
        second, micro, partition, sequence = script(keys=keys)
        return (
            ((int(second) * 1000 + int(micro) // 1000) << 22)
            + (int(partition) << 10)
            + int(sequence)
        )

    return next_id


# -- concurrency: many threads or asyncio tasks, unbuffered -----------------------------------------


def _concurrency_rows(group: str, measured: list[Measured]) -> list[Row]:
    """Rows of one concurrency table: IDs/s, wall µs per ID and the ratio to the INCR peer (the
    first contender); the note gives the server's CPU per ID and its ratio to the peer's, where
    it was measured."""
    rows: list[Row] = []
    incr_rate = 0.0
    incr_cpu = 0.0
    for strategy, mode, count, seconds, cpu in measured:
        rate = count / seconds
        incr_rate = incr_rate or rate
        row = Row(group, strategy, mode, count, seconds, rate, seconds / count * 1e6)
        row.ratio = rate / incr_rate
        if cpu is not None and cpu > 0:
            per_id = cpu / count * 1e6
            incr_cpu = incr_cpu or per_id
            row.extra["server_cpu_us_per_id"] = per_id
            row.note = f"server CPU {per_id:.3g} µs/ID, {per_id / incr_cpu:.2g}× INCR's"
        rows.append(row)
    return rows


def _measure_async(settings: Settings, prefix: str) -> list[Row]:
    """``redis.asyncio`` ``INCR`` and the strategies' asyncio ``next_id()``, ``async_tasks`` tasks."""
    assert settings.redis_url
    tasks = settings.async_tasks
    try:
        measured = asyncio.run(
            measure_async(
                settings.redis_url,
                prefix,
                cluster=settings.cluster,
                tasks=tasks,
                ids_each=settings.async_ids,
                rounds=settings.async_rounds,
            )
        )
    except ImportError as exc:
        note = f"not available: {exc}"
        return [_missing("async", "sequence (async)", f"next_id(), {tasks} tasks", note)]
    return _concurrency_rows("async", measured)


def _measure_threads(settings: Settings, prefix: str) -> list[Row]:
    """redis-py ``INCR`` and the strategies' ``next_id()``, ``concurrent_threads`` threads."""
    assert settings.redis_url
    measured = measure_threads(
        settings.redis_url,
        prefix,
        cluster=settings.cluster,
        threads=settings.concurrent_threads,
        ids_each=settings.threads_ids,
        rounds=settings.async_rounds,
    )
    return _concurrency_rows("threads", measured)


def _measure_server(settings: Settings, ids: RedisIds, prefix: str, incr_key: str) -> list[Row]:
    """The server's cost per call of ``INCR``, an empty script and each strategy's ``next_id()``."""
    client = ids.nodes.nodes[0].client
    empty = client.register_script("return 1")
    lua_key = f"{prefix}:{{bench}}:lua"
    contenders: dict[str, tuple[Callable[[], object], str]] = {
        "redis-py INCR": (lambda: client.incr(incr_key), "incrby"),  # redis-py sends INCRBY
        "EVALSHA 'return 1'": (lambda: empty(keys=[lua_key]), "evalsha"),
    }
    peer = _peer_script(settings, client, prefix)
    if peer is not None:
        contenders[HENGYUNABC] = (peer, "evalsha")
    for name in _available(ids):
        generator = _generator(ids, name, f"bench_server_{name}")
        generator.next_id()
        contenders[f"{name} next_id()"] = (generator.next_id, command_of(name))
    costs = measure_server(
        client, contenders, calls=settings.server_calls, rounds=settings.server_rounds
    )
    rows: list[Row] = []
    for cost in costs:
        row = Row("server", cost.name, cost.command.upper(), cost.calls, 0.0, 0.0, cost.cpu)
        row.ratio = cost.ratio or None  # the median of the rounds' ratios (see measure_server)
        row.extra = {
            "commandstats_usec_per_call": cost.usec,
            "cpu_usec_per_call": cost.cpu,
            "system_cpu_usec_per_call": cost.system,
        }
        rows.append(row)
    return rows


# -- buffered throughput in threads and processes ------------------------------------------------


def _draw(generator: IdGenerator[Any], count: int) -> None:
    take = generator.next_id
    for _ in range(count):
        take()


def _threads_rate(generator: IdGenerator[Any], threads: int, total: int) -> tuple[int, float]:
    per = total // threads
    return per * threads, threads_seconds(generator.next_id, threads, per)


def _process_main(
    url: str,
    cluster: bool,
    prefix: str,
    name: str,
    namespace: str,
    block: int,
    warmup: int,
    count: int,
    barrier: Any,
    results: Any,
) -> None:
    """One process of the multi-process measurement: warm up, wait for all, draw, report."""
    try:
        ids = RedisIds.from_url(url, prefix=prefix, cluster=cluster, socket_timeout=10)
        generator = _generator(ids, name, namespace, block=Buffering(block))
        _draw(generator, warmup)
        barrier.wait(timeout=120)
        start = time.time()
        _draw(generator, count)
        results.put((count, start, time.time(), None))
    except BaseException as exc:  # reported to the parent
        results.put((0, 0.0, 0.0, repr(exc)))


def _processes_rate(
    settings: Settings, prefix: str, name: str, namespace: str
) -> tuple[int, float]:
    assert settings.redis_url
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(settings.processes)
    results = ctx.Queue()
    per = settings.buffered_ids // settings.processes
    args = (settings.redis_url, settings.cluster, prefix, name, namespace, settings.block)
    workers = [
        ctx.Process(
            target=_process_main,
            args=(*args, max(1, settings.warmup_ids // 10), per, barrier, results),
        )
        for _ in range(settings.processes)
    ]
    for worker in workers:
        worker.start()
    got = [results.get(timeout=600) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
    failed = [error for *_, error in got if error]
    if failed:
        raise RuntimeError(f"a benchmark process failed: {failed[0]}")
    total = sum(count for count, *_ in got)
    seconds = max(end for _, _, end, _ in got) - min(start for _, start, _, _ in got)
    return total, seconds


# -- the run ---------------------------------------------------------------------------------------


def run(settings: Settings) -> dict[str, Any]:
    """Measure everything; returns the result (also written to JSON by `main`)."""
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    ids = _connect(settings, prefix)
    embedded = not settings.redis_url
    names = _available(ids)
    buffered = [name for name in BUFFERED if name in names]
    hidden = "daily_code" in names
    steps = 2 + 6 + 2 * len(names) + hidden + 3 + 3 * len(buffered) + bool(settings.orm_rows)
    progress = Progress(steps, quiet=settings.quiet)
    strategy_rows: list[Row] = []
    buffered_rows: list[Row] = []
    async_rows: list[Row] = []
    thread_rows: list[Row] = []
    server_rows: list[Row] = []
    pg_version: str | None = None
    try:
        client = ids.nodes.nodes[0].client
        info = None if embedded else client.info("server")
        if isinstance(info, dict) and info and all(isinstance(v, dict) for v in info.values()):
            info = next(iter(info.values()))  # a cluster answers per node
        ping_call = _ping_call(ids, f"{prefix}:{{bench}}")
        ping_call()
        progress.step("PING")
        ping = time_calls(ping_call, calls=settings.calls, budget_s=settings.budget_s)
        strategy_rows.append(_row("floor", "redis-py", "PING", ping, ping))
        progress.step("EVALSHA of an empty script")
        empty = client.register_script("return 1")
        lua_key = f"{prefix}:{{bench}}:lua"
        empty(keys=[lua_key])
        lua, floor = time_paired(
            lambda: empty(keys=[lua_key]),
            ping_call,
            calls=settings.calls,
            budget_s=settings.budget_s,
        )
        lua_row = _row("floor", "redis-py", "EVALSHA 'return 1'", lua, floor)
        lua_row.note = "floor of any Lua strategy"
        strategy_rows.append(lua_row)

        peer_rows, incr, pg_version = _measure_peers(settings, client, prefix, ping_call, progress)
        strategy_rows += peer_rows

        for name in names:
            generator = _generator(ids, name, f"bench_{name}")
            generator.next_ids(3)  # script loaded, node claim recorded
            progress.step(f"{name} next_id()")
            single, floor = time_paired(
                generator.next_id, ping_call, calls=settings.calls, budget_s=settings.budget_s
            )
            strategy_rows.append(_row("strategies", name, "next_id()", single, floor))
            progress.step(f"{name} next_ids({settings.batch})")
            batch, floor = time_paired(
                lambda g=generator: g.next_ids(settings.batch),
                ping_call,
                calls=settings.batches,
                per_call=settings.batch,
                budget_s=settings.budget_s,
            )
            row = _row("strategies", name, f"next_ids({settings.batch})", batch, floor)
            row.extra["speedup_vs_next_id"] = batch.ids_per_s / single.ids_per_s
            row.note = f"{row.extra['speedup_vs_next_id']:,.0f}× next_id()"
            strategy_rows.append(row)
        if hidden:
            progress.step("daily_code next_id() with secret=")
            strategy_rows += _secret_rows(ids, settings, ping)

        progress.step(f"asyncio, {settings.async_tasks} tasks")
        if embedded:
            note = "n/a: the embedded Redis has no asyncio client"
            for strategy, mode in (("redis.asyncio", "INCR"), ("sequence (async)", "next_id()")):
                async_rows.append(
                    _missing("async", strategy, f"{mode}, {settings.async_tasks} tasks", note)
                )
        else:
            async_rows = _measure_async(settings, prefix)
        progress.step(f"{settings.concurrent_threads} threads")
        if embedded:
            note = "n/a: the embedded Redis is not a real round trip"
            mode = f"{settings.concurrent_threads} threads"
            for strategy, how in (("redis-py", "INCR"), ("sequence", "next_id()")):
                thread_rows.append(_missing("threads", strategy, f"{how}, {mode}", note))
        else:
            thread_rows = _measure_threads(settings, prefix)
        progress.step("server cost per call")
        if embedded or settings.cluster:
            note = "n/a: " + ("a cluster reports per node" if settings.cluster else "embedded")
            server_rows.append(_missing("server", "redis-py INCR", "INCR", note))
        else:
            server_rows = _measure_server(settings, ids, prefix, f"{prefix}:{{bench}}:incr")

        incr_row = _row("buffered", "INCR (unbuffered)", "1 thread", incr, ping)
        incr_row.ratio = 1.0
        incr_row.note = "the INCR row above"
        buffered_rows.append(incr_row)

        for name in buffered:
            buffered_rows += _measure_buffered(settings, ids, prefix, name, incr, progress)

        orm = None
        if settings.orm_rows:
            progress.step("ORM inserts")
            orm = run_orm_hook(settings)
    finally:
        progress.finish()
        _cleanup(ids, prefix)
        ids.close()

    result: dict[str, Any] = {
        "benchmark": "ids",
        "key_prefix": prefix,
        "machine": machine(info if isinstance(info, dict) else None),
        "settings": {k: v for k, v in asdict(settings).items() if k != "out_dir"},
        "ping": asdict(ping),
        "strategies": [asdict(row) for row in strategy_rows],
        "buffered": [asdict(row) for row in buffered_rows],
        "async": [asdict(row) for row in async_rows],
        "threads": [asdict(row) for row in thread_rows],
        "server": [asdict(row) for row in server_rows],
        "targets": targets(strategy_rows, buffered_rows, async_rows, thread_rows, server_rows),
        "orm": orm,
    }
    if pg_version:
        result["machine"]["postgresql_server"] = pg_version
    if embedded:
        result["machine"]["note"] = "embedded fakeredis: not a real round trip"
    return result


def _secret_rows(ids: RedisIds, settings: Settings, ping: Timing) -> list[Row]:
    """A daily code with ``secret=`` against a plain one, called alternately, per width."""
    rows: list[Row] = []
    for digits, mine, plain in secret_codes.measure(
        ids, calls=settings.calls, budget_s=settings.budget_s
    ):
        row = _row("strategies", secret_codes.name(digits), "next_id() vs plain", mine, ping)
        row.extra["vs_plain"] = mine.median_s / plain.median_s
        row.extra["plain_median_call_us"] = plain.median_s * 1e6
        row.note = f"{row.extra['vs_plain']:.3f}× a plain daily_code's next_id(), same run"
        rows.append(row)
    return rows


def _row(group: str, strategy: str, mode: str, timing: Timing, ping: Timing) -> Row:
    return Row(
        group=group,
        strategy=strategy,
        mode=mode,
        ids=timing.ids,
        seconds=timing.seconds,
        ids_per_s=timing.ids_per_s,
        us_per_id=timing.us_per_id,
        ratio=timing.median_s / ping.median_s,
        extra={
            "median_call_us": timing.median_s * 1e6,
            "p99_call_us": timing.p99_s * 1e6,
            "ping_median_us": ping.median_s * 1e6,
        },
    )


def _measure_buffered(
    settings: Settings, ids: RedisIds, prefix: str, name: str, incr: Timing, progress: Progress
) -> list[Row]:
    rows: list[Row] = []
    total = settings.buffered_ids

    def buffered_row(mode: str, count: int, seconds: float, gen: IdGenerator[Any] | None) -> Row:
        rate = count / seconds if seconds > 0 else float("inf")
        row = Row("buffered", f"{name} block={settings.block}", mode, count, seconds, rate)
        row.us_per_id = seconds / count * 1e6 if count else None
        row.ratio = rate / incr.ids_per_s
        stats = getattr(gen, "stats", lambda: None)()
        if stats is not None:
            row.extra = asdict(stats)
            row.note = (
                f"block now {stats.block_size:,}; {stats.blocks_taken} blocks, "
                f"{stats.waits} waits, refill {stats.refill_ms_mean:.2f} ms"
            )
        return row

    progress.step(f"{name} buffered, 1 thread")
    try:
        one = _generator(ids, name, f"bench_buf1_{name}", block=Buffering(settings.block))
    except TypeError:
        return [
            Row("buffered", name, "-", 0, 0.0, 0.0, note="no block= option on this strategy yet")
        ]
    _draw(one, settings.warmup_ids)
    seconds = time_loop(one.next_id, total)
    rows.append(buffered_row("1 thread", total, seconds, one))

    progress.step(f"{name} buffered, {settings.threads} threads")
    shared = _generator(ids, name, f"bench_bufT_{name}", block=Buffering(settings.block))
    _draw(shared, settings.warmup_ids)
    count, seconds = _threads_rate(shared, settings.threads, total)
    rows.append(buffered_row(f"{settings.threads} threads", count, seconds, shared))

    progress.step(f"{name} buffered, {settings.processes} processes")
    if not settings.redis_url:
        rows.append(
            Row("buffered", f"{name} block={settings.block}", f"{settings.processes} processes",
                0, 0.0, 0.0, note="n/a: the embedded Redis lives in one process")
        )  # fmt: skip
        return rows
    count, seconds = _processes_rate(settings, prefix, name, f"bench_bufP_{name}")
    rows.append(buffered_row(f"{settings.processes} processes", count, seconds, None))
    return rows


def _orm_module() -> Any | None:
    try:
        return importlib.import_module("benchmarks.orm_insert")
    except ImportError:
        return None


def run_orm_hook(settings: Settings) -> dict[str, Any] | None:
    """Run the ORM insert benchmark (``benchmarks/orm_insert.py``) on the same Redis, if present.

    It calls the module's ``run(rows=..., redis_url=..., cluster=...)``; a missing module (or one
    without ``run``) gives ``None``, and the report says so.
    """
    module = _orm_module()
    runner = getattr(module, "run", None)
    if not callable(runner):
        return None
    found: dict[str, Any] | None = runner(
        rows=settings.orm_rows, redis_url=settings.redis_url, cluster=settings.cluster
    )
    return found


def _target(text: str, measured: float | None, met: bool, note: str = "") -> dict[str, Any]:
    found: dict[str, Any] = {"target": text, "measured": measured, "met": met}
    if note:
        found["note"] = note
    return found


def targets(
    strategy_rows: Sequence[Row],
    buffered_rows: Sequence[Row],
    async_rows: Sequence[Row] = (),
    thread_rows: Sequence[Row] = (),
    server_rows: Sequence[Row] = (),
) -> list[dict[str, Any]]:
    """The targets, each with what was measured and whether it was met (``measured`` is ``None``
    and ``met`` false when the row it needs could not be measured; ``note`` says why)."""
    found: list[dict[str, Any]] = []
    singles = {
        r.strategy: r for r in strategy_rows if r.group == "strategies" and r.mode == "next_id()"
    }
    batches = {
        r.strategy: r
        for r in strategy_rows
        if r.group == "strategies" and r.mode.startswith("next_ids(")
    }
    sequence = singles.get("sequence")
    if sequence is not None and sequence.ratio is not None:
        found.append(
            _target(
                f"sequence next_id() latency <= {SEQUENCE_PING_TARGET:.2f}× PING",
                round(sequence.ratio, 3),
                sequence.ratio <= SEQUENCE_PING_TARGET,
            )
        )
    for name, row in singles.items():
        assert row.ratio is not None
        found.append(
            _target(
                f"{name} next_id() latency <= {STRATEGY_PING_TARGET:.2f}× PING",
                round(row.ratio, 3),
                row.ratio <= STRATEGY_PING_TARGET,
            )
        )
    nextval = next(
        (r for r in strategy_rows if r.strategy == "PostgreSQL" and r.mode == "nextval()"), None
    )
    if sequence is not None and sequence.ratio is not None:
        text = "sequence next_id() per ID at least as fast as PostgreSQL nextval() per ID"
        if nextval is None or not nextval.ids or nextval.ratio is None:
            note = nextval.note if nextval is not None else "not measured"
            found.append(_target(text + " (time ratio <= 1)", None, False, note))
        else:
            # each was timed alternately with PING: compare their ratios to it
            relative = sequence.ratio / nextval.ratio
            found.append(
                _target(text + " (time ratio <= 1)", round(relative, 3), relative <= NEXTVAL_TARGET)
            )
    for name, row in batches.items():
        speedup = row.extra["speedup_vs_next_id"]
        found.append(
            _target(
                f"{name} {row.mode} >= {BATCH_SPEEDUP_TARGET:.0f}× IDs/s of next_id()",
                round(speedup, 1),
                speedup >= BATCH_SPEEDUP_TARGET,
            )
        )
    seq = next(
        (r for r in buffered_rows if r.strategy.startswith("sequence") and r.mode == "1 thread"),
        None,
    )
    if seq is not None and seq.ratio is not None:
        found.append(
            _target(
                f"buffered sequence >= {BUFFERED_VS_INCR_TARGET:.0f}× unbuffered INCR",
                round(seq.ratio, 1),
                seq.ratio >= BUFFERED_VS_INCR_TARGET,
            )
        )
        found.append(
            _target(
                "buffered sequence > 1,000,000 IDs/s in one process",
                round(seq.ids_per_s),
                seq.ids_per_s > BUFFERED_IDS_PER_S_TARGET,
            )
        )
    found += _concurrency_targets(async_rows, "redis.asyncio INCR", ASYNC_VS_INCR_TARGET)
    found += _concurrency_targets(thread_rows, "redis-py INCR", THREADS_VS_INCR_TARGET)
    found += _server_targets(server_rows)
    found += _batch_targets(batches)
    found += secret_codes.targets(strategy_rows)
    return found


def _concurrency_targets(rows: Sequence[Row], peer: str, target: float) -> list[dict[str, Any]]:
    """Each targeted strategy's shared ``next_id()`` at the table's concurrency vs its INCR peer."""
    if not rows:
        return []
    found: list[dict[str, Any]] = []
    concurrency = rows[0].mode.split(", ")[-1]
    for name in CONCURRENCY_TARGETED:
        text = f"{name} next_id() at {concurrency} >= {target:g}× IDs/s of {peer}"
        mine = next(
            (r for r in rows if r.strategy.split(" ")[0] == name and "share_calls" not in r.mode),
            None,
        )
        if mine is None or not mine.ids or mine.ratio is None:
            note = mine.note if mine is not None else rows[-1].note or "not measured"
            found.append(_target(text, None, False, note))
        else:
            found.append(_target(text, round(mine.ratio, 2), mine.ratio >= target))
    return found


def _server_targets(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """Server CPU per call against an INCR's, and the sequence script's commandstats time."""
    if not rows:
        return []
    found: list[dict[str, Any]] = []
    strategies = [r for r in rows if r.strategy.endswith("next_id()")]
    if not strategies:
        note = rows[0].note or "not measured"
        return [_target("server CPU per next_id() <= 1.6× an INCR's", None, False, note)]
    for row in strategies:
        name = row.strategy.split(" ")[0]
        limit = SERVER_CPU_SEQUENCE_TARGET if name == "sequence" else SERVER_CPU_TARGET
        ratio = row.ratio
        text = f"server CPU per {name} next_id() <= {limit:g}× an INCR's (INFO cpu)"
        met = ratio is not None and ratio <= limit
        found.append(_target(text, None if ratio is None else round(ratio, 2), met))
        if name == "sequence":
            usec = row.extra["commandstats_usec_per_call"]
            found.append(
                _target(
                    f"sequence next_id() <= {SERVER_USEC_SEQUENCE_TARGET:g} µs per call "
                    "(INFO commandstats)",
                    round(usec, 2),
                    usec <= SERVER_USEC_SEQUENCE_TARGET,
                )
            )
    return found


def _batch_targets(batches: dict[str, Row]) -> list[dict[str, Any]]:
    """``short_id``'s batch against its ``next_id()``; ``daily_code``'s per ID against a
    sequence's."""
    found: list[dict[str, Any]] = []
    short = batches.get("short_id")
    if short is not None:
        speedup = short.extra["speedup_vs_next_id"]
        found.append(
            _target(
                f"short_id {short.mode} >= {SHORT_ID_BATCH_TARGET:.0f}× IDs/s of its next_id()",
                round(speedup, 1),
                speedup >= SHORT_ID_BATCH_TARGET,
            )
        )
    daily, sequence = batches.get("daily_code"), batches.get("sequence")
    if daily is not None and sequence is not None and daily.ratio and sequence.ratio:
        relative = daily.ratio / sequence.ratio  # both timed alternately with PING
        found.append(
            _target(
                f"daily_code {daily.mode} per ID <= {DAILY_CODE_BATCH_TARGET:g}× sequence's",
                round(relative, 2),
                relative <= DAILY_CODE_BATCH_TARGET,
            )
        )
    return found


# -- output ----------------------------------------------------------------------------------------

STRATEGY_HEADERS = ("strategy", "call", "IDs/s", "µs/ID (median)", "call × PING", "note")
BUFFERED_HEADERS = ("generator", "mode", "IDs/s", "µs/ID", "× INCR", "note")
ASYNC_HEADERS = ("generator", "call", "IDs/s", "µs/ID (wall)", "× redis.asyncio INCR", "note")
THREADS_HEADERS = ("generator", "call", "IDs/s", "µs/ID (wall)", "× redis-py INCR", "note")
SERVER_HEADERS = (
    "call",
    "command",
    "commandstats µs/call",
    "CPU µs/call",
    "CPU × INCR",
    "of it system µs",
    "note",
)


def _server_cells(row: dict[str, Any]) -> list[object]:
    if not row["ids"]:
        return [row["strategy"], row["mode"], "-", "-", "-", "-", row["note"]]
    extra = row["extra"]
    return [
        row["strategy"],
        row["mode"],
        extra["commandstats_usec_per_call"],
        extra["cpu_usec_per_call"],
        row["ratio"] if row["ratio"] is not None else "-",
        extra.get("system_cpu_usec_per_call", "-"),
        row["note"],
    ]


def _strategy_cells(row: dict[str, Any]) -> list[object]:
    measured = bool(row["ids"])
    return [
        row["strategy"],
        row["mode"],
        row["ids_per_s"] if measured else "-",
        row["us_per_id"] if measured else "-",
        row["ratio"] if measured else "-",
        row["note"],
    ]


def _buffered_cells(row: dict[str, Any]) -> list[object]:
    return [
        row["strategy"],
        row["mode"],
        row["ids_per_s"] if row["ids"] else "-",
        row["us_per_id"] if row["us_per_id"] is not None else "-",
        row["ratio"] if row["ids"] else "-",
        row["note"],
    ]


def render(result: dict[str, Any], *, markdown: bool = False) -> str:
    """The three tables and the targets as text (or Markdown, for the README)."""
    make = markdown_table if markdown else table
    parts = [
        f"Machine: {describe_machine(result['machine'])}",
        "",
        make(STRATEGY_HEADERS, [_strategy_cells(r) for r in result["strategies"]]),
        "",
        make(ASYNC_HEADERS, [_buffered_cells(r) for r in result.get("async", [])]),
        "",
        make(THREADS_HEADERS, [_buffered_cells(r) for r in result.get("threads", [])]),
        "",
        make(SERVER_HEADERS, [_server_cells(r) for r in result.get("server", [])]),
        "",
        make(BUFFERED_HEADERS, [_buffered_cells(r) for r in result["buffered"]]),
        "",
        "Targets:",
    ]
    for target in result["targets"]:
        mark = "met" if target["met"] else "NOT met"
        measured = target["measured"]
        shown = f"{measured:,}" if measured is not None else f"not measured: {target.get('note')}"
        parts.append(f"- {target['target']}: {shown} ({mark})")
    orm = result.get("orm")
    module = _orm_module()
    if orm is None:
        parts.append("- ORM inserts: not run (--orm-rows N runs benchmarks/orm_insert.py too)")
    elif module is not None and callable(getattr(module, "render", None)):
        parts += [
            "",
            "ORM inserts (benchmarks/orm_insert.py):",
            module.render(orm, markdown=markdown),
        ]
    return "\n".join(parts)


def chart(result: dict[str, Any], path: Path) -> Path | None:
    rows = [
        r
        for r in result["strategies"]
        + result.get("async", [])
        + result.get("threads", [])
        + result["buffered"]
        if r["ids"]
    ]
    labels = [f"{r['strategy']} {r['mode']}" for r in rows]
    return bar_chart(
        path, "sa_redis_ids: IDs per second", labels, [r["ids_per_s"] for r in rows], "IDs/s"
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``python -m benchmarks.ids`` and ``sa-redis-ids bench ids``."""
    parser.add_argument(
        "--redis-url",
        default=os.environ.get(URL_ENV),
        metavar="URL",
        help=f"Redis to measure (default ${URL_ENV}, else the embedded fakeredis)",
    )
    parser.add_argument("--cluster", action="store_true", help="the URL names a Redis Cluster")
    parser.add_argument(
        "--pg-url",
        default=os.environ.get(PG_ENV, DEFAULT_PG_URL),
        metavar="URL",
        help=f"PostgreSQL for the nextval peer (default ${PG_ENV}, else {DEFAULT_PG_URL})",
    )
    parser.add_argument(
        "--tasks", type=int, default=64, help="concurrent tasks of the asyncio rows (default 64)"
    )
    parser.add_argument(
        "--hengyunabc-script",
        type=Path,
        default=os.environ.get(SCRIPT_ENV),
        metavar="FILE",
        help=f"hengyunabc's redis-script-node1.lua for its peer row (default ${SCRIPT_ENV})",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of a few seconds")
    parser.add_argument("--calls", type=int, help="next_id() calls per strategy (default 5000)")
    parser.add_argument("--ids", type=int, help="IDs per buffered measurement (default 2,000,000)")
    parser.add_argument("--block", type=int, default=1000, help="first block size (default 1000)")
    parser.add_argument("--orm-rows", type=int, help="also run the ORM benchmark with N rows")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results folder")
    parser.add_argument("--no-chart", action="store_true", help="skip the PNG chart")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--quiet", action="store_true", help="no progress line")


def settings_from(args: argparse.Namespace) -> Settings:
    settings = Settings(
        redis_url=args.redis_url,
        cluster=args.cluster,
        pg_url=args.pg_url,
        async_tasks=args.tasks,
        block=args.block,
        orm_rows=args.orm_rows,
        peer_script=args.hengyunabc_script,
        chart=not args.no_chart,
        out_dir=args.out,
        quiet=args.quiet,
    )
    if args.quick:
        settings = settings.quick()
    if args.calls:
        settings = replace(settings, calls=args.calls)
    if args.ids:
        settings = replace(settings, buffered_ids=args.ids)
    return settings


def run_from_args(args: argparse.Namespace) -> int:
    """Run, print the tables, write JSON (and the chart); the exit status is 0."""
    settings = settings_from(args)
    result = run(settings)
    path = write_json("ids", result, settings.out_dir)
    print(render(result, markdown=args.markdown))
    print(f"\nJSON: {path}")
    if settings.chart:
        png = chart(result, path.with_suffix(".png"))
        print(f"chart: {png}" if png else "chart: skipped (pip install 'sa_redis_ids[plot]')")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.ids", description=__doc__)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
