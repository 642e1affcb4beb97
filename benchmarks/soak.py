"""The randomized model of the whole system, run for as long as asked: a soak.

``python -m benchmarks.soak --seconds N`` runs random seeds of the model
(`tests.support.model`) one after another for ``N`` seconds (a seed started before the end
finishes) and prints one line per seed; for a failing seed, what broke, its replayable trace and
its log. ``--seed S`` runs that one seed (the same steps as every run of it: the trace depends
on the seed alone). Each seed starts its own ``redis-server`` processes (or a Sentinel topology)
on free loopback ports and stops them by process id; the processes share a SQLite file in a
temporary directory.

The exit status is 1 when a seed failed. Nothing is timed here: the figures are how many seeds,
steps and values ran.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
from collections.abc import Sequence
from typing import TextIO

from tests.support.model.run import Report, execute, plan

DEFAULT_STEPS = 40


def run(
    seconds: float,
    *,
    seed: int | None = None,
    steps: int = DEFAULT_STEPS,
    mode: str | None = None,
    fronts: Sequence[str] = ("sync", "asyncio"),
    out: TextIO | None = None,
) -> list[Report]:
    """Run ``seed``, or random seeds for ``seconds``; print each; return the reports."""
    stream = out if out is not None else sys.stdout
    reports: list[Report] = []
    deadline = time.monotonic() + seconds
    picker = random.SystemRandom()
    while True:
        chosen = seed if seed is not None else picker.randrange(1, 10**9)
        trace = plan(chosen, steps, mode=mode, fronts=tuple(fronts))
        report = execute(trace, seed=chosen)
        reports.append(report)
        print(report.text(), file=stream, flush=True)
        if seed is not None or time.monotonic() >= deadline:
            break
    failed = [r.seed for r in reports if r.failed]
    print(
        f"{len(reports)} seeds, {sum(r.steps_run for r in reports)} steps, "
        f"{sum(r.received for r in reports)} values, "
        f"{sum(r.seconds for r in reports):.0f} s; failing seeds: {failed or 'none'}",
        file=stream,
        flush=True,
    )
    return reports


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to run seeds")
    parser.add_argument("--seed", type=int, help="run this one seed (replay it)")
    parser.add_argument(
        "--steps", type=int, default=DEFAULT_STEPS, help="steps per seed after the setup"
    )
    parser.add_argument(
        "--mode", choices=("direct", "sentinel"), help="the topology (default: the seed's)"
    )
    parser.add_argument(
        "--fronts",
        default="sync,asyncio",
        help="the front ends processes may use, comma-separated (default: sync,asyncio)",
    )
    args = parser.parse_args(argv)
    fronts = [front.strip() for front in args.fronts.split(",") if front.strip()]
    if not fronts or not set(fronts) <= {"sync", "asyncio"}:
        parser.error("--fronts takes sync, asyncio or both")
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        reports = run(args.seconds, seed=args.seed, steps=args.steps, mode=args.mode, fronts=fronts)
    except KeyboardInterrupt:
        print("interrupted: the running seed's processes and servers are stopped", flush=True)
        return 130
    return 1 if any(report.failed for report in reports) else 0


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM ends a soak as Ctrl-C does: the running seed stops its worker processes and the
    Redis servers it started (by their ids) on the way out."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    raise SystemExit(main())
