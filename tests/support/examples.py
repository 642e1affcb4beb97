"""Running the Python examples of the README and the docs pages, with Sybil.

Every ```` ```python ```` block of a page runs, in order, in one namespace per page. A block that
needs a server the suite cannot stand in for, or is only a fragment, is preceded by a Markdown
comment with a reason, ``<!-- skip: next "why" -->``; those are counted and kept few.

The pages show how an application connects to its own Redis (``RedisIds.from_url(...)``,
``from_urls``, ``from_sentinel``). While the examples run, those constructors build the embedded
in-process Redis instead (one fresh server per node, so ``from_urls`` keeps its N nodes), and
drop the options only a real server has (``replicas=``, ``replica_timeout=``, ``cluster=``, the
timeouts): no example reaches anything but this process. Databases are SQLite.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import SkipTest

from sybil import Sybil
from sybil.parsers.markdown import PythonCodeBlockParser, SkipParser

from sa_redis_ids.ids import RedisIdsBase
from sa_redis_ids.redis.connect import embedded_client

ROOT = Path(__file__).resolve().parent.parent.parent
SKIP = re.compile(r"<!--\s*skip:\s*(\w+)(.*?)-->", re.S)

SYBIL = Sybil(parsers=[PythonCodeBlockParser(), SkipParser()])


def pages() -> list[Path]:
    """The README and every page under ``docs/``."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


@dataclass
class Outcome:
    """What running one page's examples gave."""

    ran: int = 0
    skipped: list[str] = field(default_factory=list)


def skip_directives(page: Path) -> list[tuple[str, str]]:
    """Each ``<!-- skip: ACTION REASON -->`` of a page, as (action, reason text)."""
    return [
        (action, reason.strip())
        for action, reason in SKIP.findall(page.read_text(encoding="utf-8"))
    ]


def _embedded_like(cls: type[RedisIdsBase], count: int, options: dict[str, Any]) -> Any:
    """What an example's constructor gets instead of a server: ``count`` fresh embedded nodes."""
    kept = {key: options[key] for key in ("prefix", "strict") if key in options}
    clients = [embedded_client(cls.asynchronous) for _ in range(count)]
    return cls(clients if count > 1 else clients[0], **kept)


@contextmanager
def embedded_servers() -> Iterator[None]:
    """While the block runs, ``from_url``/``from_urls``/``from_sentinel`` build embedded nodes."""
    saved = {
        name: RedisIdsBase.__dict__[name] for name in ("from_url", "from_urls", "from_sentinel")
    }

    def from_url(cls: Any, url: str, **options: Any) -> Any:
        return _embedded_like(cls, 1, options)

    def from_urls(cls: Any, urls: list[str], **options: Any) -> Any:
        return _embedded_like(cls, len(urls), options)

    def from_sentinel(cls: Any, sentinels: Any, service_name: str, **options: Any) -> Any:
        return _embedded_like(cls, 1, options)

    replacements = {"from_url": from_url, "from_urls": from_urls, "from_sentinel": from_sentinel}
    try:
        for name, function in replacements.items():
            setattr(RedisIdsBase, name, classmethod(function))
        yield
    finally:
        for name, original in saved.items():
            setattr(RedisIdsBase, name, original)


def run_page(page: Path) -> Outcome:
    """Run every Python example of ``page`` in order; skipped ones are listed with their reason."""
    document = SYBIL.parse(page)
    document.namespace["__name__"] = f"example_{page.stem.replace('-', '_')}"
    outcome = Outcome()
    with embedded_servers():
        for example in document:
            is_code = example.region.evaluator is not None and not isinstance(example.parsed, tuple)
            try:
                example.evaluate()
            except SkipTest as skipped:
                outcome.skipped.append(f"line {example.line}: {skipped}")
                continue
            if is_code:
                outcome.ran += 1
    return outcome
