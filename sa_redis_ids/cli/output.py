"""How the sub-commands print: one JSON document for ``--json``, progress on stderr.

* `add_json_option` / `print_json`: ``--json`` prints exactly one JSON document on
  stdout (dates and times as ISO 8601 text, keys in a fixed order); errors stay one line on stderr
  with a non-zero exit, so a script reads stdout only when the exit status is 0 (or documented
  otherwise by the command).
* `Progress`: a ``tqdm`` bar on stderr when stderr is a terminal, plain lines otherwise
  (a log file or a pipe gets no carriage returns), nothing at all when ``quiet``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

JSON_HELP = "print one JSON document on stdout instead of text"


def add_json_option(parser: argparse.ArgumentParser, keys: str = "") -> None:
    """``--json``; ``keys`` documents the document's keys in the help."""
    parser.add_argument(
        "--json", action="store_true", help=JSON_HELP + (f": {keys}" if keys else "")
    )


def plain(value: Any) -> Any:
    """``value`` as something ``json.dumps`` writes: ISO text for dates, lists for tuples/sets,
    dicts for dataclasses."""
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Path):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=str) if isinstance(value, (set, frozenset)) else value
        return [plain(v) for v in items]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def print_json(document: Any) -> None:
    """Print ``document`` as one line of JSON on stdout."""
    print(json.dumps(plain(document)), flush=True)


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``1 claim key``, ``2 claim keys``)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class Progress:
    """Progress of ``total`` steps on stderr: a tqdm bar on a terminal, else a plain line every
    ``every`` steps (and at the end). Use as a context manager; ``update(n, note)`` advances.

    Without tqdm installed it prints plain lines on a terminal too.
    """

    def __init__(
        self,
        total: int | None,
        description: str,
        *,
        unit: str = "it",
        every: int = 25,
        quiet: bool = False,
        stream: TextIO | None = None,
        start: int = 0,
    ):
        self.total = total
        self.description = description
        self.unit = unit
        self.every = max(1, every)
        self.quiet = quiet
        self.stream = stream if stream is not None else sys.stderr
        self.done = start
        """Steps done (from ``start``: steps shown otherwise before this progress began)."""
        self._bar: Any = None
        if not quiet and _isatty(self.stream):
            try:
                from tqdm import tqdm
            except ImportError:  # pragma: no cover - tqdm is a dependency; plain lines then
                pass
            else:
                self._bar = tqdm(
                    total=total,
                    desc=description,
                    unit=unit,
                    file=self.stream,
                    leave=False,
                    initial=start,
                )

    @property
    def is_bar(self) -> bool:
        """Whether a tqdm bar is drawn (stderr is a terminal)."""
        return self._bar is not None

    def set_total(self, total: int | None) -> None:
        """The number of steps, once known."""
        self.total = total
        if self._bar is not None and self._bar.total != total:
            self._bar.total = total
            self._bar.refresh()

    def update(self, n: int = 1, note: str = "") -> None:
        before = self.done
        self.done += n
        if self.quiet:
            return
        if self._bar is not None:
            if note:
                self._bar.set_postfix_str(note, refresh=False)
            self._bar.update(n)
            return
        if self.done // self.every > before // self.every or self.done == self.total:
            of = f"/{self.total}" if self.total is not None else ""
            tail = f" ({note})" if note else ""
            self.stream.write(f"{self.description}: {self.done}{of} {self.unit}{tail}\n")
            self.stream.flush()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
