"""``sa-redis-ids bench TARGET [options]``: run one of the benchmarks in ``benchmarks/``.

The benchmarks live in the source checkout, not in the installed package: a target names a module
of the top-level ``benchmarks`` package exposing ``add_arguments(parser)`` and
``run_from_args(args)``. The module is imported only when its target runs, so other commands do not
pay for it. To add a target, add a line to ``TARGETS``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from typing import Any

from sa_redis_ids.errors import ConfigError

#: target name -> (module in the checkout, one-line help)
TARGETS: dict[str, tuple[str, str]] = {
    "orm": ("benchmarks.orm_insert", "ORM inserts per strategy vs autoincrement (rows/s)"),
    "ids": ("benchmarks.ids", "IDs/s of every strategy, batches and buffering"),
}

CHECKOUT = Path(__file__).resolve().parent.parent.parent
"""The source checkout this package runs from (an editable install), where ``benchmarks/`` is."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "bench",
        help="run a benchmark (source checkout only)",
        description="Run a benchmark from the source checkout's benchmarks/ folder. Targets: "
        + "; ".join(f"{name}: {text}" for name, (_, text) in TARGETS.items())
        + ". Options after TARGET go to the benchmark (see: sa-redis-ids bench TARGET --help).",
    )
    parser.add_argument("target", choices=sorted(TARGETS), metavar="TARGET", help="orm or ids")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's own options")
    parser.set_defaults(run=run)


def load(target: str) -> Any:
    """Import the module of ``target``, from the checkout next to this package if needed."""
    module_name = TARGETS[target][0]
    if (CHECKOUT / "benchmarks").is_dir() and str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise ConfigError(
                f"the {target!r} benchmark ({module_name}) is not here: benchmarks run from a "
                f"source checkout (pip install -e .)"
            ) from exc
        raise


def run(args: argparse.Namespace) -> int:
    module = load(args.target)
    parser = argparse.ArgumentParser(
        prog=f"sa-redis-ids bench {args.target}", description=module.__doc__
    )
    module.add_arguments(parser)
    status: int = module.run_from_args(parser.parse_args(args.options))
    return status
