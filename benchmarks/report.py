"""What every benchmark shares: timing loops, a progress line, the machine, tables, JSON and charts."""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

RESULTS = Path(__file__).resolve().parent / "results"
"""Where results go by default (git ignores it)."""


@dataclass(frozen=True)
class Timing:
    """``calls`` calls of something that yields ``per_call`` IDs each, timed one by one."""

    calls: int
    per_call: int
    seconds: float
    median_s: float
    p99_s: float

    @property
    def ids(self) -> int:
        return self.calls * self.per_call

    @property
    def ids_per_s(self) -> float:
        return self.ids / self.seconds if self.seconds > 0 else float("inf")

    @property
    def us_per_id(self) -> float:
        """Median microseconds per ID (a call's median latency over the IDs it yields)."""
        return self.median_s / self.per_call * 1e6


def time_calls(
    call: Callable[[], object], *, calls: int, per_call: int = 1, budget_s: float = 10.0
) -> Timing:
    """Time ``calls`` calls one by one (stopping early after ``budget_s``): the median round trip
    is robust to a noisy shared machine, the total gives the throughput."""
    samples: list[float] = []
    clock = time.perf_counter
    start = clock()
    for i in range(calls):
        t0 = clock()
        call()
        samples.append(clock() - t0)
        if clock() - start > budget_s and i >= 2:
            break
    found = _timing(samples, per_call)
    return Timing(found.calls, per_call, clock() - start, found.median_s, found.p99_s)


def time_paired(
    call: Callable[[], object],
    reference: Callable[[], object],
    *,
    calls: int,
    per_call: int = 1,
    budget_s: float = 10.0,
) -> tuple[Timing, Timing]:
    """Time ``call`` and ``reference`` alternately, so both see the same load on a shared machine;
    returns both timings (the reference is one ID per call)."""
    mine: list[float] = []
    theirs: list[float] = []
    clock = time.perf_counter
    start = clock()
    for i in range(calls):
        t0 = clock()
        reference()
        t1 = clock()
        call()
        mine.append(clock() - t1)
        theirs.append(t1 - t0)
        if clock() - start > budget_s and i >= 2:
            break
    return _timing(mine, per_call), _timing(theirs, 1)


def _timing(samples: list[float], per_call: int) -> Timing:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return Timing(len(samples), per_call, sum(samples), statistics.median(samples), p99)


def time_loop(call: Callable[[], object], count: int) -> float:
    """Seconds for ``count`` calls in a tight loop (for calls too fast to time one by one)."""
    clock = time.perf_counter
    start = clock()
    for _ in range(count):
        call()
    return clock() - start


class Progress:
    """A one-line progress indicator on stderr (rewritten in place on a terminal)."""

    def __init__(self, total: int, *, stream: TextIO | None = None, quiet: bool = False):
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self.started = time.monotonic()

    def step(self, label: str) -> None:
        self.done += 1
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        line = f"[{self.done:>2}/{self.total}] {elapsed:6.1f}s  {label}"
        if self.tty:
            self.stream.write("\r\033[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and not self.quiet:
            self.stream.write("\r\033[K")
            self.stream.flush()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _memory_gb() -> float | None:
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        size = os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
    return round(pages * size / 2**30, 1)


def machine(redis_info: dict[str, Any] | None = None) -> dict[str, Any]:
    """The machine, Python and Redis a result was measured on."""
    import redis

    found: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gb": _memory_gb(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "redis_py": redis.__version__,
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
    }
    if redis_info:
        found["redis_server"] = redis_info.get("redis_version")
        found["redis_mode"] = redis_info.get("redis_mode")
    return found


def describe_machine(found: dict[str, Any]) -> str:
    """One line naming the machine, for the table's header and the README."""
    load = found.get("load_average")
    load_text = f", load {load[0]:.2f}" if load else ""
    server = found.get("redis_server") or "embedded fakeredis"
    postgres = found.get("postgresql_server")
    postgres_text = f", PostgreSQL {postgres}" if postgres else ""
    return (
        f"{found['cpu']}, {found['cores']} cores, {found.get('memory_gb')} GB, {found['os']}, "
        f"{found['implementation']} {found['python']}, redis-py {found['redis_py']}, "
        f"Redis {server}{postgres_text}{load_text}"
    )


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table, numbers right-aligned."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    numeric = [
        all(isinstance(row[i], (int, float)) or row[i] in ("", "-") for row in rows)
        for i in range(len(headers))
    ]
    lines = []
    for n, row in enumerate(cells):
        parts = [
            cell.rjust(width) if numeric[i] and n else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """The same table in Markdown (for the README)."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        if value >= 10:
            return f"{value:.1f}"
        if 0 < abs(value) < 0.1:
            return f"{value:.2g}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def write_json(name: str, result: dict[str, Any], directory: Path = RESULTS) -> Path:
    """Write ``result`` to ``<directory>/<name>-<UTC time>.json`` and ``<name>-latest.json``."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = directory / f"{name}-{stamp}.json"
    text = json.dumps(result, indent=2, default=_json_default)
    path.write_text(text + "\n", encoding="utf-8")
    (directory / f"{name}-latest.json").write_text(text + "\n", encoding="utf-8")
    return path


def _json_default(value: object) -> object:
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)  # type: ignore[call-overload]
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"cannot write {type(value).__name__} as JSON")


def bar_chart(
    path: Path, title: str, labels: Sequence[str], values: Sequence[float], unit: str
) -> Path | None:
    """A horizontal bar chart (log scale) as PNG, or ``None`` if matplotlib is not installed
    (extra ``plot``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    height = max(3.0, 0.35 * len(labels) + 1.2)
    fig, ax = plt.subplots(figsize=(10, height))
    positions = list(range(len(labels)))[::-1]
    ax.barh(positions, values, color="#3b73b9")
    ax.set_yticks(positions)
    ax.set_yticklabels(labels, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
    for pos, value in zip(positions, values, strict=True):
        ax.text(value, pos, f" {value:,.0f}", va="center", fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
