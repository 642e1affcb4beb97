"""A user's own strategy end to end: ``examples/custom_strategy`` (``stride_counter``).

The example is a plain package next to the project, not installed: each test puts its folder on
``sys.path`` (``monkeypatch.syspath_prepend``) and imports it, which registers the strategy, as an
application importing its own module would; the command line finds it through
``$SA_REDIS_IDS_STRATEGIES`` (an installed package would name it as an entry point, also tested).
Once imported the strategy stays registered for the process, like any plugin.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import sys
import threading
import uuid
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path
from types import ModuleType
from typing import Any

import fakeredis
import pytest
import redis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from sqlalchemy import BigInteger, Column, MetaData, String, Table, create_engine, insert, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import ConfigError, RedisIds, redis_id
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.cli import main
from sa_redis_ids.generators import registry
from sa_redis_ids.generators.abilities import DayKeyed, Parseable, Pool, Reseedable
from sa_redis_ids.maintenance.claims import generator_from_claims, options_from_config
from sa_redis_ids.maintenance.reseed import reseed_from_table
from tests.conftest import Backend
from tests.support.services import REDIS_URL

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_strategy"
NAME = "stride_counter"


@pytest.fixture
def stride_ids(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example package, imported afresh (its strategy registered); the CLI told to load it.
    The registration ends with the test: later tests (in any order) see the built-in
    strategies only."""
    monkeypatch.setattr(registry, "_STRATEGIES", dict(registry._STRATEGIES))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv(registry.MODULES_ENV, "stride_ids")
    monkeypatch.delenv("SA_REDIS_IDS_URL", raising=False)
    _forget_stride_ids()
    yield importlib.import_module("stride_ids")
    _forget_stride_ids()


def _forget_stride_ids() -> None:
    """Drop the example package from ``sys.modules``: the next import registers it again."""
    for name in [name for name in sys.modules if name.split(".")[0] == "stride_ids"]:
        del sys.modules[name]


@pytest.fixture
def redis_prefix(real_redis: redis.Redis) -> Iterator[str]:
    prefix = f"cs{uuid.uuid4().hex[:12]}"
    yield prefix
    for key in list(real_redis.scan_iter(match=f"{prefix}:*")):
        real_redis.delete(key)


def on_redis(prefix: str, *argv: str) -> list[str]:
    return [*argv, "--redis-url", REDIS_URL, "--prefix", prefix]


# -- the generator ---------------------------------------------------------------------------------


def test_it_issues_on_every_backend_from_many_threads_without_duplicates(
    stride_ids: ModuleType, backend: Backend
) -> None:
    tickets = backend.ids().generator(NAME, "tickets", start=100, stride=10)
    assert isinstance(tickets, stride_ids.StrideCounterGenerator)
    assert tickets.next_ids(3) == [100, 110, 120] and tickets.next_id() == 130
    drawn: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        mine: list[int] = []
        for _ in range(25):
            mine.append(tickets.next_id())
            mine.extend(tickets.next_ids(7))
        with lock:
            drawn.extend(mine)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(drawn) == 8 * 25 * 8 and len(set(drawn)) == len(drawn), "no value twice"
    assert all(v > 130 and (v - 100) % 10 == 0 for v in drawn)
    assert sorted(drawn) == list(range(140, 140 + 10 * len(drawn), 10)), "no gap on one node"
    # Another process with another stride is refused by the node's claim, before any value.
    other = backend.ids().generator(NAME, "tickets", start=100, stride=20)
    with pytest.raises(ConfigError, match="recorded the claim"):
        other.next_id()


def test_two_nodes_take_alternate_steps_and_parse_tells_which(stride_ids: ModuleType) -> None:
    nodes = [fakeredis.FakeRedis(server=fakeredis.FakeServer()) for _ in range(2)]
    ids = RedisIds(nodes)
    tickets: Any = ids.generator(NAME, "tickets", start=0, stride=5)
    values = [tickets.next_id() for _ in range(10)] + tickets.next_ids(6)
    assert len(set(values)) == len(values) and all(v % 5 == 0 for v in values)
    by_node = {tickets.parse(v).node_index for v in values}
    assert by_node == {0, 1}, "both nodes issued, each its own steps"
    assert tickets.parse(15).step == 3
    with pytest.raises(ValueError, match="multiple of stride"):
        tickets.parse(16)


