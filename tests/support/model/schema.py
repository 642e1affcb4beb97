"""What every process of the model builds: one generator per strategy and two ORM tables.

Every generator is made with default options (only the options a strategy cannot do without, and
a ``block=`` on one sequence), and every one is bound to a column, so its floor is that column
(the ORM's default). ``seq`` is bound to two tables (``alpha.id`` and ``beta.ref``): its floor is
the higher of them. Directly drawn values are inserted into their generator's own column, so every
value a process receives ends up in a table (what a floor can see) unless a flush fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from sa_redis_ids import redis_id, register

POOL_SIZE = 10_000_000
POOL_OFFSET = 10_000_000
"""The short-ID pool: the factory's defaults."""
BLOCK = 50


@dataclass(frozen=True)
class GeneratorConfig:
    label: str
    """The generator's namespace and its name in the trace."""
    factory: str
    options: dict[str, Any]
    table: str
    """The table and column its directly drawn values are inserted into."""
    column: str


GENERATORS: tuple[GeneratorConfig, ...] = (
    GeneratorConfig("seq", "sequence", {}, "alpha", "id"),
    GeneratorConfig("seqb", "sequence", {"block": BLOCK}, "beta", "id"),
    GeneratorConfig("dp", "date_prefixed", {}, "beta", "invoice"),
    GeneratorConfig("sf", "snowflake", {}, "alpha", "event"),
    GeneratorConfig("sid", "short_id", {}, "alpha", "short"),
    GeneratorConfig("dc", "daily_code", {"digits": 6, "tz": "UTC"}, "alpha", "code"),
)
LABELS = tuple(config.label for config in GENERATORS)
BUFFERED = frozenset({"seqb"})
"""Generators whose values may be served from memory, fetched steps before they are handed out."""
BY_LABEL = {config.label: config for config in GENERATORS}
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "alpha": {"id": "seq", "event": "sf", "short": "sid", "code": "dc"},
    "beta": {"id": "seqb", "invoice": "dp", "ref": "seq"},
}
"""Per table, each column filled by a generator and that generator's label."""


def generators(ids: Any) -> dict[str, Any]:
    """One generator per entry of `GENERATORS`, made by ``ids`` (sync or asyncio front end)."""
    return {c.label: getattr(ids, c.factory)(c.label, **c.options) for c in GENERATORS}


def models(gens: dict[str, Any]) -> tuple[Any, Any, Any]:
    """A fresh declarative base and its ``Alpha`` and ``Beta`` classes bound to ``gens``:
    ``redis_id(...)`` column defaults on ``Alpha``, ``register(...)`` on ``Beta``."""

    class Base(DeclarativeBase):
        pass

    class Alpha(Base):
        __tablename__ = "alpha"
        id: Mapped[int] = mapped_column(
            BigInteger, primary_key=True, autoincrement=False, default=redis_id(gens["seq"])
        )
        event: Mapped[int] = mapped_column(BigInteger, unique=True, default=redis_id(gens["sf"]))
        short: Mapped[int | None] = mapped_column(
            BigInteger, unique=True, nullable=True, default=redis_id(gens["sid"])
        )
        code: Mapped[str] = mapped_column(String(20), unique=True, default=redis_id(gens["dc"]))
        worker: Mapped[str] = mapped_column(String(20))

    class Beta(Base):
        __tablename__ = "beta"
        id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
        invoice: Mapped[int] = mapped_column(BigInteger, unique=True)
        ref: Mapped[int] = mapped_column(BigInteger, unique=True, default=redis_id(gens["seq"]))
        worker: Mapped[str] = mapped_column(String(20))

    register(Beta, gens["seqb"])
    register(Beta, gens["dp"], "invoice")
    return Base, Alpha, Beta
