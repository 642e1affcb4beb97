"""Lua scripts: loading, registration, and the one place where script codes become exceptions.

Scripts are ``.lua`` files shipped in ``sa_redis_ids/lua``; the helpers of ``common.lua`` each one
calls are prepended to it (a script runs its whole text at every call). They
are registered with redis-py's ``register_script`` once per client (``Script`` does EVALSHA and
reloads on NOSCRIPT). A script answers a table ``{status, payload...}``; an issuing script answers
its success as one space-separated string of the payload instead (``ok_reply`` in ``common.lua``),
which `check_reply` reads the same way.

Logging: a snowflake script that finds the Redis clock further behind than its tolerance logs a
WARNING on the ``sa_redis_ids.clock`` logger (namespace, node and how many ms) as it raises
[`ClockMovedBackwards`][sa_redis_ids.ClockMovedBackwards].
"""

from __future__ import annotations

import logging
import re
from functools import cache
from importlib import resources
from typing import Any, NoReturn, Protocol

from sa_redis_ids.errors import (
    ClockMovedBackwards,
    ConfigError,
    DayMissing,
    DayPurged,
    LockHeld,
    SaRedisIdsError,
    ScriptError,
    SequenceExhausted,
)


class Named(Protocol):
    """What error mapping needs of a node: its name (a `Node`)."""

    @property
    def name(self) -> str: ...


clock_log = logging.getLogger("sa_redis_ids.clock")
"""The Redis clock stepped back further than a snowflake generator tolerates (WARNING)."""

STATUS_OK = 0
STATUS_EXHAUSTED = 1
STATUS_CLAIM_MISMATCH = 2
STATUS_CLOCK_BACKWARDS = 3
STATUS_DAY_PURGED = 4
STATUS_OUT_OF_WINDOW = 5
STATUS_NEEDS_FLOOR = 6
STATUS_DAY_MISSING = 7
STATUS_LOCK_HELD = 20  # Redlock codes: 20–29
STATUS_BEFORE_EPOCH = 30  # Snowflake codes: 30–39

UNJUDGED = " unjudged"
"""The suffix of a node claim recorded by a call that re-created a lost counter before it could
read the generator's floor (``UNJUDGED`` in ``common.lua``): still this generator's claim."""


class OutOfWindow(SaRedisIdsError):
    """Internal: the Redis clock is outside the day window the caller passed; ``now_ms`` says where."""

    def __init__(self, now_ms: int, **kw: Any):
        self.now_ms = now_ms
        super().__init__(f"Redis time {now_ms} ms is outside the day window", **kw)


class NeedsFloor(SaRedisIdsError):
    """Internal: the state is missing or below the guard and the generator's floor must be read
    before anything is issued; ``detail`` is the script's payload as text (e.g. the day label)."""

    def __init__(self, detail: list[str], **kw: Any):
        self.detail = detail
        super().__init__(f"the floor must be read first ({', '.join(detail)})", **kw)


INCLUDE = "--! include "
"""A line ``--! include NAME`` in a script is replaced by the script file ``NAME`` (once)."""

COMMON = "--! common"
"""A line ``--! common`` in a script ends its fast path: the ``common.lua`` definitions the fast
path uses go before it, the others at this line (without the line, all go first). Lua creates a
function each time its definition runs, so a fast path that returns early creates only those it
calls."""


def _script_file(name: str) -> str:
    """The text of script ``name``: ``"sequence"`` is the library's ``lua/sequence.lua``;
    ``"package:path/to/file"`` is ``path/to/file.lua`` inside the importable ``package`` (a user's
    own strategy ships its Lua in its own package this way)."""
    package, _, path = name.rpartition(":")
    try:
        if package:
            resource = resources.files(package).joinpath(f"{path}.lua")
        else:
            resource = resources.files("sa_redis_ids").joinpath(f"lua/{path}.lua")
        text = resource.read_text(encoding="utf-8")
    except (ModuleNotFoundError, FileNotFoundError, NotADirectoryError, TypeError) as exc:
        raise ConfigError(
            f"no Lua script {name!r}: expected a library script name or 'package:path' naming "
            "path.lua inside an importable package"
        ) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"Lua script {name!r} is not ASCII text: {exc}") from exc
    _require_ascii(name, text)
    return text


