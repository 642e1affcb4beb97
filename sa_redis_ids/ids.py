"""``RedisIds``: the entry point that holds the Redis nodes and makes generators bound to namespaces."""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, TypeVar

from sa_redis_ids.buffering import BufferedGenerator, Buffering
from sa_redis_ids.errors import ConfigError
from sa_redis_ids.forksafe import ForkSafe
from sa_redis_ids.generators import builtin as builtin
from sa_redis_ids.generators import registry
from sa_redis_ids.generators.base import IdGenerator
from sa_redis_ids.generators.cache import GENERATORS_KEPT, Recent
from sa_redis_ids.generators.daily_code import DailyCodeGenerator
from sa_redis_ids.generators.date_prefixed import DatePrefixedGenerator
from sa_redis_ids.generators.day_counter import DAY_INIT_LOCK_TTL, Floor
from sa_redis_ids.generators.registry import Context
from sa_redis_ids.generators.sequence import SequenceGenerator
from sa_redis_ids.generators.short_id import ShortIdGenerator
from sa_redis_ids.generators.snowflake import (
    DEFAULT_TOLERANCE_MS,
    SnowflakeGenerator,
    SnowflakeLayout,
)
from sa_redis_ids.keys import DEFAULT_PREFIX, validate_namespace, validate_prefix
from sa_redis_ids.lock import Redlock
from sa_redis_ids.maintenance.job import DEFAULT_FILL_WARNING, DEFAULT_LOCK_TTL, Maintenance
from sa_redis_ids.redis.connect import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_SOCKET_TIMEOUT,
    client_from_sentinel,
    client_from_url,
    embedded_client,
    is_async_client,
    is_embedded,
    refuse_foreign_client,
    socket_timeout_of,
)
from sa_redis_ids.redis.nodes import Node, NodeSet
from sa_redis_ids.redis.replication import (
    DEFAULT_DURABLE_TIMEOUT,
    DEFAULT_REPLICA_TIMEOUT,
    check_durable_options,
    check_replica_options,
)
from sa_redis_ids.secret import Secret
from sa_redis_ids.validation import check_bool, check_seconds

G = TypeVar("G", bound=IdGenerator[Any])
Ids = TypeVar("Ids", bound="RedisIdsBase")

SENTINEL_REPLICAS = 1
"""``replicas`` of [`RedisIdsBase.from_sentinel`][sa_redis_ids.ids.RedisIdsBase.from_sentinel] by default: its one replica acknowledges
every write, so a master Sentinel has replaced cannot hand out values (see there)."""

DAY_LOCK_WAIT_WITH_OTHERS = 1.0
"""Seconds a call waits for another process seeding one node's day when other nodes can answer."""

SETTLE_SECONDS = 5.0
"""Seconds ``close()`` waits for a buffer's prefetch in flight when no client has a socket timeout."""


def check_client(client: object) -> None:
    """Refuse what cannot be a redis-py client (a URL, None, a number) before it is used as one."""
    if isinstance(client, (str, bytes)):
        raise ConfigError(
            f"client must be a redis-py client, not the str {client!r}; for a URL use "
            "RedisIds.from_url"
        )
    if client is None or isinstance(client, (int, float, dict, set)):
        raise ConfigError(
            f"client must be a redis-py client (redis.Redis or RedisCluster), not "
            f"{type(client).__name__}"
        )
    refuse_foreign_client(client)


