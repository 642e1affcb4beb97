"""The ``sa-redis-ids`` command line tool.

Each sub-command lives in its own module exposing ``register(subparsers)``; they are listed in
``COMMANDS``. Errors of the library and bad arguments end in one line on stderr and a non-zero exit,
never a traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence
from importlib import metadata
from typing import Any, NoReturn

from sqlalchemy.exc import SQLAlchemyError

from sa_redis_ids.cli import bench, claims, demo, maintain, next_ids, parse, reseed, status
from sa_redis_ids.cli.options import UsageError
from sa_redis_ids.errors import SaRedisIdsError
from sa_redis_ids.generators.registry import load_strategy_modules

COMMANDS = [demo, next_ids, status, claims, maintain, reseed, parse, bench]

DISTRIBUTION = "sa_redis_ids"


def version() -> str:
    """The installed distribution's version, else the package's ``__version__`` (a source tree
    run without installing)."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        from sa_redis_ids import __version__

        return __version__


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line: ``sa-redis-ids: error: …`` and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def build_parser() -> Parser:
    parser = Parser(
        prog="sa-redis-ids",
        description="IDs for SQLAlchemy models from Redis. Without --redis-url the embedded "
        "in-process Redis is used; without --db-url a SQLite file.",
    )
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


DEBUG_ENV = "SA_REDIS_IDS_DEBUG"
"""Set to ``1`` to see the traceback behind a one-line error."""


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sa-redis-ids`` script; returns the exit status.

    Users' strategies are registered first (entry points of ``sa_redis_ids.strategies`` and the
    modules of ``$SA_REDIS_IDS_STRATEGIES``), so every command offers them and their options.
    """
    try:
        load_strategy_modules()
    except SaRedisIdsError as exc:
        if os.environ.get(DEBUG_ENV) == "1":
            raise
        print(f"sa-redis-ids: error: {one_line(exc)}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _one_line_warning
        try:
            status: int = args.run(args)
        except UsageError as exc:
            if os.environ.get(DEBUG_ENV) == "1":
                raise
            print(f"sa-redis-ids: error: {one_line(exc)}", file=sys.stderr)
            return 2
        except (SaRedisIdsError, SQLAlchemyError, ValueError, TypeError) as exc:
            # The library's checks raise these for a user's mistake (SQLAlchemy's for a bad or
            # unreachable --db-url): one line, no traceback, unless SA_REDIS_IDS_DEBUG=1 asks.
            if os.environ.get(DEBUG_ENV) == "1":
                raise
            print(f"sa-redis-ids: error: {one_line(exc)}", file=sys.stderr)
            return 1
        except BrokenPipeError:
            return _quiet_broken_pipe()
        except KeyboardInterrupt:
            return 130
    try:
        sys.stdout.flush()  # a reader that left (``| head -1``) shows here when the output is short
    except BrokenPipeError:
        return _quiet_broken_pipe()
    return status


def one_line(exc: BaseException) -> str:
    """The message of ``exc`` on one line (SQLAlchemy's link to its error pages left out)."""
    text = str(exc).split("\n(Background on this error", 1)[0]
    return " ".join(text.split())


def _quiet_broken_pipe() -> int:
    """The reader of stdout left: exit without a traceback (also none at interpreter exit)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout without a file descriptor
        pass
    return 141  # 128 + SIGPIPE, as a shell reports a writer killed by a closed pipe


def _one_line_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """Print a warning as one line, without the source line Python would show."""
    print(f"sa-redis-ids: warning: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