def test_bad_options_name_the_option(stride_ids: ModuleType) -> None:
    ids = RedisIds.embedded()
    with pytest.raises(ConfigError, match="stride"):
        ids.generator(NAME, "tickets", stride=0)
    with pytest.raises(ConfigError, match="no strategy named 'stride'"):
        ids.generator("stride", "tickets")


def test_its_abilities_are_told_by_type(stride_ids: ModuleType) -> None:
    tickets = RedisIds.embedded().generator(NAME, "tickets")
    assert isinstance(tickets, Reseedable) and isinstance(tickets, Parseable)
    assert not isinstance(tickets, DayKeyed) and not isinstance(tickets, Pool)
    declared = registry.strategy(NAME)
    assert declared.has(Reseedable) and declared.has(Parseable) and not declared.has(DayKeyed)


# -- the ORM ---------------------------------------------------------------------------------------


def test_orm_inserts_rows_with_its_ids_on_sqlite(stride_ids: ModuleType, tmp_path: Path) -> None:
    ids = RedisIds.embedded()
    tickets = ids.generator(NAME, "orm_tickets", start=1000, stride=3)

    class Base(DeclarativeBase):
        pass

    class Ticket(Base):
        __tablename__ = "tickets"
        id: Mapped[int] = mapped_column(
            BigInteger, primary_key=True, autoincrement=False, default=redis_id(tickets)
        )
        title: Mapped[str] = mapped_column(String(40))

    engine = create_engine(f"sqlite:///{tmp_path / 'orm.sqlite3'}")
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        session.add_all([Ticket(title=f"t{i}") for i in range(5)])
        session.add(Ticket(title="one more"))
        session.commit()
        with engine.begin() as conn:
            conn.execute(insert(Ticket.__table__), [{"title": "core"}])  # type: ignore[arg-type]
        found = session.scalars(select(Ticket.id).order_by(Ticket.id)).all()
    assert list(found) == [1000 + 3 * i for i in range(7)]
    engine.dispose()


# -- the command line ------------------------------------------------------------------------------