class RedisIdsBase(ForkSafe):
    """What the sync [`RedisIds`][sa_redis_ids.RedisIds] and [`AsyncRedisIds`][sa_redis_ids.asyncio.AsyncRedisIds] share:
    the constructors, the nodes and key prefix, the registry-driven [`generator`][sa_redis_ids.ids.RedisIdsBase.generator] and the
    lock. A subclass says whether its clients are ``redis.asyncio`` ones (``asynchronous``).
    """

    asynchronous: ClassVar[bool] = False
    """Whether this front end runs on ``redis.asyncio`` clients."""

    def __init__(
        self,
        client: Any | Sequence[Any],
        *,
        prefix: str = DEFAULT_PREFIX,
        retry_after: float = 2.0,
        replicas: int = 0,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        strict: bool = False,
        durable: bool = False,
        durable_timeout: float = DEFAULT_DURABLE_TIMEOUT,
    ):
        clients = list(client) if isinstance(client, (list, tuple)) else [client]
        if not clients:
            raise ConfigError("RedisIds needs at least one Redis client")
        retry_after = check_seconds("retry_after", retry_after, inclusive=True)  # 0: at once
        for each in clients:
            check_client(each)
            if is_async_client(each) != self.asynchronous:
                kind = f"{type(each).__module__}.{type(each).__name__}"
                raise ConfigError(
                    f"{kind} is a redis.asyncio client: use sa_redis_ids.asyncio.AsyncRedisIds"
                    if not self.asynchronous
                    else f"{kind} is a sync redis-py client: use sa_redis_ids.RedisIds, or "
                    "give AsyncRedisIds a redis.asyncio client"
                )
            if not is_embedded(each) and socket_timeout_of(each) is None:
                warnings.warn(
                    f"the Redis client {each!r} has no socket timeout: a Redis server that hangs "
                    "holds every ID call (and the flush that asked for it) for as long as the "
                    "client waits; build it with redis.Redis(..., **fail_fast_options()) or use "
                    "RedisIds.from_url",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self.prefix = validate_prefix(prefix)
        self.nodes = NodeSet(
            clients,
            retry_after=retry_after,
            replicas=replicas,
            replica_timeout=replica_timeout,
            strict=strict,
            durable=durable,
            durable_timeout=durable_timeout,
        )
        self._generators: Recent[tuple[str, str], IdGenerator[Any]] = Recent(
            GENERATORS_KEPT, what="generators"
        )
        """The generators made, by (strategy, namespace): the most recently asked kept, the others
        found while alive, with the options each was made with (``use`` builds it anew from them)."""
        self._lock = threading.Lock()
        self._context = Context(self.nodes, self.prefix, self._day_lock)
        self._maintenances: weakref.WeakSet[Maintenance] = weakref.WeakSet()
        """The maintenance jobs of this instance (`close` stops their schedulers)."""
        self.watch_forks()

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()

    @classmethod
    def from_url(
        cls: type[Ids],
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        cluster: bool = False,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        retry_after: float = 2.0,
        replicas: int = 0,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        strict: bool = False,
        durable: bool = False,
        durable_timeout: float = DEFAULT_DURABLE_TIMEOUT,
        **redis_kwargs: Any,
    ) -> Ids:
        """One node from a ``redis://``, ``rediss://`` or ``unix://`` URL (``cluster=True``: a
        cluster). ``retry_after``: seconds a node that failed is passed over (as for every
        constructor)."""
        check_replica_options(replicas, replica_timeout)
        check_durable_options(durable, durable_timeout)
        client = client_from_url(
            url,
            asynchronous=cls.asynchronous,
            cluster=cluster,
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            **redis_kwargs,
        )
        return cls(
            client,
            prefix=prefix,
            retry_after=retry_after,
            replicas=replicas,
            replica_timeout=replica_timeout,
            strict=strict,
            durable=durable,
            durable_timeout=durable_timeout,
        )

    @classmethod
    def from_urls(
        cls: type[Ids],
        urls: Sequence[str],
        *,
        prefix: str = DEFAULT_PREFIX,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        retry_after: float = 2.0,
        replicas: int = 0,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        strict: bool = False,
        durable: bool = False,
        durable_timeout: float = DEFAULT_DURABLE_TIMEOUT,
        **redis_kwargs: Any,
    ) -> Ids:
        """N independent nodes. Keep the order fixed: node k's index is its place in this list."""
        check_replica_options(replicas, replica_timeout)
        check_durable_options(durable, durable_timeout)
        if isinstance(urls, str) or not urls:
            raise ConfigError("from_urls needs a non-empty list of Redis URLs")
        if len(set(urls)) != len(urls):
            raise ConfigError("from_urls got the same URL twice; each node must be listed once")
        clients = [
            client_from_url(
                url,
                asynchronous=cls.asynchronous,
                connect_timeout=connect_timeout,
                socket_timeout=socket_timeout,
                **redis_kwargs,
            )
            for url in urls
        ]
        return cls(
            clients,
            prefix=prefix,
            retry_after=retry_after,
            replicas=replicas,
            replica_timeout=replica_timeout,
            strict=strict,
            durable=durable,
            durable_timeout=durable_timeout,
        )

    @classmethod
    def from_sentinel(
        cls: type[Ids],
        sentinels: Sequence[str | tuple[str, int]],
        service_name: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        socket_timeout: float = DEFAULT_SOCKET_TIMEOUT,
        retry_after: float = 2.0,
        replicas: int = SENTINEL_REPLICAS,
        replica_timeout: float = DEFAULT_REPLICA_TIMEOUT,
        strict: bool = False,
        durable: bool = False,
        durable_timeout: float = DEFAULT_DURABLE_TIMEOUT,
        sentinel_kwargs: dict[str, Any] | None = None,
        **redis_kwargs: Any,
    ) -> Ids:
        """One node: the master of ``service_name`` as the Redis Sentinels name it.

        ``sentinels`` are ``"host:port"`` strings or ``(host, port)`` tuples; ``sentinel_kwargs``
        go to the sentinel connections (e.g. their password), the other keyword arguments to the
        master's.

        A switch-over issues nothing from a master Sentinel has replaced. Sentinel promotes the
        replica within a second or two but demotes the old master only at its next periodic
        check, about 10 s later, and connections opened before the switch-over keep reaching the
        old master until then. So by default (``replicas=1``) every script is sent with ``WAIT 1``
        in the same round trip and its values are handed out only once the replica holds them:
        the promoted replica no longer acknowledges the old master, whose values are dropped
        ([`ReplicasNotAcknowledged`][sa_redis_ids.ReplicasNotAcknowledged], a
        [`RedisUnavailable`][sa_redis_ids.RedisUnavailable]). A failed call asks the Sentinels
        where the master is (at most every 0.1 s) and closes the idle connections to the old one.
        A master without a replica to wait for (the new master until the old one rejoins it, a
        master whose replica died, a service without replicas) issues without ``WAIT`` once the
        Sentinels (a majority) name it and every replica they list for it is down or its predecessor; each such
        call checks, in the same round trip, that it ran on that very server. Measured
        (``benchmarks/sentinel.py``, loopback, one replica): a call costs 1.6 to 1.9× a
        ``replicas=0`` call; a switch-over leaves 1.0 to 1.3 s without values. Tested with the
        old master left writable as real Sentinel leaves it:
        ``tests/test_faults.py::test_a_sentinel_switch_over_window_with_default_options``.

        With more than one replica, set ``replicas=`` to their number: the replicas Sentinel has
        not yet moved to the new master could otherwise acknowledge the old one. ``replicas=0``
        opts out (when repeated IDs after a switch-over are acceptable): connections opened
        before a switch-over then write to the old master until Sentinel demotes it, and the new
        master issues the same values again.
        """
        check_replica_options(replicas, replica_timeout)
        check_durable_options(durable, durable_timeout)
        client = client_from_sentinel(
            sentinels,
            service_name,
            asynchronous=cls.asynchronous,
            connect_timeout=connect_timeout,
            socket_timeout=socket_timeout,
            sentinel_kwargs=sentinel_kwargs,
            **redis_kwargs,
        )
        return cls(
            client,
            prefix=prefix,
            retry_after=retry_after,
            replicas=replicas,
            replica_timeout=replica_timeout,
            strict=strict,
            durable=durable,
            durable_timeout=durable_timeout,
        )

    @classmethod
    def embedded(
        cls: type[Ids],
        *,
        prefix: str = DEFAULT_PREFIX,
        replicas: int = 0,
        strict: bool = False,
        durable: bool = False,
    ) -> Ids:
        """An in-process fakeredis (needs the ``embedded`` extra); its data dies with the process.

        It has no replicas (``replicas`` must be 0), no append-only file (``durable`` must be
        False) and never evicts (``strict`` changes nothing).
        """
        check_replica_options(replicas, DEFAULT_REPLICA_TIMEOUT)
        check_durable_options(durable, DEFAULT_DURABLE_TIMEOUT)
        check_bool("strict", strict)
        if replicas:
            raise ConfigError("the embedded Redis has no replicas: replicas must be 0")
        if durable:
            raise ConfigError("the embedded Redis has no append-only file: durable must be False")
        return cls(embedded_client(cls.asynchronous), prefix=prefix, strict=strict)

    @classmethod
    def from_env(cls: type[Ids], url: str | None = None, **kwargs: Any) -> Ids:
        """``from_url(url)`` when a URL is given, else the embedded Redis."""
        return cls.from_url(url, **kwargs) if url else cls.embedded(**kwargs)

    @property
    def generators(self) -> list[IdGenerator[Any]]:
        """Every generator of this instance in memory (the maintenance job walks them): the
        `generators_kept` asked for most recently and any other still held elsewhere."""
        return self._generators.values()

    @property
    def generators_kept(self) -> int:
        """How many generators this instance keeps (default `GENERATORS_KEPT`, 1000): the ones
        asked for most recently. A generator beyond them lives as long as something else holds
        it (a model's ``redis_id(generator)``, a module-level name) and, asked again meanwhile,
        is the same object; one nobody holds is freed and built anew at the next ask, as a new
        process would build it (its buffered values are gaps, its floor is read again). Set it
        above the number of namespaces in use at once (say, active tenants); 0 keeps none."""
        return self._generators.kept

    @generators_kept.setter
    def generators_kept(self, kept: int) -> None:
        with self._lock:
            self._resize(kept)

    @property
    def generators_let_go(self) -> int:
        """How many times this instance let go of a generator beyond `generators_kept` (the
        first time logs a warning): above 0, some namespaces are built anew when asked again."""
        return self._generators.let_go

    def _resize(self, kept: int) -> None:
        """Keep at most ``kept`` generators (and asyncio faces) from now on (lock held)."""
        self._generators.resize(kept)

    def generator(self, strategy: str, namespace: str, **options: Any) -> IdGenerator[Any]:
        """A generator of any registered strategy (see
        [`register_strategy`][sa_redis_ids.generators.registry.register_strategy]): ``ids.generator("sequence",
        "users", start=1000)`` is ``ids.sequence("users", start=1000)``. Asked again with the same
        options it returns the same object; other options raise [`ConfigError`][sa_redis_ids.ConfigError]."""
        kind: Any = IdGenerator  # abstract: any subclass passes
        made: IdGenerator[Any] = self._make(strategy, namespace, kind, **options)
        return made

    def _make(self, strategy: str, namespace: str, kind: type[G], **options: Any) -> G:
        """Build a generator once per (strategy, namespace); the same options give the same object."""
        found = registry.strategy(strategy)
        validate_namespace(namespace)
        made = found.build(self._context, namespace, **options)
        if not isinstance(made, kind):
            raise ConfigError(
                f"strategy {strategy!r} built {made!r}, not a {kind.__name__}", namespace=namespace
            )
        with self._lock:
            existing = self._generators.get((strategy, namespace))
            if existing is None:
                self._generators.add((strategy, namespace), made, options)
                return made
        if (existing.config, existing.local_config) != (made.config, made.local_config):
            raise ConfigError(
                f"a {strategy} generator for this namespace already exists with "
                f"{existing.config} {existing.local_config}; it cannot also have "
                f"{made.config} {made.local_config}",
                namespace=namespace,
            )
        for option in ("floor", "headroom_option"):
            had, asked = getattr(existing, option), getattr(made, option)
            if not (had is asked or (asked is not None and had == asked)):
                name = option.removesuffix("_option")
                raise ConfigError(
                    f"a {strategy} generator for this namespace already exists with "
                    f"{name}={had!r}; it cannot also have {name}={asked!r}",
                    namespace=namespace,
                )
        assert isinstance(existing, kind)
        return existing

    def use(self: Ids, other: RedisIdsBase) -> AbstractContextManager[Ids]:
        """For tests: within ``with ids.use(other):``, this instance and every generator it made
        (or makes in the block) run on ``other``'s nodes; afterwards everything is as before.

        Meant for an application's module-level ``ids = RedisIds.from_url(...)`` whose generators
        its models hold (``redis_id(user_ids)``): a test points them at its own instance (e.g. the
        pytest plugin's ``redis_ids`` fixture, an embedded Redis) without touching the
        application's objects. In the block each generator is built anew from its options on
        ``other``'s nodes, keeping this instance's key prefix: new high-water marks, floors read
        anew, new buffers (the values buffered before are dropped), the first-of-day lock over
        ``other``'s nodes, and ``other``'s Redis clock (so ``testing.shift_time`` or the plugin's
        ``redis_clock`` on ``other`` moves them too). On exit each generator gets back its own
        state with its buffer dropped (no value taken from ``other`` is handed out later), and
        generators made in the block are rebuilt on this instance's nodes. ``other`` must be of
        the same kind (sync or asyncio). Blocks nest; do not take IDs from other threads while a
        block starts or ends. Yields this instance.
        """
        if not isinstance(other, RedisIdsBase) or other is self:
            raise ConfigError(f"use() takes another RedisIds instance, not {other!r}")
        if other.asynchronous != self.asynchronous:
            raise ConfigError(
                f"use() needs an instance of the same kind: {type(self).__name__} cannot run on "
                f"the nodes of {type(other).__name__}"
            )
        from sa_redis_ids.testing import use_nodes  # test-only machinery, loaded when used

        return use_nodes(self, other)

    def _day_lock(self, name: str, nodes: list[Node]) -> Redlock:
        """The Redlock on ``nodes`` that guards seeding their day counters from a floor."""
        # With other nodes to answer meanwhile, wait briefly: a call moves on instead of waiting.
        wait = DAY_INIT_LOCK_TTL if len(self.nodes) == 1 else DAY_LOCK_WAIT_WITH_OTHERS
        return self.lock(name, ttl=DAY_INIT_LOCK_TTL, timeout=wait, nodes=nodes)

    def lock(
        self,
        name: str,
        *,
        ttl: float = 10.0,
        timeout: float = 10.0,
        node_timeout: float | None = None,
        retry_delay: float = 0.2,
        fence_ttl: float | None = None,
        nodes: Sequence[Node] | None = None,
    ) -> Redlock:
        """A new [`Redlock`][sa_redis_ids.Redlock] named ``name`` over this instance's nodes
        (or over ``nodes``, some of ``ids.nodes.nodes``: a majority of those).

        ``with ids.lock("name") as lease:`` waits up to ``timeout`` s for a majority of the nodes;
        the lock expires after ``ttl`` s unless extended; ``lease.fencing_token`` increases with
        every acquisition of ``name`` (while its fence counter lives: ``fence_ttl`` s after the last
        acquisition, default forever). A new object per call: one lease per holder.
        """
        return Redlock(
            self.nodes if nodes is None else list(nodes),
            name,
            prefix=self.prefix,
            ttl=ttl,
            timeout=timeout,
            node_timeout=node_timeout,
            retry_delay=retry_delay,
            fence_ttl=fence_ttl,
        )

    def close(self) -> None:
        """Stop every thread this instance started, then close every node's connection pool.

        The schedulers of its maintenance jobs stop (``maintenance().start()``; a job given to an
        application's scheduler is removed from it), and its metrics reports end once what they
        counted is written (a refresh thread left with no instance to read stops); a buffer's
        prefetch in flight is waited for."""
        self._stop_background()
        for node in self.nodes.nodes:
            node.client.close()

    def _stop_background(self) -> None:
        """What `close` stops (both front ends)."""
        for job in list(self._maintenances):
            job.shutdown()
        observer, self.nodes.observer = self.nodes.observer, None
        if observer is not None:
            observer.detach(self)
        timeout = self.nodes.call_timeout
        for generator in self.generators:
            if isinstance(generator, BufferedGenerator) and generator.buffer is not None:
                # a prefetch in flight ends within its clients' socket timeout
                generator.buffer.settle(2 * timeout if timeout is not None else SETTLE_SECONDS)

    def __repr__(self) -> str:
        names = [node.name for node in self.nodes.nodes]
        return f"{type(self).__name__}({names}, prefix={self.prefix!r})"


class RedisIds(RedisIdsBase):
    """Redis nodes plus a key prefix; the factory of every ID generator.

    ``RedisIds(client)`` wraps an existing ``redis.Redis`` or ``redis.cluster.RedisCluster`` (a cluster
    counts as one node); a list of clients makes N independent nodes, each issuing its own residue class.
    Such a client waits on a hung server as long as its own ``socket_timeout`` (forever when it has
    none: that warns); one call gives up after the longest socket timeout of the clients, not one
    per node. Build your clients with ``redis.Redis(..., **fail_fast_options())``
    ([`fail_fast_options`][sa_redis_ids.fail_fast_options]) to fail as fast as the ``from_url`` clients (1 s).

    Options every constructor takes:

    - ``replicas=N``: hand out only values that ``N`` replicas of the master acknowledged (Redis
      ``WAIT``, sent in the same round trip as the script), so a failover to a replica cannot
      re-issue them. Fewer acknowledgements within ``replica_timeout`` seconds raise
      [`ReplicasNotAcknowledged`][sa_redis_ids.ReplicasNotAcknowledged] and the values are dropped. ``replica_timeout``
      must be shorter than the client's socket timeout. ``0`` (the default) waits for nothing.
    - ``durable=True``: hand out only values whose write the server's append-only file on disk
      holds (``WAITAOF 1 0``, sent in the same round trip as the script; Redis 7.2+ or Valkey with
      ``appendonly yes``, else refused with [`ConfigError`][sa_redis_ids.ConfigError] at the
      node's first use), so a crash and a restart from that file cannot re-issue them. No
      confirmation within ``durable_timeout`` seconds (0.5 by default, shorter than the client's
      socket timeout) raises [`NotDurable`][sa_redis_ids.NotDurable] and the values are dropped
      (a gap). With ``block=`` the wait is once per block. Not with ``replicas=N``.
    - ``strict=True``: refuse with [`ConfigError`][sa_redis_ids.ConfigError], instead of a logged warning,
      a Redis whose ``maxmemory-policy`` can evict the library's keys (checked at each node's first
      use; skipped where ``CONFIG GET`` is not allowed).
    """

    def sequence(
        self,
        namespace: str,
        *,
        start: int = 1,
        js_safe: bool = False,
        block: int | Buffering | None = None,
        floor: Callable[[], int] | None = None,
        headroom: int | None = None,
    ) -> SequenceGenerator:
        """Increasing integers from ``start``; with N nodes each node issues its residue class.

        ``block=1000`` (or a [`Buffering`][sa_redis_ids.Buffering]) takes blocks with one ``INCRBY`` and hands IDs out
        from memory with background prefetch; buffered values not used when the process exits are
        gaps (never duplicates). ``floor()`` returns the highest value already used (e.g.
        [`floor_from_column`][sa_redis_ids.floor_from_column]): read once per process and node, and whenever a
        node's counter is missing or behind, so a Redis that forgot continues above the table.
        Without ``floor=``, a generator bound to columns through the ORM reads them instead (every
        factory; see ``bound_floor``). ``headroom``: how far above what is known a healed counter resumes (the default covers
        other processes' buffered blocks; see the guarantees in the docs).
        """
        return self._make(
            "sequence",
            namespace,
            SequenceGenerator,
            start=start,
            js_safe=js_safe,
            block=block,
            floor=floor,
            headroom=headroom,
        )

    def snowflake(
        self,
        namespace: str,
        *,
        layout: str | SnowflakeLayout = "default",
        tolerance_ms: int = DEFAULT_TOLERANCE_MS,
        floor: Callable[[], int] | None = None,
        headroom: int | None = None,
    ) -> SnowflakeGenerator:
        """Time-ordered ``ms · shard · sequence`` IDs from Redis ``TIME``, decodable with ``parse``.

        ``layout``: ``"default"`` (41/12/10 bits since 2026-01-01), ``"compat"`` (the classic layout, since
        1970; warns: it runs out in 2039), ``"js_safe"`` (at most 2^53 − 1) or a
        [`SnowflakeLayout`][sa_redis_ids.SnowflakeLayout]. ``tolerance_ms``: how far the
        Redis clock may step back before ``ClockMovedBackwards``. ``floor()`` returns the highest
        ID already used (e.g. [`floor_from_column`][sa_redis_ids.floor_from_column]); ``headroom`` (ms, default
        ``tolerance_ms``) is how far ahead of what is known a lost state resumes.
        """
        return self._make(
            "snowflake",
            namespace,
            SnowflakeGenerator,
            layout=layout,
            tolerance_ms=tolerance_ms,
            floor=floor,
            headroom=headroom,
        )

    def short_id(
        self,
        namespace: str,
        *,
        pool_size: int = 10_000_000,
        offset: int = 10_000_000,
        floor: Callable[[], Iterable[int]] | None = None,
    ) -> ShortIdGenerator:
        """Random unique numbers from ``offset`` to ``offset + pool_size − 1`` (a Redis bitmap).

        ``release(v)`` frees a value, ``reserve(values)`` blocks values for good, ``is_taken(v)``,
        ``stats()``. A full pool raises ``SequenceExhausted``. ``floor()`` returns the values
        already used (e.g. [`floor_from_column`][sa_redis_ids.floor_from_column]; without ``floor=``, the
        columns the ORM binds the generator to): they are marked taken once per node state, the
        node recording it, and again when a node lost its bitmap.
        """
        return self._make(
            "short_id", namespace, ShortIdGenerator, pool_size=pool_size, offset=offset, floor=floor
        )

    def date_prefixed(
        self,
        namespace: str,
        *,
        fmt: str = "YYYYMMDD",
        length: int = 19,
        start: int = 1,
        tz: str = "UTC",
        js_safe: bool = False,
        floor: Floor | None = None,
        block: int | Buffering | None = None,
        headroom: int | None = None,
        secret: bytes | str | Secret | None = None,
    ) -> DatePrefixedGenerator:
        """Integers ``<date prefix><day counter>`` of ``length`` digits, the day by Redis time in
        ``tz``; ``floor(day)`` seeds a missing day's counter above what is already used (under a
        Redlock), so a Redis that lost its data continues above the database. ``block=`` buffers
        blocks in memory (one ``HINCRBY`` each); a block is dropped at its day's end. ``secret=``
        (a key) hides each day's counter behind a keyed permutation of its digits
        ([`Secret`][sa_redis_ids.secret.Secret])."""
        return self._make(
            "date_prefixed",
            namespace,
            DatePrefixedGenerator,
            fmt=fmt,
            length=length,
            start=start,
            tz=tz,
            js_safe=js_safe,
            floor=floor,
            block=block,
            headroom=headroom,
            secret=secret,
        )

    def daily_code(
        self,
        namespace: str,
        *,
        code_prefix: str = "IS",
        digits: int = 4,
        tz: str = "Asia/Shanghai",
        grace_days: int = 2,
        floor: Floor | None = None,
        headroom: int | None = None,
        secret: bytes | str | Secret | None = None,
        **deprecated: Any,
    ) -> DailyCodeGenerator:
        """Codes ``code_prefix + YYYYMMDD + digits-digit counter`` restarting at 1 every day (Redis
        time in ``tz``); each day's key expires ``grace_days`` after the day. ``floor`` as for
        [`date_prefixed`][sa_redis_ids.RedisIds.date_prefixed]; ``secret=`` (a key) hides each
        day's counter behind a keyed permutation of its digits
        ([`Secret`][sa_redis_ids.secret.Secret]). (``prefix=`` is the older name of
        ``code_prefix=``: it warns.)"""
        if "prefix" in deprecated and code_prefix != "IS":
            raise ConfigError(
                "give code_prefix= only (prefix= is its older name)", namespace=namespace
            )
        options: dict[str, Any] = {} if "prefix" in deprecated else {"code_prefix": code_prefix}
        return self._make(
            "daily_code",
            namespace,
            DailyCodeGenerator,
            **options,
            digits=digits,
            tz=tz,
            grace_days=grace_days,
            floor=floor,
            headroom=headroom,
            secret=secret,
            **deprecated,
        )

    def maintenance(
        self,
        keep_days: int = 7,
        precreate_days: int = 2,
        *,
        lock_ttl: float = DEFAULT_LOCK_TTL,
        fill_warning: float = DEFAULT_FILL_WARNING,
        precreate: bool = True,
    ) -> Maintenance:
        """The maintenance job of this instance's generators (see `sa_redis_ids.maintenance`):
        pre-create upcoming day counters (unless ``precreate=False``), purge days older than
        ``keep_days``, report pool fill."""
        job = Maintenance(
            self,
            keep_days=keep_days,
            precreate_days=precreate_days,
            lock_ttl=lock_ttl,
            fill_warning=fill_warning,
            precreate=precreate,
        )
        self._maintenances.add(job)
        return job
