"""The model's invariants: what every process received, what was lost, what may be healed.

- **Unique**: a generator hands no value out twice, across processes, forked children, threads,
  flushes and tables (a value given back with ``release`` may come again, once). Values a process
  draws directly before it could read the generator's column floor (before its first flush that
  called the generator: documented as drawn without a floor) are kept out of the tables, and a
  repeat involving one of them is listed as a limit, not a violation. So is a repeat of a value
  taken from Redis between two losses of its namespace and not committed at the second, by a
  value taken after it (documented: a second loss while processes still hold values drawn after
  the first heal); a buffered generator's values count as taken when their block was fetched.
  And so is a repeat across a promotion whose replica restarted from its own data before any
  process drew from the namespace or reserved or released in it (documented as not covered: the
  promotion goes unseen; maintenance does not look at the node's identity).
- **Reserved**: a short ID reserved after the pool's last loss is never handed out.
- **No false loss**: a process logs (``sa_redis_ids.rewinds``) or counts (``generator.rewinds``)
  a rewind of a namespace only if a fault lost that namespace's data since the process last
  drew from it through Redis or healed it with its column floor known (a heal without the floor
  may leave the state below the table: the next one with it is a heal too; a new process: if no
  process drew from it through its floor since that loss); the log and the counter agree.
- **Snowflake near the clock**: the state's millisecond is at most 50 ms ahead of Redis ``TIME``,
  unless a loss required more: while a snowflake loss is not yet seen by every process, a heal
  may resume ``headroom`` (1000 ms) past the later of the clock and the highest millisecond
  issued before the loss. A heal after another one adds nothing: values issued after the loss
  (the first healer's, which a column floor shows) need only the next millisecond.
- **Short IDs independent**: concurrent single ``next_id()`` calls give no more pairs within 10
  of each other than independent random positions would: 4 or more such pairs fail (among 300
  values of the default 10,000,000 pool about 0.09 pairs are expected, and 4 or more come by
  chance about 3 times in a million; among 16, far less).
- **Library errors only**: every exception a call raised is a ``SaRedisIdsError``.
- **No lock left on the database**: after a step, a process holds no lock on the tables' SQLite
  file (a read left open would block every other process's commit).
"""

from __future__ import annotations

import math
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

from tests.support.model.schema import BUFFERED, LABELS, POOL_SIZE, TABLE_COLUMNS

SNOWFLAKE_EPOCH_MS = 1_767_225_600_000
SNOWFLAKE_HEADROOM_MS = 1000
LEAD_MS = 50
ADJACENT = 10
ADJACENT_PAIRS_FAIL = 4
MARKER_SECONDS = 1.5
"""How long a namespace's identity marker may hide a lone lost key (it expires after 1 s)."""


Span = tuple[float, float]
"""When a value was taken from Redis: from ``time.monotonic()`` to ``time.monotonic()``."""


def adjacent_pairs(values: list[int]) -> int:
    return sum(1 for a, b in combinations(values, 2) if abs(a - b) <= ADJACENT)