def _require_ascii(name: str, text: str) -> None:
    """Refuse a script with a non-ASCII character, comments included: redis-py encodes the script
    with the client's ``encoding``, so a ``latin-1`` or ``ascii`` client could not send it."""
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.isascii():
            bad = next(char for char in line if not char.isascii())
            raise ConfigError(
                f"Lua script {name!r} line {number} holds the non-ASCII character {bad!r}: "
                "scripts must be ASCII so that clients with any encoding can send them"
            )


_DEFINITION = re.compile(r"local (?:function )?([A-Za-z_]\w*)")
"""A top-level definition of ``common.lua``: ``local function name(...)`` or ``local NAME = ...``."""


@cache
def _common_definitions() -> tuple[tuple[str, str], ...]:
    """``common.lua`` as ``(name, text)``: each top-level definition with the comment lines just
    above it; the file's header comment comes first, named ``""``."""
    chunks: list[tuple[str, list[str]]] = [("", [])]
    comments: list[str] = []
    for line in _script_file("common").splitlines():
        found = _DEFINITION.match(line)
        if found:
            chunks.append((found.group(1), [*comments, line]))
            comments = []
        elif line.startswith("--") or not line:
            comments.append(line)
        else:
            chunks[-1][1].extend([*comments, line])
            comments = []
    return tuple((name, "\n".join(lines)) for name, lines in chunks)


_COMMENT = re.compile(r"--.*")
"""A Lua comment to the end of its line (the scripts put no ``--`` inside strings)."""


def _used(text: str, name: str) -> bool:
    """Whether Lua ``text`` names ``name`` outside its comments."""
    return re.search(rf"\b{re.escape(name)}\b", _COMMENT.sub("", text)) is not None


def _common_for(body: str) -> list[str]:
    """The definitions of ``common.lua`` that ``body`` uses, directly or through another one, in
    file order: a script runs its whole text at every call, so one that defines helpers it never
    calls pays for them on every call."""
    definitions = _common_definitions()
    needed = {""}
    text = body
    grew = True
    while grew:
        grew = False
        for name, chunk in definitions:
            if name not in needed and _used(text, name):
                needed.add(name)
                text += "\n" + chunk
                grew = True
    return [chunk for name, chunk in definitions if name in needed]


@cache
def script_source(name: str, shift_ms: int = 0) -> str:
    """The text of script ``name`` (see `_script_file`) with its ``--! include`` lines
    resolved and the definitions of ``common.lua`` it uses prepended (or put at its ``--! common``
    line, see `COMMON`).

    ``shift_ms`` (tests only, see [`sa_redis_ids.testing.shift_time`][sa_redis_ids.testing.shift_time]) builds a variant whose
    ``redis_now_ms()`` runs that many milliseconds ahead of Redis ``TIME``; the library's own
    calls always use the unshifted text, and no script takes a time argument.
    """
    lines: list[str] = []
    included: set[str] = set()
    for line in _script_file(name).splitlines():
        if line.startswith(INCLUDE):
            include = line[len(INCLUDE) :].strip()
            if include not in included:
                included.add(include)
                lines.append(_script_file(include))
        else:
            lines.append(line)
    body = "\n".join(lines)
    head, marked, rest = body.partition(f"\n{COMMON}\n")
    if not marked:
        head, rest = "", body
    early = _common_for(head) if head else []
    late = [part for part in _common_for(body) if part not in early]
    if shift_ms and _used(body, "redis_now_ms"):
        (early if _used(head, "redis_now_ms") else late).append(
            "local unshifted_now_ms = redis_now_ms\n"
            f"redis_now_ms = function() return unshifted_now_ms() + ({int(shift_ms)}) end"
        )
    if shift_ms and _used(body, "redis_now_s"):
        (early if _used(head, "redis_now_s") else late).append(
            "redis_now_s = function()\n"
            "  local t = redis.call('TIME')\n"
            f"  local ms = t[1] * 1000 + math.floor(t[2] / 1000) + ({int(shift_ms)})\n"
            "  return string.format('%.0f', math.floor(ms / 1000))\n"
            "end"
        )
    return "\n".join([*early, *filter(None, [head]), *late, rest]) + "\n"


