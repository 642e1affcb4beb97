"""Time zones: ``tz=`` names load from the system's database or from the ``tzdata`` package, and a
name that cannot load says why: no such zone, not a zone name, or no time-zone database at all.

A machine without a time-zone database (Windows, slim containers) is simulated in-process: the
``zoneinfo`` search path is emptied and, where the test says so, ``tzdata`` cannot be imported.
``day_window.ZoneInfo`` is replaced by a subclass for the test, because a subclass has a cache of its
own that starts empty: zones loaded by other tests cannot answer for the missing database, and the
real ``ZoneInfo`` cache (whose instances other tests hold) is left alone.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import zoneinfo
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone

import pytest

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.generators import day_window
from sa_redis_ids.generators.day_window import DayClock, tz_database_found, zone


@pytest.fixture
def fresh_zoneinfo(monkeypatch: pytest.MonkeyPatch) -> type[zoneinfo.ZoneInfo]:
    """``day_window`` loads zones through a ``ZoneInfo`` subclass whose cache starts empty."""

    class FreshZoneInfo(zoneinfo.ZoneInfo):
        pass

    monkeypatch.setattr(day_window, "ZoneInfo", FreshZoneInfo)
    return FreshZoneInfo


@pytest.fixture
def no_system_zones(fresh_zoneinfo: type[zoneinfo.ZoneInfo]) -> Iterator[None]:
    """As on Windows: no directory of the search path holds a time-zone database."""
    saved = zoneinfo.TZPATH
    zoneinfo.reset_tzpath(to=[])
    try:
        yield
    finally:
        zoneinfo.reset_tzpath(to=saved)


@pytest.fixture
def no_tz_database(no_system_zones: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """No system database and no ``tzdata`` package: ``ZoneInfo`` raises ZoneInfoNotFoundError."""
    for name in [name for name in sys.modules if name == "tzdata" or name.startswith("tzdata.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "tzdata", None)
    monkeypatch.setitem(sys.modules, "tzdata.zoneinfo", None)


def test_tzdata_is_a_dependency() -> None:
    requirements = importlib.metadata.requires("sa_redis_ids") or []
    assert any(re.match(r"tzdata\b", r) and "extra ==" not in r for r in requirements)


@pytest.mark.parametrize("name", ["UTC", "Asia/Shanghai", "America/New_York"])
def test_the_tzdata_package_alone_serves_zones(
    no_system_zones: None, fresh_zoneinfo: type[zoneinfo.ZoneInfo], name: str
) -> None:
    assert zoneinfo.TZPATH == ()
    tz = zone(name)
    assert type(tz) is fresh_zoneinfo  # loaded now, through the empty cache
    assert tz.key == name
    assert tz_database_found()


def test_a_date_keyed_generator_counts_shanghai_days_from_tzdata(no_system_zones: None) -> None:
    gen = RedisIds.embedded().date_prefixed("orders", tz="Asia/Shanghai")
    value = gen.next_id()
    day = gen.parse(value).day
    now = datetime.now(timezone.utc).astimezone(zone("Asia/Shanghai"))
    # Redis time is this process's clock; a draw across local midnight may see either day.
    assert day in {now.date(), (now - timedelta(minutes=1)).date()}
    assert gen.clock.tz.utcoffset(datetime(2026, 1, 1)) == timedelta(hours=8)


@pytest.mark.parametrize("name", ["UTC", "Asia/Shanghai", "Mars/Olympus"])
def test_without_a_tz_database_the_message_says_to_install_tzdata(
    no_tz_database: None, name: str
) -> None:
    assert not tz_database_found()
    with pytest.raises(ConfigError) as caught:
        zone(name)
    message = str(caught.value)
    assert message.startswith(f"tz={name!r} cannot be loaded")
    assert "no time-zone database" in message
    assert "pip install tzdata" in message
    assert "is not an IANA time zone" not in message  # the name is not what is wrong
    assert isinstance(caught.value.__cause__, zoneinfo.ZoneInfoNotFoundError)


def test_without_a_tz_database_a_generator_refuses_utc_saying_why(no_tz_database: None) -> None:
    ids = RedisIds.embedded()
    with pytest.raises(ConfigError, match=r"tz='UTC' cannot be loaded.*pip install tzdata"):
        ids.date_prefixed("invoices")
    with pytest.raises(ConfigError, match=r"tz='Asia/Shanghai' cannot be loaded"):
        DayClock("Asia/Shanghai")


@pytest.mark.parametrize("name", ["Mars/Olympus", "Asia/Peking", "utc", "Europe/berlin"])
def test_an_unknown_name_says_no_such_zone_and_never_suggests_itself(
    fresh_zoneinfo: type[zoneinfo.ZoneInfo], name: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        zone(name)
    message = str(caught.value)
    assert message.startswith(f"tz={name!r} is not an IANA time zone: ")
    assert "has no zone of that name" in message
    assert "tzdata" not in message
    suggested = re.findall(r"'([^']+)'", message.split("such as", 1)[1])
    assert suggested
    assert name not in suggested
    assert "case-sensitive" in message


def test_the_name_utc_itself_is_suggested_for_other_names() -> None:
    with pytest.raises(ConfigError, match=r"such as 'UTC' or 'Europe/Berlin'"):
        zone("Mars/Olympus")


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("../etc/passwd", r"tz='../etc/passwd' is not an IANA time zone name \(.*\); use a name"),
        ("/usr/share/zoneinfo/UTC", r"is not an IANA time zone name \(.*absolute"),
        ("", r"tz='' is not an IANA time zone name"),
        (8, r"tz=8 must be a str naming an IANA time zone"),
        (None, r"tz=None must be a str"),
    ],
)
def test_what_is_not_a_zone_name_is_refused_as_such(name: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        zone(name)  # type: ignore[arg-type]


def test_zones_load_again_once_the_database_is_back(
    fresh_zoneinfo: type[zoneinfo.ZoneInfo],
) -> None:
    saved = zoneinfo.TZPATH
    modules = {
        name: sys.modules.pop(name) for name in list(sys.modules) if name.startswith("tzdata")
    }
    zoneinfo.reset_tzpath(to=[])
    sys.modules["tzdata"] = None  # type: ignore[assignment]
    try:
        with pytest.raises(ConfigError, match="pip install tzdata"):
            zone("Europe/Berlin")
    finally:
        del sys.modules["tzdata"]
        sys.modules.update(modules)
        zoneinfo.reset_tzpath(to=saved)
    assert zone("Europe/Berlin").utcoffset(datetime(2026, 7, 1)) == timedelta(hours=2)
    assert DayClock("Europe/Berlin").tz.key == "Europe/Berlin"