def test_cli_next_and_parse_offer_it_with_its_declared_options(
    stride_ids: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["next", "tickets", "--strategy", NAME, "--start", "5", "--stride", "3", "-n", "4"]
    assert main(args) == 0
    assert capsys.readouterr().out.split() == ["5", "8", "11", "14"]
    assert main(["parse", "11", "--strategy", NAME, "--start", "5", "--stride", "3", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record == {
        "strategy": NAME,
        "recognised": False,
        "value": 11,
        "step": 2,
        "node_index": 0,
        "counter": 3,
    }
    assert main(["parse", "12", "--strategy", NAME, "--start", "5", "--stride", "3"]) == 1
    assert "multiple of stride=3" in capsys.readouterr().err
    # Its option belongs to it alone; --start is shared with the built-ins and read by each.
    assert main(["next", "users", "--stride", "3"]) == 1
    assert "--stride is not an option of a sequence generator" in capsys.readouterr().err
    assert main(["next", "users", "--start", "7"]) == 0
    assert capsys.readouterr().out.split() == ["7"]
    assert main(["next", "tickets", "--strategy", NAME, "--start", "x"]) == 1
    assert "--start: invalid literal" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["next", "--help"])
    assert "--stride STRIDE" in capsys.readouterr().out


def test_cli_next_on_a_real_redis_continues_from_its_claim(
    stride_ids: ModuleType, capsys: pytest.CaptureFixture[str], redis_prefix: str
) -> None:
    new = ["next", "t", "--strategy", NAME, "--start", "0", "--stride", "7", "-n", "2", "--new"]
    assert main(on_redis(redis_prefix, *new)) == 0
    assert main(on_redis(redis_prefix, "next", "t")) == 0, "strategy and options from the claim"
    assert capsys.readouterr().out.split() == ["0", "7", "14"]
    assert main(on_redis(redis_prefix, "next", "t", "--stride", "8")) == 1
    assert "stride=8 differs from the claim" in capsys.readouterr().err
    ids = RedisIds.from_url(REDIS_URL, prefix=redis_prefix)
    rebuilt = generator_from_claims(ids, "t", NAME)
    assert rebuilt is not None and (rebuilt.start, rebuilt.stride) == (0, 7)  # type: ignore[attr-defined]
    assert options_from_config(rebuilt.config) == (NAME, {"start": 0, "stride": 7})


def test_the_cli_loads_strategies_named_as_entry_points(
    stride_ids: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    point = EntryPoint(name=NAME, value="stride_ids", group=registry.ENTRY_POINT_GROUP)
    asked: list[str] = []

    def entry_points(*, group: str) -> list[EntryPoint]:
        asked.append(group)
        return [point]

    monkeypatch.setattr(registry, "entry_points", entry_points)
    assert registry.load_strategy_modules([]) == ["stride_ids"]
    assert asked == [registry.ENTRY_POINT_GROUP]


def test_a_strategy_module_that_fails_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(registry.MODULES_ENV, "no_such_strategies_module")
    assert main(["next", "x"]) == 2
    err = capsys.readouterr().err
    assert "cannot import the strategy module 'no_such_strategies_module'" in err
    assert len(err.strip().splitlines()) == 1


# -- maintenance and reseeding ---------------------------------------------------------------------


def test_maintenance_walks_it_and_applies_only_its_abilities(stride_ids: ModuleType) -> None:
    ids = RedisIds.embedded()
    ids.generator(NAME, "tickets").next_id()
    ids.date_prefixed("orders").next_id()
    summary = ids.maintenance().run_once()
    assert summary.ok, summary.errors
    assert [r.namespace for r in summary.counters] == ["orders"] and summary.pools == []


def test_reseed_raises_it_above_a_table(stride_ids: ModuleType, tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'reseed.sqlite3'}")
    table = Table("tickets", MetaData(), Column("id", BigInteger, primary_key=True))
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(table), [{"id": v} for v in (100, 110, 990, 7)])  # 7: not its value
    tickets = RedisIds.embedded().generator(NAME, "tickets", start=100, stride=10)
    report = reseed_from_table(tickets, engine, "tickets")
    assert (report.kind, report.rows, report.skipped) == ("counter", 4, 1)
    assert report.steps[0].table_max == 990 and report.steps[0].raised
    assert tickets.next_id() == 1000
    engine.dispose()


def test_cli_reseed_raises_it_from_a_table(
    stride_ids: ModuleType,
    capsys: pytest.CaptureFixture[str],
    redis_prefix: str,
    tmp_path: Path,
) -> None:
    db_url = f"sqlite:///{tmp_path / 'cli.sqlite3'}"
    engine = create_engine(db_url)
    table = Table("tickets", MetaData(), Column("id", BigInteger, primary_key=True))
    table.create(engine)
    with engine.begin() as conn:
        conn.execute(insert(table), [{"id": v} for v in (3, 33, 303)])
    engine.dispose()
    argv = ["reseed", "tickets", "--table", "tickets", "--db-url", db_url, "--strategy", NAME]
    assert main(on_redis(redis_prefix, *argv, "--start", "3", "--stride", "10")) == 0
    out = capsys.readouterr().out
    assert "max 303" in out and "counter raised" in out
    tickets = RedisIds.from_url(REDIS_URL, prefix=redis_prefix).generator(
        NAME, "tickets", start=3, stride=10
    )
    assert tickets.next_id() == 313
    assert main(on_redis(redis_prefix, *argv)) == 0, "the second time from the recorded claim"
    assert "counter already above it" in capsys.readouterr().out


# -- asyncio ---------------------------------------------------------------------------------------


def _async_ids(backend: Backend) -> AsyncRedisIds:
    if backend.name == "fake":
        return AsyncRedisIds.embedded(prefix=backend.prefix)
    if backend.url is not None:
        return AsyncRedisIds.from_url(backend.url, prefix=backend.prefix)
    assert backend.target is not None
    return AsyncRedisIds(
        AsyncRedisCluster.from_url(backend.target["cluster"], socket_timeout=5),
        prefix=backend.prefix,
    )


def test_the_asyncio_front_end_draws_it_from_many_tasks(
    stride_ids: ModuleType, backend: Backend
) -> None:
    async def run() -> list[Any]:
        ids = _async_ids(backend)
        try:
            tickets = ids.generator(NAME, "tickets", start=1, stride=2)
            assert tickets.parse(5).step == 2

            async def task() -> list[int]:
                out: list[int] = []
                for _ in range(5):
                    out.extend(await tickets.next_ids(4))
                    out.append(await tickets.next_id())
                return out

            return await asyncio.gather(*(task() for _ in range(16)))
        finally:
            await ids.aclose()

    values = [v for chunk in asyncio.run(run()) for v in chunk]
    assert len(values) == 16 * 25 and len(set(values)) == len(values)
    assert all(v % 2 == 1 for v in values)
    if backend.name != "fake":  # the sync front end continues the same counter
        sync = backend.ids().generator(NAME, "tickets", start=1, stride=2)
        assert sync.next_id() > max(values)
