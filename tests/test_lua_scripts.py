"""Lua sources are ASCII: redis-py encodes a script with the client's ``encoding``, so a script with
one non-ASCII character (a comment's ellipsis is enough) could not be sent by a ``latin-1`` or
``ascii`` client. Every shipped script is checked, the strategies whose scripts hold long comments
run on such clients on every backend, and a user's script that is not ASCII is refused by name.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
from redis.cluster import RedisCluster

from sa_redis_ids import ConfigError, RedisIds
from sa_redis_ids.redis.scripts import script_source
from tests.conftest import Backend

ROOT = Path(__file__).resolve().parent.parent
LUA_FILES = sorted(
    path
    for folder in ("sa_redis_ids", "examples")
    for path in (ROOT / folder).rglob("*.lua")
    if ".venv" not in path.parts
)


def test_the_repository_ships_lua_files() -> None:
    assert any(path.parent.name == "lua" and path.stem == "common" for path in LUA_FILES)
    assert any("examples" in path.parts for path in LUA_FILES)


@pytest.mark.parametrize("path", LUA_FILES, ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_lua_file_is_ascii(path: Path) -> None:
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        assert line.isascii(), f"{path.relative_to(ROOT)} line {number}: {line!r}"


def _client_with_encoding(backend: Backend, encoding: str) -> Any:
    """A client of the same Redis as ``backend.client`` that encodes text with ``encoding``."""
    if backend.name == "fake":
        server = backend.client.connection_pool.connection_kwargs["server"]
        return fakeredis.FakeRedis(server=server, encoding=encoding)
    if backend.name != "cluster":  # one server: redis, valkey
        kwargs = backend.client.connection_pool.connection_kwargs
        return redis.Redis(
            host=kwargs["host"], port=kwargs["port"], encoding=encoding, socket_timeout=5
        )
    url = backend.target["cluster"] if backend.target else ""
    return RedisCluster.from_url(url, encoding=encoding, socket_timeout=5)


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_strategies_with_commented_scripts_run_on_clients_of_any_encoding(
    backend: Backend, encoding: str
) -> None:
    client = _client_with_encoding(backend, encoding)
    ids = RedisIds(client, prefix=backend.prefix)
    try:
        invoices = ids.date_prefixed("enc_dated", length=12)
        dated = invoices.next_ids(3)
        codes = ids.daily_code("enc_codes", code_prefix="IS", digits=4).next_ids(2)
        short = ids.short_id("enc_short", pool_size=1000).next_ids(5)
        purged = invoices.purge_before(invoices.parse(dated[0]).day)  # dated_purge.lua
    finally:
        client.close()
    assert len(set(dated)) == 3
    assert len(set(codes)) == 2
    assert len(set(short)) == 5
    assert purged == []


def test_a_users_script_that_is_not_ascii_is_refused_naming_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = f"user_lua_{uuid.uuid4().hex[:8]}"
    (tmp_path / package / "lua").mkdir(parents=True)
    (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / package / "lua" / "counter.lua").write_text(
        "-- KEYS[1] the counter\n-- ARGV[1…] the steps\nreturn redis.call('INCR', KEYS[1])\n",
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=rf"{package}:lua/counter.*line 2.*'…'.*ASCII"):
        script_source(f"{package}:lua/counter")
