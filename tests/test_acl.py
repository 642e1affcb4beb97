"""The library as a Redis ACL user with exactly the grant the operating page documents.

The ACL lines are read from the page ("ACL and managed Redis") and run as written, with the
substitutions the page asks of a reader: a user name and password of one's own, and one's key
prefix. Every strategy, the ORM, the lock, maintenance and the command line then run as that
user on a real Redis, a Valkey server and the real Cluster. Refusals are configuration errors
that name what to grant or fix: the natural least-privilege grant (no ``+time``), a key prefix
outside the user's pattern, a wrong password, a cluster user without ``cluster|slots``.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.exceptions import AuthenticationWrongNumberOfArgsError

from sa_redis_ids import ConfigError, RedisIds, Redlock
from sa_redis_ids.asyncio import AsyncRedisIds
from sa_redis_ids.cli import main
from sa_redis_ids.redis.refusals import GRANT, refusal_of, script_commands
from sa_redis_ids.redis.scripts import INCLUDE, script_source
from tests.support.orm import draw_lock_and_maintain, each_strategy, insert_orders
from tests.support.services import REDIS_URL

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "operating-redis.md"
PASSWORD = "test-" + secrets.token_hex(8)


def documented_lines() -> list[list[str]]:
    """The ``ACL SETUSER`` lines of the page's "ACL and managed Redis" section, split as a shell
    would (the base grant first, then the additions for features)."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## ACL and managed Redis\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```text\n(.*?)```", section, re.S)
    lines = [line for block in blocks for line in block.splitlines()]
    found = [shlex.split(line) for line in lines if line.startswith("ACL SETUSER ")]
    assert len(found) >= 3, "the page lost its ACL lines"
    return found


def base_lines() -> int:
    """How many lines the base grant takes: the page's first ``text`` block."""
    text = PAGE.read_text(encoding="utf-8")
    section = text.split("## ACL and managed Redis\n", 1)[1]
    first = re.search(r"```text\n(.*?)```", section, re.S)
    assert first is not None, "the page lost its base grant"
    return sum(line.startswith("ACL SETUSER ") for line in first.group(1).splitlines())


def documented(first_rule: str | None = None) -> list[str]:
    """The rules of the documented line whose first rule is ``first_rule`` (None: the base
    grant, its lines joined in order), after ``ACL SETUSER <user>``."""
    lines = documented_lines()
    base = base_lines()
    if first_rule is None:
        return [rule for line in lines[:base] for rule in line[3:]]
    return next(line[3:] for line in lines[base:] if line[3] == first_rule)


@dataclass
class AclTarget:
    """A real Redis deployment with an ACL user of this test (deleted afterwards)."""

    name: str
    admins: list[redis.Redis]
    """A client per server with every permission (the cluster: one per node)."""
    address: str
    """``host:port/db`` (a cluster: one node's ``host:port``)."""
    prefix: str = field(default_factory=lambda: "acl" + secrets.token_hex(5))
    user: str = field(default_factory=lambda: "ids_test_" + secrets.token_hex(5))

    @property
    def cluster(self) -> bool:
        return self.name == "cluster"

    def url(self, password: str = PASSWORD) -> str:
        return f"redis://{self.user}:{password}@{self.address}"

    def grant(self, rules: list[str]) -> None:
        """``ACL SETUSER`` the test's user with ``rules``, rewritten as the page asks a reader:
        the page's user name, password and key prefix become the test's."""
        own = [
            f">{PASSWORD}"
            if rule.startswith(">")
            else f"~{self.prefix}:*"
            if rule == "~sa_redis_ids:*"
            else rule
            for rule in rules
        ]
        for admin in self.admins:
            admin.execute_command("ACL", "SETUSER", self.user, *own)

    def grant_documented(self, *features: str) -> None:
        """The page's base grant, its Cluster line on a cluster, and the lines of ``features``
        (their first rules: ``+wait``)."""
        self.grant(documented())
        for first in [*features, *(["+cluster|slots"] if self.cluster else [])]:
            self.grant(documented(first))

    def ids(self, **options: Any) -> RedisIds:
        return RedisIds.from_url(self.url(), prefix=self.prefix, cluster=self.cluster, **options)

    def cli(self, *args: str) -> list[str]:
        """Command-line arguments naming this target as the test's user."""
        return [
            *args,
            "--redis-url",
            self.url(),
            "--prefix",
            self.prefix,
            *(["--cluster"] if self.cluster else []),
        ]

    def cleanup(self) -> None:
        for admin in self.admins:
            admin.execute_command("ACL", "DELUSER", self.user)
            for key in admin.scan_iter(match=f"{self.prefix}:*"):
                admin.delete(key)