@dataclass
class Ledger:
    holders: dict[str, dict[Any, str]] = field(default_factory=lambda: {x: {} for x in LABELS})
    released: dict[str, Counter[Any]] = field(
        default_factory=lambda: {x: Counter() for x in LABELS}
    )
    reserved: dict[int, str] = field(default_factory=dict)
    pending: dict[str, set[str]] = field(default_factory=dict)
    """Per process: namespaces that lost data since the process last drew from them."""
    unhealed: set[str] = field(default_factory=set)
    """Namespaces that lost data and no process has drawn from through its floor since: a new
    process may find them below the table (and heal) at its first call."""
    rewinds: dict[str, dict[str, int]] = field(default_factory=dict)
    logged: dict[str, dict[str, int]] = field(default_factory=dict)
    highest_sf_ms: int = 0
    sf_lost_at_ms: int = 0
    """The highest snowflake millisecond issued when the namespace last lost data: what a heal
    must resume above (plus its headroom), besides the clock."""
    sf_cap_ms: int = 0
    """The furthest (absolute ms) a snowflake heal may have put the state."""
    floorless: dict[str, set[Any]] = field(default_factory=lambda: {x: set() for x in LABELS})
    taken_at: dict[str, dict[Any, Span]] = field(default_factory=lambda: {x: {} for x in LABELS})
    """When each value handed out was taken from Redis (its block's fetch, or its step)."""
    losses: dict[str, list[float]] = field(default_factory=lambda: {x: [] for x in LABELS})
    """When each loss of a namespace began (``time.monotonic()``, ascending)."""
    committed_at_loss: dict[str, list[set[Any]]] = field(
        default_factory=lambda: {x: [] for x in LABELS}
    )
    """Per loss of a namespace (as `losses`), its values committed in the tables then."""
    fetches: dict[str, dict[str, list[tuple[range, Span]]]] = field(default_factory=dict)
    """Per process and buffered generator, the blocks it fetched and when."""
    excused: dict[str, set[Any]] = field(default_factory=lambda: {x: set() for x in LABELS})
    """Values whose repeat was counted as a limit: committed twice (a generator bound to two
    tables) is the same limit, not a violation of its own."""
    unseen: dict[str, list[float]] = field(default_factory=lambda: {x: [] for x in LABELS})
    """Per namespace, when each promotion no process could see began (`promotion_unseen`)."""
    first_taken: dict[str, dict[str, Span]] = field(default_factory=lambda: {x: {} for x in LABELS})
    """Per namespace and process, when the process first called it with a script that reads
    the node's identity (its first value taken from Redis, a short-ID reserve or release)."""
    cut_at: float | None = None
    """When the replica was cut off (it misses what follows), until its promotion."""
    moves: dict[str, dict[int, float]] = field(default_factory=lambda: {x: {} for x in LABELS})
    """Per namespace, which of its losses (indexes into `losses`) were promotions of a replica
    that missed some of its writes, and when that replica was cut off."""
    heals_at: dict[str, list[tuple[float, str]]] = field(
        default_factory=lambda: {x: [] for x in LABELS}
    )
    """Per namespace, when each step that healed it (a rewind counted) ended, and whose."""
    violations: list[str] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)
    """Repeats the documentation does not cover (a value drawn before its floor was known)."""
    lost_at: dict[str, float] = field(default_factory=dict)
    """When (monotonic seconds) each namespace last lost data."""
    healed: list[str] = field(default_factory=list)
    """Every rewind counted, where (for the log)."""
    received: int = 0

    # -- processes ---------------------------------------------------------------------------

    def joined(self, name: str) -> None:
        self.pending[name] = set(self.unhealed)
        self.fetches[name] = {label: [] for label in BUFFERED}
        self.rewinds[name] = dict.fromkeys(LABELS, 0)
        self.logged[name] = dict.fromkeys(LABELS, 0)

    def left(self, name: str) -> None:
        self.pending.pop(name, None)

    # -- what a step brought -----------------------------------------------------------------

    def outcome(self, step: str, who: str, outcome: dict[str, Any]) -> None:
        where = f"{who} at {step!r}"
        now = time.monotonic()
        violations = len(self.violations)
        for label, blocks in outcome.get("fetched", {}).items():
            for began, ended, start, stop, step_by in blocks:
                self.fetches[who][label].append((range(start, stop, step_by), (began, ended)))
        limited = set()  # the generators with a repeat counted as a limit in this step
        for label, values in outcome["values"].items():
            if self._received(label, values, who, where, self._taken(who, label, now)):
                limited.add(label)
        for label, values in outcome["floorless"].items():
            taken = self._taken(who, label, now)
            if self._received(label, values, who, where, taken, floorless=True):
                limited.add(label)
        if outcome.get("locks"):
            self.violations.append(
                f"{where}: the process still holds {'/'.join(outcome['locks'])} locks on the "
                "database after its step (a read left open blocks every other commit)"
            )
        places = {
            f"{table}.{column}"
            for table, columns in TABLE_COLUMNS.items()
            for column, label in columns.items()
            if label in limited
        }
        for kind, library, message in outcome["errors"]:
            explained = len(self.violations) == violations and any(
                f"UNIQUE constraint failed: {place}" in message for place in places
            )
            if kind == "IntegrityError" and explained:  # on the repeats just counted as limits
                self.limits.append(f"{where}: {kind} on the values above: {message}")
            elif not library:
                self.violations.append(f"{where}: {kind} is not a SaRedisIdsError: {message}")
        for label, values in outcome["concurrent"].items():
            if label == "sid" and len(values) > 1:
                pairs = adjacent_pairs(values)
                if pairs >= ADJACENT_PAIRS_FAIL:
                    n = len(values)
                    chance = n * (n - 1) / 2 * (2 * ADJACENT + 1) / POOL_SIZE
                    self.violations.append(
                        f"{where}: {pairs} pairs of {n} concurrent short IDs lie within "
                        f"{ADJACENT} of each other (independent positions: {chance:.2f}): "
                        f"{sorted(values)[:20]}"
                    )
        for value in outcome["released"]:
            self.released["sid"][value] += 1
        self._rewinds(where, who, outcome)

    def _taken(self, who: str, label: str, now: float) -> Callable[[Any], Span]:
        """When ``who`` took a value of ``label`` it hands out now from Redis: the fetch of the
        latest block holding it (a buffered generator: from when the fetch began to when its
        reply was read), else the step (``now``: faults happen between steps)."""
        if label not in BUFFERED:
            return lambda value: (now, now)
        blocks = self.fetches[who][label]

        def taken(value: Any) -> Span:
            for block, span in reversed(blocks):
                if value in block:
                    return span
            raise AssertionError(f"{who} handed out {label} value {value!r} of no traced block")

        return taken

    def _epochs(self, label: str, span: Span) -> tuple[int, int]:
        """How many losses of ``label`` had begun when ``span`` began and when it ended: the
        span of losses a value taken within ``span`` falls in (one when they are equal)."""
        times = self.losses[label]
        return bisect_left(times, span[0]), bisect_left(times, span[1])

    def _held_over(self, label: str, value: Any, first: Span, again: Span) -> bool:
        """Whether ``value`` was taken from Redis between two losses of ``label`` and not
        committed at the second, and taken again after it: the documented limit of a second
        loss soon after a first. A fetch whose span overlaps a loss could have run on either
        side of it: the repeat is a limit only if it is one wherever the fetches ran."""
        one, other = sorted((self._epochs(label, first), self._epochs(label, again)))
        if one[1] >= other[0] or one[0] == 0:
            return False  # possibly taken twice between the same losses, or before any loss
        committed = self.committed_at_loss[label]
        return all(value not in committed[epoch] for epoch in range(one[0], one[1] + 1))

    def _across_unseen_promotion(self, label: str, first: Span, again: Span) -> bool:
        """Whether a promotion unseen in ``label`` began after one of the spans ended and before
        the other began, and the later one ended before the namespace's next loss (a loss the
        processes see heals what the promotion lost)."""
        earlier, later = sorted((first, again))
        losses = self.losses[label]
        for moved in self.unseen[label]:
            following = [at for at in losses if at > moved]
            until = following[0] if following else math.inf
            if earlier[1] < moved < later[0] and later[1] < until:
                return True
        return False

    def _first_after_loss(self, label: str, value: Any, who: str, span: Span, other: Span) -> bool:
        """Whether ``who`` took ``value`` (in ``span``) as a process that had not called
        ``label`` before a promotion of a replica that missed some of its writes and drew first
        after it, before any process healed it, and the other holder took ``value`` (in
        ``other``) after the replica was cut off and before the promotion, not committed then:
        the documented limit of a new process drawing first after a loss. The replica's counter
        may stand at or above the table (when the rows committed since the cut hold values it
        covers), so nothing looks lost to a process that saw no identity before; a state that is
        missing (an emptied node, a deleted key) is healed from the floor with the headroom."""
        began = self.first_taken[label].get(who)
        if began is None:
            return False
        epoch = self._epochs(label, began)
        if epoch[0] == 0 or epoch[0] != epoch[1] or self._epochs(label, span) != epoch:
            return False  # no loss before its first value, or taken past a later loss
        losses = self.losses[label]
        loss = losses[epoch[0] - 1]
        until = losses[epoch[0]] if epoch[0] < len(losses) else math.inf
        cut = self.moves[label].get(epoch[0] - 1)
        return (
            cut is not None
            and other[0] > cut
            and self._epochs(label, other)[1] < epoch[0]
            and not any(
                loss < healed < until and (healed < began[0] or healer == who)
                for healed, healer in self.heals_at[label]
            )
            and value not in self.committed_at_loss[label][epoch[0] - 1]
        )

    def _documented(
        self,
        label: str,
        value: Any,
        first: tuple[str, Span],
        again: tuple[str, Span],
        floorless: bool,
    ) -> str | None:
        """Why a repeat of ``value`` (taken from Redis by a process and in a span, ``first``,
        and again, ``again``) is a limit the documentation states, or None: a violation."""
        if floorless or value in self.floorless[label]:
            return "one of them was drawn directly before the process could read its column floor"
        if self._first_after_loss(label, value, *first, again[1]) or self._first_after_loss(
            label, value, *again, first[1]
        ):
            return (
                "a process that had received nothing from the namespace drew first after a loss "
                "and got a value another process held from before it"
            )
        if self._across_unseen_promotion(label, first[1], again[1]):
            return "a promotion between them went unseen (its replica restarted before any call)"
        if self._held_over(label, value, first[1], again[1]):
            return (
                "one of them was taken from Redis after a loss and held uncommitted at the next one"
            )
        return None

    def _received(
        self,
        label: str,
        values: list[Any],
        who: str,
        where: str,
        taken: Callable[[Any], Span],
        *,
        floorless: bool = False,
    ) -> bool:
        """Record ``values`` handed out at ``where``; whether a repeat among them was counted
        as a documented limit."""
        limited = False
        holders = self.holders[label]
        taken_at = self.taken_at[label]
        self.received += len(values)
        unread = self.floorless[label]
        if values and who not in self.first_taken[label]:
            self.first_taken[label][who] = min(taken(value) for value in values)
        for value in values:
            first = holders.get(value)
            at = taken(value)
            if first is not None:
                if self.released[label][value] > 0:
                    self.released[label][value] -= 1
                elif reason := self._documented(
                    label,
                    value,
                    (first.split(" at ", 1)[0], taken_at[value]),
                    (who, at),
                    floorless,
                ):
                    self.limits.append(
                        f"{where}: {label} value {value!r} again (first {first}); {reason}"
                    )
                    limited = True
                    self.excused[label].add(value)
                else:
                    self.violations.append(
                        f"{where}: {label} value {value!r} handed out twice (first {first})"
                    )
            holders[value] = where
            taken_at[value] = at
            if floorless:
                unread.add(value)
            if label == "sid" and value in self.reserved:
                self.violations.append(
                    f"{where}: short ID {value} handed out although reserved {self.reserved[value]}"
                )
            if label == "sf":
                self.highest_sf_ms = max(self.highest_sf_ms, (value >> 22) + SNOWFLAKE_EPOCH_MS)
        return limited

    def _rewinds(self, where: str, who: str, outcome: dict[str, Any]) -> None:
        child = outcome.get("child")
        if child is not None:  # a forked child: its counters went on from its parent's
            self._counted(f"{where} (forked child)", who, child, keep=False)
        self._counted(where, who, outcome, keep=True, drew=child is None)

    def _counted(
        self, where: str, who: str, outcome: dict[str, Any], *, keep: bool, drew: bool = False
    ) -> None:
        """Compare ``who``'s rewind counters and records with what it may have healed;
        ``keep``: they become ``who``'s new baseline (a forked child's do not); ``drew``: the
        step's values are ``who``'s own (not a forked child's)."""
        if who not in self.pending:
            return
        pending = self.pending[who]
        for label in LABELS:
            counted = outcome["rewinds"][label] - self.rewinds[who][label]
            logged = outcome["logged"].get(label, 0) - self.logged[who][label]
            if keep:
                self.rewinds[who][label] = outcome["rewinds"][label]
                self.logged[who][label] = outcome["logged"].get(label, 0)
            if counted != logged:
                self.violations.append(
                    f"{where}: {label} rewinds counted {counted} but logged {logged}"
                )
            if (counted or logged) and label not in pending:
                self.violations.append(
                    f"{where}: {label} rewind counted {counted}, logged {logged}, "
                    "but no fault lost its data since this process last drew from it"
                )
            if counted or logged:
                self.healed.append(f"{where}: {label} {counted}")
                self.heals_at[label].append((time.monotonic(), who))
            if not keep:
                continue
            through = drew and bool(outcome["values"].get(label)) and label not in BUFFERED
            # A lone lost key may go unseen while the namespace's identity marker (which holds
            # the node claim, for a second) lasts: only a draw after that is an observation.
            through = through and time.monotonic() - self.lost_at.get(label, 0.0) > MARKER_SECONDS
            known = label in outcome.get("floor_known", LABELS)
            if ((counted or logged) and known) or through:
                pending.discard(label)  # a heal without the floor may leave the state low
            if through:
                self.unhealed.discard(label)  # drawn through its floor

    def touched(self, who: str, labels: set[str], at: float) -> None:
        """``who`` called ``labels`` in a step that began at ``at`` (see `first_taken`)."""
        for label in labels:
            self.first_taken[label].setdefault(who, (at, at))

    def replica_cut(self, at: float) -> None:
        """The replica was cut off at ``at``: it misses what follows until it is promoted."""
        self.cut_at = at

    def reserve(self, values: list[int], where: str) -> None:
        for value in values:
            if value not in self.holders["sid"]:
                self.reserved[value] = where

    def promotion_unseen(self, label: str, began: float) -> None:
        """The replica promoted by the fault that began at ``began`` restarted from its own data
        before any process called namespace ``label``: a restart is all its processes can see
        (documented as not covered), so what the replica missed may be handed out again."""
        self.unseen[label].append(began)

    def lost(
        self,
        namespaces: set[str],
        began: float,
        committed: dict[str, list[Any]],
        *,
        moved: frozenset[str] = frozenset(),
    ) -> None:
        """A fault that began at ``began`` (``time.monotonic()``) lost these namespaces' data;
        ``committed``: every value the tables held when it began; ``moved``: the namespaces
        whose data the fault lost by promoting a replica cut off at `cut_at` (their state may
        stand behind, not missing)."""
        self.unhealed |= namespaces
        for label in namespaces:
            if label in moved and self.cut_at is not None:
                self.moves[label][len(self.losses[label])] = self.cut_at
            self.lost_at[label] = time.monotonic()
            self.losses[label].append(began)
            self.committed_at_loss[label].append(set(committed.get(label, ())))
        for pending in self.pending.values():
            pending |= namespaces
        if moved:
            self.cut_at = None
        if "sf" in namespaces:
            self.sf_lost_at_ms = self.highest_sf_ms
        if "sid" in namespaces:
            self.reserved.clear()  # reservations are lost with the bitmap (reserve again)

    # -- after every step --------------------------------------------------------------------

    def snowflake_loss_open(self) -> bool:
        """Whether some process has not drawn a snowflake since its namespace's last loss
        (taken before each step: the step may heal it)."""
        return any("sf" in pending for pending in self.pending.values())

    def snowflake(self, step: str, loss_open: bool, lead_ms: int | None, now_ms: int) -> None:
        """Check the state's lead over the clock (``lead_ms``) at Redis time ``now_ms`` after
        ``step``; ``loss_open``: `snowflake_loss_open` before it."""
        if loss_open:
            reach = max(self.sf_lost_at_ms, now_ms) + SNOWFLAKE_HEADROOM_MS + LEAD_MS
            self.sf_cap_ms = max(self.sf_cap_ms, reach)
        if lead_ms is None or lead_ms <= LEAD_MS:
            return
        if now_ms + lead_ms <= self.sf_cap_ms:
            return
        self.violations.append(
            f"after {step!r}: the snowflake state is {lead_ms} ms ahead of Redis TIME "
            f"(at most {LEAD_MS} unless a loss required it)"
        )

    def tables(self, rows: dict[str, list[Any]]) -> None:
        """Committed values per generator label: each one received, none twice."""
        for label, values in rows.items():
            counts = Counter(values)
            for value, n in counts.items():
                if n > 1 and value not in self.excused[label]:
                    self.violations.append(f"tables: {label} value {value!r} committed {n} times")
                if value not in self.holders[label]:
                    self.violations.append(
                        f"tables: {label} value {value!r} committed but no process received it"
                    )
