"""``secret=``: daily codes and date-prefixed IDs whose digits hide the day's counter.

The permutation is a bijection of every counter range (enumerated for small widths, property
tests for wide ones); a whole small day issues every code exactly once, then raises
``SequenceExhausted``, on every backend, on several nodes and from several processes;
neighbouring calls are not close; ``parse`` gives the counter back; another key on a live
namespace is refused; floors, reseeding, claims and the command line read the counters with
the key.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import statistics
import threading
from collections.abc import Callable
from datetime import date, time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import Integer, create_engine, insert, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from sa_redis_ids import ConfigError, RedisIds, SequenceExhausted
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.cli import main
from sa_redis_ids.generators.permute import TABLE_MOST, CounterPermutation
from sa_redis_ids.maintenance.claims import generator_from_claims
from sa_redis_ids.maintenance.reseed import reseed_from_table
from sa_redis_ids.orm import redis_id_column
from sa_redis_ids.orm.floor import highest_used
from sa_redis_ids.secret import MIN_KEY_BYTES, Secret
from tests.conftest import Backend
from tests.support.days import shift_to_local
from tests.support.servers import RedisServer
from tests.support.uniqueness import GeneratorSpec, draw_in_processes, duplicates

StartServers = Callable[[int], list[RedisServer]]

KEY = "k-0123456789abcdef-test-key"
OTHER_KEY = b"another key of 32 bytes, random!"
DAY = date(2031, 3, 14)
"""The day the Redis clock is moved to: a fixed day gives a fixed permutation, and a day to
come keeps its counter key alive through the test."""
PAST = date(2025, 3, 14)
"""A day the command line takes for a plausible one without --strategy."""


def on_day(generator: Any, day: date = DAY) -> Any:
    """``generator`` with its Redis clock at 10:00 on ``day`` in its time zone."""
    shift_to_local(generator, day, time(10, 0))
    return generator


def drain(generator: Any, batch: int = 1) -> list[Any]:
    """``next_id()`` until the day is exhausted: every value, in the order issued; with
    ``batch``, ``next_ids(batch)`` while a whole batch is left, then ``next_id()``."""
    drawn: list[Any] = []
    while batch > 1:
        try:
            drawn += generator.next_ids(batch)
        except SequenceExhausted:
            break
    with pytest.raises(SequenceExhausted):
        while True:
            drawn.append(generator.next_id())
    return drawn


def close_pairs(values: list[int], within: int = 10) -> float:
    """The share of consecutive pairs at most ``within`` apart."""
    pairs = list(itertools.pairwise(values))
    return sum(1 for a, b in pairs if abs(a - b) <= within) / len(pairs)


def digits_of(codes: list[str], width: int) -> list[int]:
    return [int(code[-width:]) for code in codes]


# -- the permutation -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high"),
    [(1, 9), (0, 9), (1, 99), (0, 99), (1, 999), (1, 9999), (0, 9999), (1, 99999), (5, 7), (3, 3)],
)
def test_the_permutation_is_a_bijection_of_the_whole_range(low: int, high: int) -> None:
    day = CounterPermutation(Secret(KEY), "dc:orders", low, high).day(DAY)
    shown = [day.encrypt(counter) for counter in range(low, high + 1)]
    assert sorted(shown) == list(range(low, high + 1))
    assert [day.decrypt(each) for each in shown] == list(range(low, high + 1))


@settings(max_examples=200)
@given(width=st.integers(1, 18), low=st.integers(0, 1), data=st.data())
def test_every_width_round_trips_and_stays_in_range(width: int, low: int, data: Any) -> None:
    high = 10**width - 1
    permutation = CounterPermutation(Secret(KEY), "dp:invoices", low, high)
    assert permutation.half**2 >= permutation.size
    assert permutation.half**2 <= 4 * permutation.size, "cycle-walking needs few steps"
    day = permutation.day(data.draw(st.dates(date(2000, 1, 1), date(2099, 12, 31))))
    counter = data.draw(st.integers(low, high))
    shown = day.encrypt(counter)
    assert low <= shown <= high
    assert day.decrypt(shown) == counter


def test_the_round_function_is_hmac_sha256_of_the_round_and_the_half() -> None:
    permutation = CounterPermutation(Secret(KEY), "dc:orders", 1, 10**12 - 1)
    day = permutation.day(DAY)
    key = hmac.digest(
        Secret(KEY).permutation_key(),
        b"dc:orders\x001\x00999999999999\x00" + DAY.isoformat().encode(),
        "sha256",
    )
    for i, half in [(0, 0), (3, 777), (9, permutation.half - 1)]:
        mac = hmac.new(key, bytes((i,)) + half.to_bytes(8, "big"), hashlib.sha256).digest()
        assert day._round(i, half) == int.from_bytes(mac[:8], "big") % permutation.half


def test_the_kept_round_values_of_a_small_range_are_only_a_cache() -> None:
    tabled = CounterPermutation(Secret(KEY), "dc:orders", 1, 9999).day(DAY)
    hashed = CounterPermutation(Secret(KEY), "dc:orders", 1, 9999).day(DAY)
    hashed._tables = []  # no tables: every round hashes
    assert tabled.half <= TABLE_MOST
    shown = [tabled.encrypt(c) for c in range(1, 500)]
    assert shown == [hashed.encrypt(c) for c in range(1, 500)]
    assert [hashed.decrypt(each) for each in shown] == list(range(1, 500))


def test_threads_filling_a_days_tables_together_see_one_permutation() -> None:
    shared = CounterPermutation(Secret(KEY), "dc:orders", 1, 9999).day(DAY)
    hashed = CounterPermutation(Secret(KEY), "dc:orders", 1, 9999).day(DAY)
    hashed._tables = []
    found: dict[int, int] = {}
    barrier = threading.Barrier(8)

    def work(offset: int) -> None:
        barrier.wait()
        for counter in range(1 + offset, 10_000, 8):
            found[counter] = shared.encrypt(counter)

    pool = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    assert shared._full, "every round value computed: look-ups only from now on"
    assert found == {counter: hashed.encrypt(counter) for counter in range(1, 10_000)}


def test_the_day_the_namespace_and_the_key_each_change_the_permutation() -> None:
    def first_ten(secret: bytes | str, context: str, day: date) -> list[int]:
        found = CounterPermutation(Secret(secret), context, 1, 9999).day(day)
        return [found.encrypt(counter) for counter in range(1, 11)]

    base = first_ten(KEY, "dc:orders", DAY)
    assert base != list(range(1, 11))
    assert first_ten(KEY, "dc:orders", DAY) == base, "the same inputs, the same permutation"
    assert first_ten(KEY, "dc:orders", date(2031, 3, 15)) != base
    assert first_ten(KEY, "dc:refunds", DAY) != base
    assert first_ten(OTHER_KEY, "dc:orders", DAY) != base


# -- the key -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("short", r"secret is 5 bytes long; a key needs at least 16"),
        (b"", r"secret is 0 bytes long"),
        (12345678901234567890, r"secret must be bytes, a str or a Secret, not int"),
        (bytearray(b"x" * 32), r"not bytearray"),
    ],
)
def test_a_bad_key_is_a_config_error_at_construction(secret: Any, message: str) -> None:
    ids = RedisIds.embedded()
    with pytest.raises(ConfigError, match=message):
        ids.daily_code("orders", secret=secret)
    with pytest.raises(ConfigError, match=message):
        ids.date_prefixed("invoices", secret=secret)


def test_a_secret_never_shows_its_key_and_equals_its_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secret = Secret(KEY)
    assert KEY not in repr(secret) and secret.fingerprint in repr(secret)
    assert secret == Secret(KEY.encode()) == Secret.recorded(secret.fingerprint)
    assert secret != Secret(OTHER_KEY)
    assert len(KEY.encode()) >= MIN_KEY_BYTES
    monkeypatch.setenv("ORDER_CODE_KEY", KEY)
    assert Secret.from_env("ORDER_CODE_KEY") == secret
    monkeypatch.delenv("ORDER_CODE_KEY")
    with pytest.raises(ConfigError, match="ORDER_CODE_KEY holding the secret is not set"):
        Secret.from_env("ORDER_CODE_KEY")
    with pytest.raises(ConfigError, match="not a secret's fingerprint"):
        Secret.recorded("fp-xyz")
    with pytest.raises(ConfigError, match="needs the key itself"):
        Secret.recorded(secret.fingerprint).permutation_key()


def test_the_claim_records_the_fingerprint_and_plain_configs_do_not_change() -> None:
    ids = RedisIds.embedded()
    fingerprint = Secret(KEY).fingerprint
    assert ids.daily_code("plain").config == "daily_code:prefix=IS:digits=4:tz=Asia/Shanghai"
    assert ids.daily_code("hidden", secret=KEY).config.endswith(
        f":tz=Asia/Shanghai:secret={fingerprint}"
    )
    assert ids.date_prefixed("hidden", secret=Secret(KEY)).config.endswith(f":secret={fingerprint}")
    assert KEY not in repr(ids.daily_code("hidden", secret=KEY))


# -- a whole day, every backend ------------------------------------------------------------


def test_a_two_digit_day_issues_each_of_its_99_codes_once(backend: Backend) -> None:
    codes = on_day(backend.ids().daily_code("orders", digits=2, secret=KEY))
    drawn = drain(codes)
    assert sorted(drawn) == [f"IS20310314{c:02d}" for c in range(1, 100)]
    assert [codes.parse(code).counter for code in drawn] == list(range(1, 100))
    assert drawn[:5] != [f"IS20310314{c:02d}" for c in range(1, 6)]


def test_a_four_digit_day_issues_each_of_its_9999_codes_once_far_apart(backend: Backend) -> None:
    codes = on_day(backend.ids().daily_code("orders", digits=4, secret=KEY))
    drawn = drain(codes, batch=100)  # in the order issued, as single calls would be
    assert len(drawn) == 9999
    assert sorted(drawn) == [f"IS20310314{c:04d}" for c in range(1, 10_000)]
    assert [codes.parse(code).counter for code in drawn] == list(range(1, 10_000))
    shown = digits_of(drawn, 4)
    assert close_pairs(shown) < 0.01, "a random permutation puts about 0.2% within 10"
    order = list(range(1, 10_000))
    assert abs(statistics.correlation(order, shown)) < 0.05, "the order issued shows no trend"


def test_a_date_prefixed_day_issues_each_value_once_from_its_start(backend: Backend) -> None:
    for start, name in ((1, "from1"), (0, "from0")):
        invoices = on_day(backend.ids().date_prefixed(name, length=10, start=start, secret=KEY))
        drawn = drain(invoices)
        assert sorted(drawn) == [2031031400 + c for c in range(start, 100)]
        assert [invoices.parse(value).counter for value in drawn] == list(range(start, 100))
        plain = backend.ids().date_prefixed(f"plain{start}", length=10, start=start)
        assert invoices.max_value == plain.max_value, "a secret never moves a value past them"


def test_buffered_date_prefixed_values_hide_their_counters(backend: Backend) -> None:
    invoices = on_day(backend.ids().date_prefixed("buffered", length=13, block=100, secret=KEY))
    drawn = [invoices.next_id() for _ in range(350)]
    counters = [invoices.parse(value).counter for value in drawn]
    assert duplicates(drawn) == {}
    assert sorted(counters) == list(range(1, 351)), "blocks of counters 1..350 in some order"
    assert close_pairs(drawn) < 0.05


def test_three_nodes_issue_the_whole_day_once(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    ids = RedisIds.from_urls([s.url for s in servers])
    for digits in (2, 4):
        codes = on_day(ids.daily_code(f"orders{digits}", digits=digits, secret=KEY))
        drawn = drain(codes)
        every = [f"IS20310314{c:0{digits}d}" for c in range(1, 10**digits)]
        assert sorted(drawn) == every
        parts = [codes.parse(code) for code in drawn]
        assert {p.node_index for p in parts} == {0, 1, 2}
        assert all((p.counter - 1) % 3 == p.node_index for p in parts)


def _whole_day_from_processes(spec: GeneratorSpec) -> list[str]:
    """2 processes × 4 threads draw 9,600 codes of a 4-digit day, then this process the rest."""
    values = draw_in_processes(spec, processes=2, threads=4, per_thread=1200)
    assert len(values) == 9600
    return values + drain(spec.build())


def test_processes_and_threads_issue_the_whole_day_once(real_backend: Backend) -> None:
    spec = real_backend.spec("daily_code", "orders", digits=4, tz="UTC", secret=KEY)
    values = _whole_day_from_processes(spec)
    assert len(values) == len(set(values)) == 9999
    day = spec.build()
    assert sorted(day.parse(code).counter for code in values) == list(range(1, 10_000))


def test_processes_on_three_nodes_issue_the_whole_day_once(redis_servers: StartServers) -> None:
    servers = redis_servers(3)
    target = {"urls": [s.url for s in servers]}
    spec = GeneratorSpec(
        target, "dc", "daily_code", "orders", {"digits": 4, "tz": "UTC", "secret": KEY}, batch=3
    )
    values = _whole_day_from_processes(spec)
    assert len(values) == len(set(values)) == 9999


def test_asyncio_codes_hide_and_parse_their_counters() -> None:
    async def draw() -> list[str]:
        ids = AsyncRedisIds.embedded()
        codes = ids.daily_code("orders", secret=KEY)
        return [*(await codes.next_ids(5)), await codes.next_id()]

    drawn = asyncio.run(draw())
    codes = RedisIds.embedded().daily_code("orders", secret=KEY)
    assert [codes.parse(code).counter for code in drawn] == [1, 2, 3, 4, 5, 6]


# -- another key on a live namespace -------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [(KEY, OTHER_KEY), (None, KEY), (KEY, None)],
    ids=["another key", "a key added", "the key dropped"],
)
def test_another_key_on_a_live_namespace_is_refused_at_its_first_call(
    backend: Backend, before: Any, after: Any
) -> None:
    first = backend.ids().daily_code("orders", secret=before)
    issued = first.next_ids(3)
    later = backend.ids().daily_code("orders", secret=after)  # another process, another key
    with pytest.raises(ConfigError, match="daily_code:prefix=IS"):
        later.next_id()
    assert first.next_id() not in issued, "the namespace goes on with its own key"


# -- floors, reseeding, claims, the command line -------------------------------------------


def code_model(generator: Any, table: str) -> Any:
    """A fresh model whose ``code`` column is filled from ``generator`` (and is its floor)."""

    class Local(DeclarativeBase):
        pass

    class Order(Local):
        __tablename__ = table
        id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
        code: Mapped[str] = redis_id_column(generator, primary_key=False)

    return Order


def insert_codes(engine: Engine, model: Any, count: int) -> list[str]:
    with Session(engine, expire_on_commit=False) as session:
        rows = [model() for _ in range(count)]
        session.add_all(rows)
        session.commit()
        return [row.code for row in rows]


def test_a_column_floor_after_flushall_heals_above_the_highest_counter(
    backend: Backend, engine: Engine, create_tables: Any
) -> None:
    first = on_day(backend.ids().daily_code("orders", secret=KEY))
    model = code_model(first, "secret_orders")
    create_tables(model.metadata)
    before = insert_codes(engine, model, 300)
    highest = max(first.parse(code).counter for code in before)
    backend.forget()  # what FLUSHALL does to the test's keys
    again = on_day(backend.ids().daily_code("orders", secret=KEY))  # a new process
    after = insert_codes(engine, code_model(again, "secret_orders"), 300)
    assert not set(before) & set(after)
    assert min(again.parse(code).counter for code in after) > highest
    with engine.connect() as connection:
        stored = list(connection.scalars(select(model.code)))
    assert len(stored) == len(set(stored)) == 600


def test_the_floor_is_the_highest_counter_not_the_highest_code(tmp_path: Any) -> None:
    codes = RedisIds.embedded().daily_code("orders", secret=KEY)
    model = code_model(codes, "floor_orders")
    engine = create_engine(f"sqlite:///{tmp_path / 'floor.sqlite3'}")
    model.metadata.create_all(engine)
    stored = [codes.compose(DAY, counter) for counter in range(1, 51)]
    with engine.begin() as connection:
        connection.execute(insert(model), [{"code": code} for code in stored])
    with engine.connect() as connection:
        assert highest_used(connection, codes, model.code, DAY) == 50
    assert codes.parse(max(stored)).counter != 50, "the highest code hides another counter"
    assert codes.highest_counter(DAY, [*stored, "IS203103140000", "SO203103140001", 7]) == 50


def test_reseeding_raises_each_day_to_its_highest_counter(backend: Backend, tmp_path: Any) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'reseed.sqlite3'}")
    codes = on_day(backend.ids().daily_code("orders", secret=KEY))
    model = code_model(codes, "reseed_orders")
    model.metadata.create_all(engine)
    issued = codes.next_ids(40)
    with engine.begin() as connection:
        connection.execute(insert(model), [{"code": code} for code in issued])
    backend.forget()
    fresh = on_day(backend.ids().daily_code("orders", secret=KEY))
    report = reseed_from_table(fresh, engine, "reseed_orders", "code")
    assert [(step.day, step.table_max) for step in report.steps] == [(DAY, issued[-1])]
    assert fresh.parse(fresh.next_id()).counter == 41
    keyless = backend.ids().daily_code("orders", secret=Secret.recorded(Secret(KEY).fingerprint))
    with pytest.raises(ConfigError, match="reading them needs the key"):
        reseed_from_table(keyless, engine, "reseed_orders", "code")


def test_a_generator_rebuilt_from_claims_purges_without_the_key_and_issues_with_it(
    backend: Backend,
) -> None:
    ids = backend.ids()
    on_day(ids.daily_code("orders", secret=KEY)).next_ids(5)
    tool = backend.ids()
    rebuilt = generator_from_claims(tool, "orders", "daily_code")
    assert rebuilt is not None and rebuilt.config == ids.daily_code("orders", secret=KEY).config
    assert rebuilt.purge_before(date(2031, 3, 1)) == []
    with pytest.raises(ConfigError, match="knows only the fingerprint"):
        rebuilt.next_id()
    keyed = generator_from_claims(backend.ids(), "orders", "daily_code", {"secret": Secret(KEY)})
    assert keyed is not None
    assert keyed.parse(on_day(keyed).next_id()).counter == 6, "the refused call took nothing"
    with pytest.raises(ConfigError, match="differs from the claim"):
        generator_from_claims(backend.ids(), "orders", "daily_code", {"secret": Secret(OTHER_KEY)})


def test_the_command_line_parses_with_the_key_from_the_environment(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    codes = RedisIds.embedded().daily_code("orders", secret=KEY)
    code = codes.compose(PAST, 42)
    monkeypatch.setenv("ORDER_CODE_KEY", KEY)
    args = ["parse", code, "--secret-env", "ORDER_CODE_KEY"]
    assert main([*args, "--namespace", "orders", "--json"]) == 0
    assert '"counter": 42' in capsys.readouterr().out
    assert main(args) == 1
    assert "--secret-env needs --namespace" in capsys.readouterr().err
    invoices = RedisIds.embedded().date_prefixed("invoices", secret=KEY)
    value = str(invoices.compose(PAST, 7))
    assert main(["parse", value, *args[2:], "--namespace", "invoices", "--json"]) == 0
    assert '"counter": 7' in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["parse", code, "--secret-env", "NOT_SET_ANYWHERE", "--namespace", "orders"])
    assert "NOT_SET_ANYWHERE holding the secret is not set" in capsys.readouterr().err


def test_the_benchmark_times_a_secret_code_beside_a_plain_one() -> None:
    """What ``benchmarks.secret_codes`` measures (speed is never asserted here)."""
    from benchmarks import ids as bench
    from benchmarks import secret_codes

    measured = secret_codes.measure(RedisIds.embedded(), calls=20, budget_s=5.0)
    assert [digits for digits, _, _ in measured] == list(secret_codes.DIGITS)
    assert all(mine.calls == plain.calls == 20 for _, mine, plain in measured)
    ping = measured[0][2]
    rows = bench._secret_rows(RedisIds.embedded(), bench.Settings(calls=20), ping)
    assert [row.strategy for row in rows] == [secret_codes.name(d) for d in secret_codes.DIGITS]
    assert all(row.extra["vs_plain"] > 0 and "plain daily_code" in row.note for row in rows)
    (target,) = secret_codes.targets(rows)
    assert target["target"].startswith("daily_code next_id() with secret= (4 digits) <= 1.1×")
    assert target["met"] == (target["measured"] <= secret_codes.SECRET_TARGET)