def _target(request: pytest.FixtureRequest, name: str) -> Iterator[AclTarget]:
    if name == "redis":
        request.getfixturevalue("real_redis")  # skips (or fails) without the server
        address = REDIS_URL.partition("://")[2]
        admins = [redis.Redis.from_url(REDIS_URL, socket_timeout=5)]
    elif name == "valkey":
        server = request.getfixturevalue("valkey_process")
        address, admins = f"127.0.0.1:{server.port}/0", [server.client()]
    else:
        cluster = request.getfixturevalue("redis_cluster")
        address = f"127.0.0.1:{cluster.servers[0].port}"
        admins = [server.client() for server in cluster.servers]
    target = AclTarget(name, admins, address)
    try:
        yield target
    finally:
        target.cleanup()
        for admin in admins:
            admin.close()


@pytest.fixture(params=["redis", "valkey", "cluster"])
def acl_target(request: pytest.FixtureRequest) -> Iterator[AclTarget]:
    yield from _target(request, request.param)


@pytest.fixture(params=["redis", "cluster"])
def real_target(request: pytest.FixtureRequest) -> Iterator[AclTarget]:
    """A real Redis server and the real Cluster (Valkey answers as Redis does here)."""
    yield from _target(request, request.param)


@pytest.fixture
def redis_target(request: pytest.FixtureRequest) -> Iterator[AclTarget]:
    yield from _target(request, "redis")


@pytest.fixture
def cluster_target(request: pytest.FixtureRequest) -> Iterator[AclTarget]:
    yield from _target(request, "cluster")


FACTORIES = each_strategy("acl", "AC")
NEEDS_TIME = {"date_prefixed", "snowflake", "daily_code"}


# -- the documented grant --------------------------------------------------------------------


def test_the_page_documents_the_grant_the_errors_name() -> None:
    rules = documented()
    assert rules[:3] == ["reset", "on", ">change-me"]
    assert rules[3:] == GRANT.format(prefix="sa_redis_ids").split()
    assert documented("+wait") == ["+wait"]
    assert documented("+cluster|slots") == ["+cluster|slots", "+command"]


def test_every_strategy_the_lock_and_maintenance_work_with_the_documented_grant(
    acl_target: AclTarget,
) -> None:
    acl_target.grant_documented()
    ids = acl_target.ids(strict=True)  # strict: nothing the library relies on is missing
    try:
        draw_lock_and_maintain(ids, FACTORIES)
    finally:
        ids.close()


def test_the_orm_inserts_with_the_documented_grant(real_target: AclTarget, tmp_path: Path) -> None:
    real_target.grant_documented()
    ids = real_target.ids()
    insert_orders(ids, str(tmp_path / "orm.db"), "acl")


