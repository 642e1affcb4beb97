"""What a Redis refusal means: a configuration to fix, not a node that is down.

A server that refuses the library's ACL user a command or a key, refuses its password, or cannot
verify (or be verified over) TLS answers every later call the same way: marking the node down,
trying another node or retrying a lock until its timeout would only hide the cause. `refusal_of`
turns such an error into a [`ConfigError`][sa_redis_ids.ConfigError] that says what to fix:

- ``NOPERM`` for a command names it and the rule to grant (``+time``, ``+config|get``); inside a
  script, where Redis 6.2 and 7.0 do not name the command, the line Redis reports is looked up in
  the script's text (`script_commands` reads which commands each script calls from the ``.lua``
  files themselves, so the list cannot drift from them);
- a key outside the user's key patterns names ``prefix=``;
- a refused password (``WRONGPASS``, ``NOAUTH``), a TLS certificate that does not verify, and
  client-side caching on a server that cannot do it say what to change in the client's options.

The grant the messages point to is `GRANT`, written out on the operating page
("ACL and managed Redis").
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from functools import cache
from typing import Any

import redis
from redis.exceptions import AuthenticationWrongNumberOfArgsError, RedisClusterException

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.redis.scripts import script_source

GRANT = (
    "~{prefix}:* +@read +@write +@scripting +@transaction -@dangerous +time +info +ping +config|get"
)
"""The documented ACL rules of the library's user (``{prefix}``: the key prefix)."""

WHERE_DOCUMENTED = "see 'ACL and managed Redis' on the Operating Redis page"

_NAMED = re.compile(r"permissions to run the '([^']+)' command")
"""A refusal that names its command: ``NOPERM this user has no permissions to run the 'info'
command`` (Redis 7.0), ``User app has no permissions to run the 'time' command`` (Redis 7.2+,
Valkey; inside a script too)."""

_UNNAMED = "can't run this command or subcommand"
"""A script's refusal that does not name its command (Redis 6.2 and 7.0)."""

_KEYS = (
    "permissions to access one of the keys",  # Redis 6.2, 7.0
    "permissions to access a key",  # Redis 7.2+, Valkey
    "can't access at least one of the keys",  # inside a script, Redis 6.2, 7.0
)

_SCRIPT_LINE = re.compile(r"@user_script:\s*(\d+)")
"""Where in a script Redis says the error happened (the script's own line numbers)."""

_CALL = re.compile(r"redis\.call\(\s*(['\"])([A-Za-z]+)\1")
"""``redis.call('TIME'`` …: a command a script calls (``redis.pcall`` answers a refusal as a
value, which the script handles: it fails nothing)."""

_BUILT_CALL = re.compile(r"redis\.call\(\s*[^'\"\s]")
"""``redis.call(unpack_args(args))``: a command built in a table first."""

_TABLE_COMMAND = re.compile(r"\{\s*(['\"])([A-Z]+)\1")
"""``{'BITFIELD', key}``: a table that starts with a command's name (one built for
``redis.call``)."""

_COMMENT = re.compile(r"--.*")

_TLS_REASONS = (
    "CERTIFICATE_VERIFY_FAILED",
    "WRONG_VERSION_NUMBER",  # rediss:// to a port that does not speak TLS
    "ALERT_CERTIFICATE_REQUIRED",  # mutual TLS: the server wants a client certificate
    "ALERT_BAD_CERTIFICATE",
    "ALERT_UNKNOWN_CA",
    "ALERT_CERTIFICATE_UNKNOWN",
)

CLIENT_CACHING = "client-side caching"
"""In redis-py's refusal to cache on a server older than Redis 7.4."""


def _called(text: str) -> list[str]:
    """The commands ``text`` (Lua) calls with ``redis.call``, in order of first appearance."""
    code = _COMMENT.sub("", text)
    found = [match.group(2).upper() for match in _CALL.finditer(code)]
    if _BUILT_CALL.search(code):
        found += [match.group(2) for match in _TABLE_COMMAND.finditer(code)]
    return list(dict.fromkeys(found))


@cache
def script_commands(name: str) -> tuple[str, ...]:
    """The commands script ``name`` calls (with the ``common.lua`` helpers it uses), upper case,
    in order of first appearance: read from its text, once."""
    return tuple(_called(script_source(name)))


def command_at(source: str, line: int) -> tuple[str, ...]:
    """The command(s) a script's ``line`` (1-based, as Redis reports it) calls: one where the line
    names it, the commands the script builds in tables where the line calls a built one, none
    where the line holds no call."""
    lines = source.splitlines()
    if not 1 <= line <= len(lines):
        return ()
    code = _COMMENT.sub("", lines[line - 1])
    named = [match.group(2).upper() for match in _CALL.finditer(code)]
    if named:
        return tuple(dict.fromkeys(named))
    if _BUILT_CALL.search(code):
        return tuple(dict.fromkeys(m.group(2) for m in _TABLE_COMMAND.finditer(source)))
    return ()


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, and what a redis-py wrapper raised it for: a cluster client wraps the error of
    its first node in ``RedisClusterException``s (``Cluster mode is not enabled on this node``
    stands for any refusal of ``CLUSTER SLOTS``), a connection error wraps an ``ssl`` one."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        if not isinstance(current, (RedisClusterException, redis.ConnectionError)):
            return
        current = current.__cause__ or current.__context__


def _grant_rule(command: str) -> str:
    """The ACL rule that allows ``command`` (``config|get`` → ``+config|get``)."""
    return "+" + command.lower().replace(" ", "|")


def _shown(command: str) -> str:
    """``config|get`` as ``CONFIG GET``."""
    return command.upper().replace("|", " ")


