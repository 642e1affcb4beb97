"""IDs per second of every strategy against the physical floor of one Redis round trip.

``python -m benchmarks.ids [--redis-url URL] [--quick]`` (also ``sa-redis-ids bench ids``) measures, in
one run on one Redis:

1. a redis-py ``PING`` on the same connection the generators use: the floor of one round trip;
2. per strategy present, ``next_id()`` and ``next_ids(1000)``: IDs/s, the median per-ID latency and
   its ratio to ``PING``;
3. an unbuffered ``INCR`` and buffered Sequence / DatePrefixed (``block=``) in one thread, in 4 threads
   sharing one generator, and in 4 processes: IDs/s and the ratio to ``INCR``;
4. the ORM insert benchmark (``benchmarks/orm_insert.py``) when it is present and ``--orm`` is given.

It prints two tables and the issue's targets (met or not), writes JSON to ``benchmarks/results/``
and, if matplotlib is installed (extra ``plot``), a PNG chart. Keys live under a fresh prefix and
are deleted at the end; nothing else on the server is touched.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import os
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

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
from sa_redis_ids import Buffering, RedisIds
from sa_redis_ids.generators.base import IdGenerator

URL_ENV = "SA_REDIS_IDS_URL"

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

PING_RATIO_TARGET = 1.15
BATCH_SPEEDUP_TARGET = 100.0
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
    orm_rows: int | None = None
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
    """``× PING`` (latency) in the strategies table, ``× INCR`` (throughput) in the buffered one."""
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


# -- buffered throughput in threads and processes ------------------------------------------------


def _draw(generator: IdGenerator[Any], count: int) -> None:
    take = generator.next_id
    for _ in range(count):
        take()


def _threads_rate(generator: IdGenerator[Any], threads: int, total: int) -> tuple[int, float]:
    per = total // threads
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            _draw(generator, per)
        except BaseException as exc:  # reported below
            errors.append(exc)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    barrier.wait()
    start = time.perf_counter()
    for thread in pool:
        thread.join()
    seconds = time.perf_counter() - start
    if errors:
        raise errors[0]
    return per * threads, seconds


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
    """Measure everything; returns the result (also written to JSON by :func:`main`)."""
    prefix = f"bench{uuid.uuid4().hex[:10]}"
    ids = _connect(settings, prefix)
    embedded = not settings.redis_url
    names = _available(ids)
    buffered = [name for name in BUFFERED if name in names]
    steps = 2 + 2 * len(names) + 1 + 3 * len(buffered) + (1 if settings.orm_rows else 0)
    progress = Progress(steps, quiet=settings.quiet)
    strategy_rows: list[Row] = []
    buffered_rows: list[Row] = []
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

        progress.step("INCR")
        incr_key = f"{prefix}:{{bench_incr}}:incr"
        incr = time_calls(
            lambda: client.incr(incr_key), calls=settings.calls, budget_s=settings.budget_s
        )
        incr_row = _row("buffered", "INCR (unbuffered)", "1 thread", incr, ping)
        incr_row.ratio = 1.0
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
        "targets": targets(strategy_rows, buffered_rows),
        "orm": orm,
    }
    if embedded:
        result["machine"]["note"] = "embedded fakeredis: not a real round trip"
    return result


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


def targets(strategy_rows: Sequence[Row], buffered_rows: Sequence[Row]) -> list[dict[str, Any]]:
    """The issue's targets, each with what was measured and whether it was met."""
    found: list[dict[str, Any]] = []
    singles = {r.strategy: r for r in strategy_rows if r.mode == "next_id()"}
    batches = {r.strategy: r for r in strategy_rows if r.mode.startswith("next_ids(")}
    for name, row in singles.items():
        assert row.ratio is not None
        found.append(
            {
                "target": f"{name} next_id() latency <= {PING_RATIO_TARGET}× PING",
                "measured": round(row.ratio, 3),
                "met": row.ratio <= PING_RATIO_TARGET,
            }
        )
    for name, row in batches.items():
        speedup = row.extra["speedup_vs_next_id"]
        found.append(
            {
                "target": f"{name} {row.mode} >= {BATCH_SPEEDUP_TARGET:.0f}× IDs/s of next_id()",
                "measured": round(speedup, 1),
                "met": speedup >= BATCH_SPEEDUP_TARGET,
            }
        )
    seq = next(
        (r for r in buffered_rows if r.strategy.startswith("sequence") and r.mode == "1 thread"),
        None,
    )
    if seq is not None and seq.ratio is not None:
        found.append(
            {
                "target": f"buffered sequence >= {BUFFERED_VS_INCR_TARGET:.0f}× unbuffered INCR",
                "measured": round(seq.ratio, 1),
                "met": seq.ratio >= BUFFERED_VS_INCR_TARGET,
            }
        )
        found.append(
            {
                "target": "buffered sequence > 1,000,000 IDs/s in one process",
                "measured": round(seq.ids_per_s),
                "met": seq.ids_per_s > BUFFERED_IDS_PER_S_TARGET,
            }
        )
    return found


# -- output ----------------------------------------------------------------------------------------

STRATEGY_HEADERS = ("strategy", "call", "IDs/s", "µs/ID (median)", "call × PING", "note")
BUFFERED_HEADERS = ("generator", "mode", "IDs/s", "µs/ID", "× INCR", "note")


def _strategy_cells(row: dict[str, Any]) -> list[object]:
    return [
        row["strategy"],
        row["mode"],
        row["ids_per_s"],
        row["us_per_id"],
        row["ratio"],
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
    """The two tables and the targets as text (or Markdown, for the README)."""
    make = markdown_table if markdown else table
    parts = [
        f"Machine: {describe_machine(result['machine'])}",
        "",
        make(STRATEGY_HEADERS, [_strategy_cells(r) for r in result["strategies"]]),
        "",
        make(BUFFERED_HEADERS, [_buffered_cells(r) for r in result["buffered"]]),
        "",
        "Targets:",
    ]
    for target in result["targets"]:
        mark = "met" if target["met"] else "NOT met"
        parts.append(f"- {target['target']}: {target['measured']:,} ({mark})")
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
    rows = [r for r in result["strategies"] + result["buffered"] if r["ids"]]
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
        block=args.block,
        orm_rows=args.orm_rows,
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