def test_the_command_line_works_with_the_documented_grant(
    real_target: AclTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    real_target.grant_documented()
    code = ["--strategy", "daily_code", "--code-prefix", "CL"]
    assert main(real_target.cli("next", "acl_cli", *code, "-n", "3", "--new")) == 0
    assert main(real_target.cli("next", "acl_cli", "-n", "2")) == 0
    assert main(real_target.cli("status")) == 0
    assert main(real_target.cli("claims", "show", "acl_cli")) == 0
    assert main(real_target.cli("maintain", "--once", "--daily-code", "acl_cli")) == 0
    captured = capsys.readouterr()
    assert len(set(re.findall(r"CL\d{12}", captured.out))) >= 5, captured.out
    assert "acl_cli" in captured.out
    assert "error" not in captured.err, captured.err


def test_replicas_need_the_documented_wait_rule(redis_target: AclTarget) -> None:
    redis_target.grant_documented()
    with pytest.raises(ConfigError, match=r"\+wait"):
        redis_target.ids(replicas=1, replica_timeout=0.05).sequence("acl_wait").next_id()
    redis_target.grant_documented("+wait")
    ids = redis_target.ids(replicas=1, replica_timeout=0.05)
    try:
        # WAIT is allowed now; this server has no replica to acknowledge the write
        with pytest.raises(Exception, match="acknowledged") as raised:
            ids.sequence("acl_wait").next_id()
        assert not isinstance(raised.value, ConfigError)
    finally:
        ids.close()


# -- refusals that name what to grant -----------------------------------------------------------

NATURAL = [
    *["reset", "on", f">{PASSWORD}", "~sa_redis_ids:*"],
    *["+@read", "+@write", "+@scripting", "+@transaction", "-@dangerous"],
]
"""The grant a cautious operator writes first: no ``+time`` (nor ``INFO``, ``CONFIG``)."""


def test_the_natural_least_privilege_grant_names_time(
    acl_target: AclTarget, caplog: pytest.LogCaptureFixture
) -> None:
    acl_target.grant(NATURAL + (documented("+cluster|slots") if acl_target.cluster else []))
    ids = acl_target.ids()
    try:
        for name, make in FACTORIES.items():
            generator = make(ids)
            if name not in NEEDS_TIME:
                assert len(set(generator.next_ids(20))) == 20
                continue
            with pytest.raises(ConfigError) as raised:
                generator.next_id()
            message = str(raised.value)
            assert "the TIME command" in message and "grant +time" in message, message
            assert "ACL and managed Redis" in message
        assert all(node.down_until == 0.0 for node in ids.nodes.nodes)  # not an outage
    finally:
        ids.close()


def test_the_command_line_says_which_rule_to_grant(
    redis_target: AclTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    redis_target.grant(NATURAL)
    argv = redis_target.cli("next", "acl_cli_time", "--strategy", "snowflake", "--new")
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the TIME command" in err and "grant +time" in err, err


def test_a_key_prefix_outside_the_users_pattern_names_prefix(acl_target: AclTarget) -> None:
    acl_target.grant_documented()
    ids = RedisIds.from_url(
        acl_target.url(), prefix="elsewhere", cluster=acl_target.cluster, strict=False
    )
    try:
        with pytest.raises(ConfigError) as raised:
            ids.sequence("acl_keys").next_id()
        message = str(raised.value)
        assert "prefix='elsewhere'" in message and "~elsewhere:*" in message, message
        assert ids.nodes.nodes[0].down_until == 0.0
    finally:
        ids.close()


def test_a_cluster_user_without_cluster_slots_is_told_to_grant_it(
    cluster_target: AclTarget,
) -> None:
    cluster_target.grant(documented())  # the base grant alone
    with pytest.raises(ConfigError) as raised:
        cluster_target.ids()
    message = str(raised.value)
    assert "CLUSTER SLOTS" in message and "+cluster|slots" in message, message
    assert "Cluster mode is not enabled" not in message

    async def draw() -> None:  # the asyncio cluster client reads the slot map at first use
        aids = AsyncRedisIds.from_url(
            cluster_target.url(), prefix=cluster_target.prefix, cluster=True
        )
        try:
            await aids.sequence("acl_slots").next_id()
        finally:
            await aids.aclose()

    with pytest.raises(ConfigError, match=r"CLUSTER SLOTS command: grant \+cluster\|slots"):
        asyncio.run(draw())
    cluster_target.grant(["+cluster|slots"])
    with pytest.raises(ConfigError, match=r"the COMMAND command: grant \+command"):
        cluster_target.ids()
    with pytest.raises(ConfigError, match="refused the credentials"):
        RedisIds.from_url(cluster_target.url(password="wrong"), cluster=True)


def test_a_wrong_password_is_a_config_error_and_no_outage(
    redis_target: AclTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    redis_target.grant_documented()
    url = redis_target.url(password="wrong")
    ids = RedisIds.from_url(url, prefix=redis_target.prefix)
    try:
        with pytest.raises(ConfigError, match="refused the credentials"):
            ids.sequence("acl_auth").next_id()
        assert ids.nodes.nodes[0].down_until == 0.0
        sleeps: list[float] = []  # a Redlock that retried would sleep between attempts
        with pytest.raises(ConfigError, match="refused the credentials"):
            Redlock(ids.nodes, "acl-auth", timeout=30, sleep=sleeps.append).acquire()
        assert sleeps == []
    finally:
        ids.close()

    async def draw() -> None:
        aids = AsyncRedisIds.from_url(url, prefix=redis_target.prefix)
        try:
            await aids.sequence("acl_auth").next_id()
        finally:
            await aids.aclose()

    with pytest.raises(ConfigError, match="refused the credentials"):
        asyncio.run(draw())

    capsys.readouterr()
    assert main(["status", "--redis-url", url, "--prefix", redis_target.prefix]) == 1
    err = capsys.readouterr().err
    assert "refused the credentials" in err and "did not answer" not in err, err


def test_status_does_not_call_a_node_silent_when_only_ping_is_denied(
    redis_target: AclTarget, capsys: pytest.CaptureFixture[str]
) -> None:
    redis_target.grant([rule for rule in documented() if rule != "+ping"] + ["-ping"])
    assert main(redis_target.cli("status")) == 0
    captured = capsys.readouterr()
    assert "did not answer" not in captured.err and "DOWN" not in captured.out, captured


def test_client_side_caching_on_a_server_without_it_is_a_config_error(
    real_redis: redis.Redis,
) -> None:
    from redis.cache import CacheConfig

    if tuple(int(part) for part in real_redis.info("server")["redis_version"].split(".")[:2]) >= (
        7,
        4,
    ):
        pytest.skip("this Redis can cache on the client side")
    ids = RedisIds.from_url(REDIS_URL, protocol=3, cache_config=CacheConfig())
    try:
        with pytest.raises(ConfigError, match="cache_config"):
            ids.sequence("acl_cache").next_id()
        assert ids.nodes.nodes[0].down_until == 0.0
    finally:
        ids.close()


# -- the commands each script calls ----------------------------------------------------------


def test_the_commands_of_every_script_are_read_from_the_scripts(real_redis: redis.Redis) -> None:
    files = sorted((ROOT / "sa_redis_ids" / "lua").glob("*.lua"))
    included = {
        line[len(INCLUDE) :].strip()
        for path in files
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith(INCLUDE)
    }
    names = [path.stem for path in files if path.stem not in {"common", *included}]
    found = {name: script_commands(name) for name in names}
    assert all(found.values()), found
    for name in ("dated_take", "dated_fast", "snowflake"):
        assert "TIME" in found[name], (name, found[name])
    assert "BITFIELD" in found["short_id"]  # a command built in a table for redis.call
    assert "INFO" not in {command for commands in found.values() for command in commands}
    every = sorted({command for commands in found.values() for command in commands})
    known = real_redis.execute_command("COMMAND", "INFO", *every)
    assert len(known) == len(every) and all(known), dict(zip(every, known, strict=True))


SCRIPT_REFUSALS = {
    "Redis 6.2": "ERR Error running script (call to f_{sha}): @user_script:{line}: @user_script: "
    "{line}: The user executing the script can't run this command or subcommand ",
    "Redis 7.0": "The user executing the script can't run this command or subcommand script: "
    "{sha}, on @user_script:{line}.",
    "Redis 7.2, Valkey": "ACL failure in script: User app has no permissions to run the 'time' "
    "command script: {sha}, on @user_script:{line}.",
}
"""How each server version words a script's refused ``TIME`` (the suite's servers give two)."""


@pytest.mark.parametrize("version", SCRIPT_REFUSALS)
def test_a_scripts_refused_command_is_named_in_every_servers_wording(version: str) -> None:
    source = script_source("snowflake")
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "'TIME'" in text)
    reply = SCRIPT_REFUSALS[version].format(sha="0" * 40, line=line)
    refusal = refusal_of(redis.ResponseError(reply), script="snowflake", key="ids:{orders}:sf")
    assert refusal is not None
    assert "the TIME command in script 'snowflake': grant +time" in str(refusal)
    assert "~ids:* +@read" in str(refusal)  # the grant, with the key prefix in use


def test_a_user_name_for_a_server_without_users_says_to_leave_it_out() -> None:
    reply = AuthenticationWrongNumberOfArgsError("wrong number of arguments for 'auth' command")
    refusal = refusal_of(reply, node="old:6379/0")
    assert refusal is not None and "leave the user name out" in str(refusal)
    assert refusal_of(redis.ConnectionError("Error 111 connecting")) is None  # down, not refused
