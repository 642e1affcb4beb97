"""migrations_example/: upgrade, insert through the models, downgrade, on each database; offline SQL.

Alembic runs in this process (``alembic.command``) with the example's own ``alembic.ini``, pointed at
the test database and at the shared Redis under a private key prefix through the environment
variables a user sets. One test runs the ``alembic`` command line as a user would.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import date, datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, insert, inspect, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from tests.support.services import REDIS_URL

EXAMPLE = Path(__file__).resolve().parent.parent / "migrations_example"
INI = EXAMPLE / "alembic.ini"
MODULES = ("example_models", "redis_counters")
TABLES = {"customers", "invoices", "orders", "members"}


def _forget_example_modules() -> None:
    for name in MODULES:
        module = sys.modules.pop(name, None)
        ids = getattr(module, "ids", None)
        if ids is not None:
            ids.close()


def alembic_config(buffer: io.StringIO | None = None) -> Config:
    config = Config(str(INI), output_buffer=buffer) if buffer else Config(str(INI))
    config.attributes["configure_logger"] = False  # keep pytest's logging as it is
    return config


class Example:
    """The example project pointed at one database and a private Redis prefix."""

    def __init__(self, db_url: str):
        self.db_url = db_url
        self.engine: Engine = create_engine(db_url)
        self.config = alembic_config()

    def alembic(self, action: str, revision: str) -> None:
        getattr(command, action)(self.config, revision)

    @property
    def models(self) -> ModuleType:
        import example_models

        return example_models

    def tables(self) -> set[str]:
        return set(inspect(self.engine).get_table_names()) & TABLES


@contextmanager
def example_project(
    db_url: str, real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Example]:
    """The example on ``db_url``; afterwards its tables and its Redis keys are gone."""
    prefix = f"t{uuid.uuid4().hex[:12]}"
    monkeypatch.setenv("SA_REDIS_IDS_DB_URL", db_url)
    monkeypatch.setenv("SA_REDIS_IDS_URL", REDIS_URL)
    monkeypatch.setenv("SA_REDIS_IDS_PREFIX", prefix)
    monkeypatch.setattr(sys, "path", [str(EXAMPLE), *sys.path])
    _forget_example_modules()
    found = Example(db_url)
    leftovers = found.tables()
    if leftovers:  # an earlier failed run in this session's database
        with found.engine.begin() as conn:
            for table in (*sorted(leftovers), "alembic_version"):
                conn.execute(text(f"DROP TABLE IF EXISTS {table}"))
    try:
        yield found
    finally:
        try:
            found.alembic("downgrade", "base")
        finally:
            with found.engine.begin() as conn:
                conn.execute(text("DROP TABLE IF EXISTS alembic_version"))
            found.engine.dispose()
            _forget_example_modules()
            for key in list(real_redis.scan_iter(match=f"{prefix}:*")):
                real_redis.delete(key)


@pytest.fixture
def example(
    db_url: str, real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Example]:
    with example_project(db_url, real_redis, monkeypatch) as found:
        yield found


def today_in(tz: str) -> date:
    return datetime.now(timezone.utc).astimezone(ZoneInfo(tz)).date()


def test_upgrade_insert_through_the_models_and_downgrade(example: Example) -> None:
    example.alembic("upgrade", "0001")
    assert example.tables() == TABLES
    m = example.models
    invoice_day, code_day = today_in("UTC"), today_in("Asia/Shanghai")
    with example.engine.begin() as conn:
        # Rows from before Redis: database-generated customer keys, and imported rows.
        conn.execute(text("INSERT INTO customers (name) VALUES ('ann'), ('bob'), ('cy')"))
        conn.execute(
            insert(m.Invoice.__table__),
            [{"id": m.invoice_ids.compose(invoice_day, 900), "amount": 1}],
        )
        conn.execute(
            insert(m.Order.__table__),
            [{"id": 1, "code": m.order_codes.compose(code_day, 77)}],
        )
        conn.execute(insert(m.Member.__table__), [{"id": 40, "number": 10_000_005, "name": "old"}])
    with example.engine.connect() as conn:
        assert conn.execute(text("SELECT id FROM customers ORDER BY id")).scalars().all() == [
            1,
            2,
            3,
        ]

    example.alembic("upgrade", "head")  # 0002 reseeds, 0003 hands customers.id over to Redis

    with Session(example.engine) as session:
        customer = m.Customer(name="dee")
        invoice = m.Invoice(amount=12)
        order = m.Order()
        member = m.Member(name="new")
        session.add_all([customer, invoice, order, member])
        session.flush()
        assert customer.id == 4, "the Redis sequence continues above the autoincrement keys"
        assert invoice.id == m.invoice_ids.compose(invoice_day, 901)
        assert order.code == m.order_codes.compose(code_day, 78)
        assert order.id > 1 and m.order_ids.parse(order.id).value == order.id
        assert member.id == 41
        assert member.number != 10_000_005 and m.member_numbers.is_taken(10_000_005)
        session.execute(insert(m.Customer), [{"name": "eve"}, {"name": "fay"}])
        session.commit()
        names = session.execute(select(m.Customer.id, m.Customer.name).order_by(m.Customer.id))
        assert [tuple(row) for row in names] == [
            (1, "ann"),
            (2, "bob"),
            (3, "cy"),
            (4, "dee"),
            (5, "eve"),
            (6, "fay"),
        ]
    column = {c["name"]: c for c in inspect(example.engine).get_columns("customers")}["id"]
    assert "BIGINT" in str(column["type"]).upper()
    with pytest.raises(DBAPIError), example.engine.begin() as conn:
        conn.execute(text("INSERT INTO customers (name) VALUES ('no key')"))

    example.alembic("downgrade", "0002")  # the database generates customer keys again
    with example.engine.begin() as conn:
        conn.execute(text("INSERT INTO customers (name) VALUES ('gil')"))
        assert conn.execute(text("SELECT MAX(id) FROM customers")).scalar() == 7

    example.alembic("downgrade", "base")
    assert example.tables() == set()


def test_the_data_migration_reseeds_from_rows_already_there(example: Example) -> None:
    example.alembic("upgrade", "0001")
    m = example.models
    with example.engine.begin() as conn:
        conn.execute(insert(m.Member.__table__), [{"id": 500, "number": 99_999_999, "name": "x"}])
    example.alembic("upgrade", "0002")
    assert m.member_ids.next_id() == 501
    assert m.member_numbers.is_taken(99_999_999)
    example.alembic("upgrade", "0002")  # already there: nothing runs, nothing breaks
    example.alembic("downgrade", "0001")
    example.alembic("upgrade", "0002")  # running the reseed again never lowers a counter
    assert m.member_ids.next_id() == 502


def test_a_postgresql_identity_key_is_handed_over_too(
    postgres_url: str, real_redis: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    with example_project(postgres_url, real_redis, monkeypatch) as example:
        example.alembic("upgrade", "0001")
        with example.engine.begin() as conn:  # turn the SERIAL key into an IDENTITY one
            conn.execute(text("ALTER TABLE customers ALTER COLUMN id DROP DEFAULT"))
            conn.execute(text("DROP SEQUENCE customers_id_seq"))
            conn.execute(
                text("ALTER TABLE customers ALTER COLUMN id ADD GENERATED ALWAYS AS IDENTITY")
            )
            conn.execute(text("INSERT INTO customers (name) VALUES ('ann'), ('bob')"))
        example.alembic("upgrade", "head")
        with Session(example.engine) as session:
            customer = example.models.Customer(name="cy")
            session.add(customer)
            session.commit()
            assert customer.id == 3
        with example.engine.connect() as conn:
            identity = conn.execute(
                text(
                    "SELECT is_identity FROM information_schema.columns "
                    "WHERE table_name = 'customers' AND column_name = 'id'"
                )
            ).scalar()
        assert identity == "NO"


OFFLINE = {
    "sqlite": ("sqlite:///offline.sqlite3", "CREATE TABLE _alembic_tmp_customers"),
    "postgresql": (
        "postgresql+psycopg://user@db.invalid/app",
        "ALTER TABLE customers ALTER COLUMN id DROP IDENTITY IF EXISTS",
    ),
    "mariadb": ("mysql+pymysql://user@db.invalid/app", "MODIFY id BIGINT NOT NULL"),
}


@pytest.mark.parametrize("dialect", sorted(OFFLINE))
def test_offline_sql_mode_prints_the_sql_and_skips_the_reseed(
    dialect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, conversion = OFFLINE[dialect]
    monkeypatch.setenv("SA_REDIS_IDS_DB_URL", url)
    monkeypatch.delenv("SA_REDIS_IDS_URL", raising=False)
    monkeypatch.setattr(sys, "path", [str(EXAMPLE), *sys.path])
    _forget_example_modules()
    try:
        up, down = io.StringIO(), io.StringIO()
        command.upgrade(alembic_config(up), "head", sql=True)
        command.downgrade(alembic_config(down), "head:base", sql=True)
    finally:
        _forget_example_modules()
    sql = up.getvalue()
    assert "CREATE TABLE invoices" in sql and "CREATE TABLE members" in sql
    assert conversion in sql
    skipped = [line for line in sql.splitlines() if "skipped reseeding" in line]
    assert len(skipped) == 6, "five counters in 0002, the customers sequence in 0003"
    assert all(line.startswith("-- sa_redis_ids: offline (--sql) mode") for line in skipped)
    assert "DROP TABLE invoices" in down.getvalue()


def test_the_alembic_command_line_runs_the_example(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("SA_REDIS_IDS_")}
    env["SA_REDIS_IDS_DB_URL"] = "postgresql+psycopg://user@db.invalid/app"
    result = subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(INI), "upgrade", "head", "--sql"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "Running upgrade 0002 -> 0003" in result.stdout
    assert "-- sa_redis_ids: offline (--sql) mode, skipped reseeding customers" in result.stdout
    assert not list(tmp_path.iterdir()), "offline mode writes no database file"


def test_models_follow_the_column_rules() -> None:
    sys.path.insert(0, str(EXAMPLE))
    _forget_example_modules()
    try:
        import example_models as m
    finally:
        sys.path.remove(str(EXAMPLE))
    try:
        for model in (m.Customer, m.Invoice, m.Order, m.Member):
            key: Any = model.__table__.c.id
            assert key.type.python_type is int and key.autoincrement is False
            assert key.server_default is None and key.primary_key
        assert m.Order.__table__.c.code.unique
        assert m.Order.__table__.c.code.type.length == m.order_codes.max_length
        assert m.Member.__table__.c.number.unique
        assert m.ids.nodes.nodes[0].name == "embedded" or os.environ.get("SA_REDIS_IDS_URL")
    finally:
        _forget_example_modules()
