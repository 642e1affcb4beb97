"""The ``sa-redis-ids`` command line tool.

Each sub-command lives in its own module exposing ``register(subparsers)``; they are listed in
``COMMANDS``. Errors of the library and bad arguments end in one line on stderr and a non-zero exit,
never a traceback.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

from sa_redis_ids.cli import bench, demo, maintain, next_ids, parse, reseed
from sa_redis_ids.errors import SaRedisIdsError

COMMANDS = [demo, next_ids, maintain, reseed, parse, bench]


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
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sa-redis-ids`` script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _one_line_warning
        try:
            status: int = args.run(args)
        except SaRedisIdsError as exc:
            print(f"sa-redis-ids: error: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
    return status


def _one_line_warning(message: Warning | str, category: type[Warning], *_: Any, **__: Any) -> None:
    """Print a warning as one line, without the source line Python would show."""
    print(f"sa-redis-ids: warning: {message}", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