def reply_text(value: Any) -> str:
    """A script reply element as text (redis-py gives bytes unless ``decode_responses``)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def check_reply(
    reply: Any, *, namespace: str, node: Named, claim: str = "", limit: int | None = None
) -> list[Any]:
    """Return the payload of an ok reply; raise the exception a status code stands for
    (``limit``: the node's counter limit, so an "exhausted" reply says how many values it has left).

    An issuing script answers its ok reply as one space-separated string (``ok_reply`` in
    ``common.lua``): its parts are returned, as bytes or text like the client's replies.
    """
    if isinstance(reply, bytes):
        return reply.split(b" ")
    if isinstance(reply, str):
        return reply.split(" ")
    if not isinstance(reply, list) or not reply:
        raise ScriptError(f"unexpected script reply {reply!r}", namespace=namespace, node=node.name)
    status = int(reply[0])
    payload = reply[1:]
    if status == STATUS_OK:
        return payload
    raise_for_status(status, payload, namespace=namespace, node=node, claim=claim, limit=limit)


def raise_for_status(
    status: int,
    payload: list[Any],
    *,
    namespace: str,
    node: Named,
    claim: str = "",
    limit: int | None = None,
) -> NoReturn:
    """Map a script's failure code to its exception (the only such mapping in the package)."""
    where = {"namespace": namespace, "node": node.name}
    if status == STATUS_EXHAUSTED:
        counter = reply_text(payload[0]) if payload else "?"
        left = None
        if limit is not None and counter.isdigit():
            left = max(0, limit - int(counter))
        raise SequenceExhausted(
            f"no value left (counter at {counter})", namespace=namespace, node=node.name, left=left
        )
    if status == STATUS_CLAIM_MISMATCH:
        raise ConfigError(
            f"this node recorded the claim {reply_text(payload[0])!r} for this namespace but is now "
            f"configured as {claim!r}: the node list was reordered or resized, or the "
            "generator's options changed; either would issue duplicate IDs",
            **where,
        )
    if status == STATUS_CLOCK_BACKWARDS:
        behind = int(payload[0])
        clock_log.warning(
            "the Redis clock of node %s went back: %d ms behind the last millisecond issued "
            "(namespace %s); no ID is issued on it until it catches up",
            node.name,
            behind,
            namespace,
        )
        raise ClockMovedBackwards(
            f"Redis clock is {behind} ms behind the last millisecond issued",
            behind_ms=behind,
            **where,
        )
    if status == STATUS_DAY_PURGED:
        raise DayPurged(
            f"day {reply_text(payload[0])} is at or before the purge marker {reply_text(payload[1])}",
            **where,
        )
    if status == STATUS_OUT_OF_WINDOW:
        raise OutOfWindow(int(payload[0]), **where)
    if status == STATUS_NEEDS_FLOOR:
        raise NeedsFloor([reply_text(part) for part in payload], **where)
    if status == STATUS_DAY_MISSING:
        raise DayMissing(
            f"the counter of day {reply_text(payload[0])} vanished without a purge (it expired "
            "or was evicted) and nothing tells where it stood; give the generator a floor= to "
            "continue above the database",
            **where,
        )
    if status == STATUS_BEFORE_EPOCH:
        raise ConfigError(
            f"Redis time is {int(payload[0])} ms before the snowflake layout's epoch_ms; "
            "the epoch must lie in the past of every node's clock",
            **where,
        )
    if status == STATUS_LOCK_HELD:
        raise LockHeld(int(payload[0]), **where)
    raise ScriptError(f"unknown script status {status} with {payload!r}", **where)
