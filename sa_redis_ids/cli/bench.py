"""``sa-redis-ids bench TARGET [options]``: run one of the benchmarks in ``benchmarks/``.

The benchmarks are a development tool: they live in the source repository, not in the installed
package. A target names a module of the checkout's top-level ``benchmarks`` package exposing
``add_arguments(parser)`` and ``run_from_args(args)``; run from an installed package (no checkout
next to it) the command says so in one line and exits 2. The module is imported only when its
target runs, so other commands do not pay for it. To add a target, add a line to ``TARGETS``.

While it runs, the benchmark's progress is a ``tqdm`` bar on stderr (plain lines when stderr is not
a terminal). ``--json`` prints the results the benchmark writes (its ``<name>-latest.json``) as one
JSON document on stdout and sends the benchmark's own tables to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import sys
from pathlib import Path
from typing import Any, TextIO

from sa_redis_ids.cli.options import UsageError
from sa_redis_ids.cli.output import JSON_HELP, Progress
from sa_redis_ids.errors import ConfigError

#: target name -> (module in the checkout, one-line help, name of its results file)
TARGETS: dict[str, tuple[str, str, str]] = {
    "orm": (
        "benchmarks.orm_insert",
        "ORM inserts per strategy vs autoincrement (rows/s)",
        "orm_insert",
    ),
    "ids": ("benchmarks.ids", "IDs/s of every strategy, batches and buffering", "ids"),
}

CHECKOUT = Path(__file__).resolve().parent.parent.parent
"""The source checkout this package runs from (an editable install), where ``benchmarks/`` is."""

NOT_HERE = (
    "bench: the benchmarks are a development tool that lives in the source repository, not in "
    "the installed package; clone the repository and run it there (pip install -e '.[test]')"
)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "bench",
        help="run a benchmark (a development tool: source checkout only)",
        description="Run a benchmark from the source checkout's benchmarks/ folder (a "
        "development tool: an installed package without the repository has none, and says so). "
        "Targets: "
        + "; ".join(f"{name}: {text}" for name, (_, text, _) in TARGETS.items())
        + ". Options after TARGET go to the benchmark (see: sa-redis-ids bench TARGET --help). "
        "Progress is a bar on stderr on a terminal, plain lines otherwise.",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help=JSON_HELP + ": the benchmark's results document (the same as the file it writes, "
        "with its 'strategies'/'rows' tables and 'environment'); its text tables go to stderr",
    )
    parser.add_argument("target", choices=sorted(TARGETS), metavar="TARGET", help="orm or ids")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's own options")
    parser.set_defaults(run=run)


def module_file(target: str) -> Path:
    """Where the module of ``target`` is in the checkout."""
    return CHECKOUT.joinpath(*TARGETS[target][0].split(".")).with_suffix(".py")


def load(target: str) -> Any:
    """Import the module of ``target`` from the checkout next to this package; a
    `UsageError` when there is none (an installed package)."""
    module_name = TARGETS[target][0]
    if not module_file(target).is_file():
        raise UsageError(NOT_HERE)
    if str(CHECKOUT) not in sys.path:
        sys.path.insert(0, str(CHECKOUT))
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise UsageError(NOT_HERE) from exc
        raise ConfigError(
            f"the {target!r} benchmark needs {exc.name!r}: pip install -e '.[bench]'"
        ) from exc


class BenchProgress:
    """The benchmarks' ``Progress`` interface (``step(label)``, ``finish()``) drawn by the
    command line's `Progress`."""

    def __init__(self, total: int, *, stream: TextIO | None = None, quiet: bool = False):
        self._progress = Progress(total, "bench", unit="steps", every=1, quiet=quiet, stream=stream)

    def step(self, label: str) -> None:
        self._progress.update(1, label)

    def finish(self) -> None:
        self._progress.close()


def run(args: argparse.Namespace) -> int:
    options = list(args.options)
    as_json = args.json or "--json" in options
    options = [option for option in options if option != "--json"]
    module = load(args.target)
    parser = argparse.ArgumentParser(
        prog=f"sa-redis-ids bench {args.target}", description=module.__doc__
    )
    module.add_arguments(parser)
    bench_args = parser.parse_args(options)
    original = getattr(module, "Progress", None)
    if original is not None:
        module.Progress = BenchProgress
    try:
        with contextlib.redirect_stdout(sys.stderr) if as_json else contextlib.nullcontext():
            status: int = module.run_from_args(bench_args)
    finally:
        if original is not None:
            module.Progress = original
    if as_json:
        out = getattr(bench_args, "out", None)
        latest = Path(out) / f"{TARGETS[args.target][2]}-latest.json" if out else None
        if latest is None or not latest.is_file():
            raise ConfigError(f"the {args.target!r} benchmark wrote no results file to print")
        print(json.dumps(json.loads(latest.read_text(encoding="utf-8"))), flush=True)
    return status