def _prefix_of(key: Any) -> str | None:
    """The key prefix of a library key (``prefix:{namespace}:…``)."""
    if key is None:
        return None
    text = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
    prefix, sep, _ = text.partition(":{")
    return prefix if sep else None


def refusal_of(
    error: BaseException,
    *,
    script: str | None = None,
    source: str | None = None,
    key: Any = None,
    namespace: str | None = None,
    node: str | None = None,
) -> ConfigError | None:
    """The [`ConfigError`][sa_redis_ids.ConfigError] ``error`` stands for, or None when it is not
    a refusal (a node that is down, a script's own error).

    ``script``: the name of the script that was running (its commands are named when Redis does
    not say which one it refused); ``source``: the text sent (default: the script's own);
    ``key``: the first key of the call (its prefix is named when a key was refused).
    """
    where = {"namespace": namespace, "node": node}
    for found in _chain(error):
        message = _message(found, script=script, source=source, key=key)
        if message is not None:
            return ConfigError(message, **where)
    return None


def _message(
    error: BaseException, *, script: str | None, source: str | None, key: Any
) -> str | None:
    """What to fix, when ``error`` itself (not what it wraps) is a refusal; else None."""
    if isinstance(error, AuthenticationWrongNumberOfArgsError):  # a server older than Redis 6
        return (
            f"Redis refused the credentials ({error}): this server takes a password only, no "
            "user name; leave the user name out of the Redis URL (redis://:password@host:6379/0)"
        )
    if isinstance(error, redis.AuthenticationError):
        return (
            f"Redis refused the credentials ({error}): check the user name and password of the "
            "Redis URL (redis://user:password@host:6379/0) or the client's username= and "
            "password="
        )
    if isinstance(error, ssl.SSLError):
        return _tls_message(error)
    if isinstance(error, redis.ConnectionError) and CLIENT_CACHING in str(error):
        return (
            f"{error}: leave out cache_config= (client-side caching) for this server, or move it "
            "to Redis 7.4 or later"
        )
    if not isinstance(error, redis.ResponseError):
        return None
    text = str(error)
    if any(part in text for part in _KEYS):
        return _key_message(text, key)
    prefix = _prefix_of(key) or "<prefix>"
    named = _NAMED.search(text)
    if named is not None:
        command = named.group(1)
        calls = script is not None and _shown(command) in script_commands(script)
        return _command_message([command], script if calls else None, prefix, text)
    if _UNNAMED in text:
        commands: tuple[str, ...] = ()
        if script is not None:
            line = _SCRIPT_LINE.search(text)
            text_sent = source if source is not None else script_source(script)
            if line is not None:
                commands = command_at(text_sent, int(line.group(1)))
            if not commands:
                commands = tuple(_called(text_sent))
        return _command_message(list(commands), script, prefix, text)
    return None


def _command_message(commands: list[str], script: str | None, prefix: str, text: str) -> str:
    """What to grant when the ACL user may not run ``commands`` (the one named, or those
    ``script`` calls), with the server's answer ``text``."""
    grant = GRANT.format(prefix=prefix)
    where = f" in script {script!r}" if script is not None else ""
    if len(commands) == 1:
        (command,) = commands
        return (
            f"Redis refused the library's ACL user the {_shown(command)} command{where}: grant "
            f"{_grant_rule(command)} to that user (the library's grant is {grant}; "
            f"{WHERE_DOCUMENTED}) [{text}]"
        )
    rules = " ".join(_grant_rule(command) for command in commands)
    listed = ", ".join(commands) if commands else "a command"
    return (
        f"Redis refused the library's ACL user one of the commands{where} ({listed}): grant "
        f"them ({rules}) to that user (the library's grant is {grant}; {WHERE_DOCUMENTED}) "
        f"[{text}]"
    )


def _key_message(text: str, key: Any) -> str:
    """What to grant (or which ``prefix=`` to give) when the ACL user's key patterns leave
    out ``key``, the library's key the server refused."""
    prefix = _prefix_of(key)
    if prefix is None:
        return (
            "Redis refused the library's ACL user access to the library's keys (its key patterns "
            "do not cover them): grant ~<prefix>:* for the prefix= of RedisIds (default "
            f"sa_redis_ids), or give RedisIds a prefix= the patterns cover; {WHERE_DOCUMENTED} "
            f"[{text}]"
        )
    return (
        f"Redis refused the library's ACL user access to its keys under prefix={prefix!r} (its "
        f"key patterns do not cover them): grant ~{prefix}:* to that user, or give RedisIds a "
        f"prefix= its patterns cover (prefix='app' for ~app:*); {WHERE_DOCUMENTED} [{text}]"
    )


def _tls_message(error: ssl.SSLError) -> str | None:
    """What to fix for a TLS ``error`` of the connection (a certificate that does not verify,
    a server without TLS on the port); None for a TLS error that is no refusal."""
    reason = str(getattr(error, "reason", "") or "")
    verification = isinstance(error, ssl.SSLCertVerificationError)
    if not verification and not any(part in reason for part in _TLS_REASONS):
        return None
    if reason == "WRONG_VERSION_NUMBER":
        return (
            f"the Redis server does not speak TLS on this port ({error}): use a redis:// URL, or "
            "the server's TLS port"
        )
    if verification or reason == "CERTIFICATE_VERIFY_FAILED":
        return (
            f"the Redis server's TLS certificate did not verify ({error}): give the certificate "
            "of the authority that signed it (ssl_ca_certs=, or --tls-ca-cert on the command "
            "line), and connect by a host name the certificate names"
        )
    return (
        f"the Redis server refused this client's TLS certificate ({error}): give one it "
        "accepts (ssl_certfile= and ssl_keyfile=, or --tls-cert and --tls-key on the command "
        "line)"
    )
