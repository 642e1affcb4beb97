"""``sa-redis-ids demo``: models whose IDs come from Redis, rows inserted, a table printed.

With no options it needs nothing installed beyond the package: the embedded Redis and a SQLite file
in the current directory. The demo's tables are dropped and created again on every run, because
the embedded Redis starts empty each time.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from sqlalchemy import BigInteger, String, create_engine, insert, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids.cli.options import (
    add_db_option,
    add_redis_options,
    positive_int,
    redis_ids_from,
    redis_urls,
)
from sa_redis_ids.ids import RedisIds
from sa_redis_ids.orm.default import redis_id

DEFAULT_DB_URL = "sqlite:///sa_redis_ids_demo.sqlite3"

QUICKSTART_URL = "https://github.com/sa-redis-ids/sa_redis_ids/blob/main/docs/quickstart.md"
"""Where a newcomer goes after the demo (the docs' quickstart page, readable in the repository)."""


@dataclass
class DemoTable:
    """One model of the demo: how its rows are made and which strategy fills its ID."""

    model: Any
    strategy: str
    rows: list[dict[str, Any]]
    bulk: bool
    """Insert with ``session.execute(insert(Model), rows)`` instead of ``add_all``."""


def build_models(ids: RedisIds, rows: int) -> tuple[Any, list[DemoTable]]:
    """A fresh declarative base and the demo models bound to ``ids``' generators."""

    class Base(DeclarativeBase):
        pass

    class User(Base):
        __tablename__ = "demo_users"
        id: Mapped[int] = mapped_column(
            BigInteger,
            primary_key=True,
            autoincrement=False,
            default=redis_id(ids.sequence("demo_users")),
        )
        name: Mapped[str] = mapped_column(String(50))

    class Event(Base):
        __tablename__ = "demo_events"
        id: Mapped[int] = mapped_column(
            BigInteger,
            primary_key=True,
            autoincrement=False,
            default=redis_id(ids.sequence("demo_events")),
        )
        name: Mapped[str] = mapped_column(String(50))

    class Invoice(Base):
        __tablename__ = "demo_invoices"
        id: Mapped[int] = mapped_column(
            BigInteger,
            primary_key=True,
            autoincrement=False,
            default=redis_id(ids.date_prefixed("demo_invoices", fmt="YYYYMMDD", length=19)),
        )
        name: Mapped[str] = mapped_column(String(50))

    class Order(Base):
        __tablename__ = "demo_orders"
        id: Mapped[int] = mapped_column(
            BigInteger,
            primary_key=True,
            autoincrement=False,
            default=redis_id(ids.snowflake("demo_orders")),
        )
        name: Mapped[str] = mapped_column(String(50))

    class Member(Base):
        __tablename__ = "demo_members"
        id: Mapped[int] = mapped_column(
            BigInteger,
            primary_key=True,
            autoincrement=False,
            default=redis_id(ids.short_id("demo_members")),
        )
        name: Mapped[str] = mapped_column(String(50))

    codes = ids.daily_code("demo_order_codes", code_prefix="IS", digits=4, tz="Asia/Shanghai")

    class OrderCode(Base):
        __tablename__ = "demo_order_codes"
        id: Mapped[str] = mapped_column(
            String(codes.max_length), primary_key=True, default=redis_id(codes)
        )
        name: Mapped[str] = mapped_column(String(50))

    tables = [
        DemoTable(
            User, "sequence", [{"name": f"user {i}"} for i in range(1, rows + 1)], bulk=False
        ),
        DemoTable(
            Event, "sequence", [{"name": f"event {i}"} for i in range(1, rows + 1)], bulk=True
        ),
        DemoTable(
            Invoice,
            "date_prefixed",
            [{"name": f"invoice {i}"} for i in range(1, rows + 1)],
            bulk=False,
        ),
        DemoTable(
            OrderCode,
            "daily_code",
            [{"name": f"order {i}"} for i in range(1, rows + 1)],
            bulk=True,
        ),
        DemoTable(
            Order, "snowflake", [{"name": f"order {i}"} for i in range(1, rows + 1)], bulk=False
        ),
        DemoTable(
            Member, "short_id", [{"name": f"member {i}"} for i in range(1, rows + 1)], bulk=True
        ),
    ]
    return Base, tables


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "demo",
        help="insert rows whose IDs come from Redis and print them",
        description="Define demo models, insert rows through the ORM and in bulk, print their IDs. "
        "The demo tables are dropped and re-created on each run.",
    )
    parser.add_argument("--rows", type=positive_int, default=3, help="rows per model (default 3)")
    add_redis_options(parser)
    add_db_option(parser, DEFAULT_DB_URL)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    ids = redis_ids_from(args)
    engine = create_engine(args.db_url)
    base, tables = build_models(ids, args.rows)
    print(f"Redis:    {', '.join(node.name for node in ids.nodes.nodes)}")
    print(f"Database: {engine.url.render_as_string(hide_password=True)}")
    base.metadata.drop_all(engine)
    base.metadata.create_all(engine)
    with Session(engine) as session:
        for table in tables:
            if table.bulk:
                session.execute(insert(table.model), table.rows)
            else:
                session.add_all([table.model(**row) for row in table.rows])
        session.commit()
        print_rows(session, tables)
    engine.dispose()
    print_next_steps(on_real_redis=bool(redis_urls(args)) and not getattr(args, "embedded", False))
    return 0


def next_steps(*, on_real_redis: bool) -> list[str]:
    """What to try after the demo: the quickstart, the demo again on a real Redis (or, once it
    ran on one, on the user's own database), and the commands that draw and decode IDs."""
    if on_real_redis:
        again = [
            "  2. Run it on your own database as well:",
            "     sa-redis-ids demo --redis-url URL --db-url postgresql+psycopg://user@host/db",
        ]
    else:
        again = [
            "  2. Run it on a real Redis (the embedded one forgets its IDs when the demo ends):",
            "     sa-redis-ids demo --redis-url redis://localhost:6379/0",
        ]
    return [
        "Next steps:",
        "  1. Give your own models IDs: read the quickstart,",
        f"     {QUICKSTART_URL}",
        "     (or the whole site from a checkout: pip install -e '.[docs]' && mkdocs serve)",
        *again,
        "  3. Draw and decode IDs by hand: sa-redis-ids next users -n 5; sa-redis-ids parse ID",
    ]


def print_next_steps(*, on_real_redis: bool) -> None:
    print()
    for line in next_steps(on_real_redis=on_real_redis):
        print(line)


def print_rows(session: Session, tables: list[DemoTable]) -> None:
    """A plain text table: model, strategy, how it was inserted, ID and name."""
    header = ("table", "strategy", "inserted by", "id", "name")
    lines: list[tuple[str, ...]] = []
    for table in tables:
        how = "insert() bulk" if table.bulk else "ORM add_all"
        for obj in session.scalars(select(table.model).order_by(table.model.name)):
            lines.append((table.model.__tablename__, table.strategy, how, str(obj.id), obj.name))
    widths = [max(len(row[i]) for row in [header, *lines]) for i in range(len(header))]
    print()
    for row in [header, tuple("-" * w for w in widths), *lines]:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
