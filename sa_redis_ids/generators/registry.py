"""The open set of strategies: a name, and how to build a generator of it.

Every factory of [`RedisIds`][sa_redis_ids.RedisIds] and [`AsyncRedisIds`][sa_redis_ids.asyncio.AsyncRedisIds]
goes through this registry: ``ids.sequence("users")`` is ``ids.generator("sequence", "users")``.
A user adds a strategy with [`register_strategy`][sa_redis_ids.generators.registry.register_strategy] (its Lua in its own package, see
`script_source`); it then works with ``ids.generator``, the ORM
glue and maintenance, which ask a generator for its abilities by type
([`abilities`][sa_redis_ids.generators.abilities]), never by name.
"""

from __future__ import annotations

import importlib
import os
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from sa_redis_ids.errors import ConfigError

if TYPE_CHECKING:
    from sa_redis_ids.generators.base import IdGenerator
    from sa_redis_ids.redis.nodes import Node, NodeSet

NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
FLAG = re.compile(r"--[a-z][a-z0-9-]*")
KEYWORD = re.compile(r"[a-z_][a-z0-9_]*")

RESERVED_FLAGS = frozenset(
    [
        "--app",
        "--cluster",
        "--column",
        "--count",
        "--db-url",
        "--embedded",
        "--help",
        "--json",
        "--keep-days",
        "--namespace",
        "--new",
        "--once",
        "--precreate-days",
        "--prefix",
        "--redis-url",
        "--since",
        "--strategy",
        "--table",
        "--tls-ca-cert",
        "--tls-cert",
        "--tls-key",
        "--version",
        "--yes",
    ]
)
"""The command line's own options: no strategy may declare them, nor take a name that spells one
(``maintain`` offers ``--<name>`` for every date-keyed or pool strategy)."""

ENTRY_POINT_GROUP = "sa_redis_ids.strategies"
"""Installed packages name a module here (``[project.entry-points."sa_redis_ids.strategies"]``)
that registers their strategies on import; the command line loads them before it reads its
arguments."""
MODULES_ENV = "SA_REDIS_IDS_STRATEGIES"
"""Comma-separated modules the command line imports first, for strategies not installed as
entry points (e.g. ``SA_REDIS_IDS_STRATEGIES=myapp.ids_strategies``)."""


@dataclass(frozen=True)
class Context:
    """What a strategy's build function gets from the instance that makes the generator."""

    nodes: NodeSet
    """The instance's Redis nodes."""
    prefix: str
    """The key prefix of the instance (``RedisIds(prefix=...)``)."""
    day_lock: Callable[[str, list[Node]], Any]
    """``day_lock(name, nodes)``: the Redlock that guards seeding a day's counter from a floor."""


Build = Callable[..., "IdGenerator[Any]"]
"""``build(context, namespace, **options)``: a new generator of the strategy."""


def switch(text: str) -> bool:  # pragma: no cover - a switch takes no text
    """The parser of an [`OptionSpec`][sa_redis_ids.generators.registry.OptionSpec] that is a switch (``--js-safe``): present means True."""
    raise TypeError("a switch takes no value")


@dataclass(frozen=True)
class OptionSpec:
    """One command-line option of a strategy: ``--flag VALUE`` becomes ``keyword=parse(VALUE)``.

    Every sub-command that builds generators (``next``, ``parse``, ``reseed``; ``maintain`` and
    the claims by the recorded names) reads these, so an option is declared once. Strategies may
    declare the same flag: it is then one command-line option that each of them reads.
    """

    flag: str
    """``--code-prefix``: two dashes, lowercase letters, digits and dashes."""
    keyword: str
    """The keyword argument of the strategy's factory (``code_prefix``)."""
    help: str = ""
    parse: Callable[[str], Any] = str
    """Text to value (``int``…): an argparse ``type``, so ``ArgumentTypeError``/``ValueError``
    give a one-line usage error. [`switch`][sa_redis_ids.generators.registry.switch] makes a flag without value that means True."""
    recorded: str = ""
    """The name under which the generator's ``config`` records the option, if not ``keyword``
    (``daily_code`` records ``code_prefix`` as ``prefix``)."""
    per_call: bool = False
    """Not a factory option but a keyword of ``next_ids`` (a snowflake's ``--shard``): never
    part of a claim, allowed with ``--app``."""
    parse_only: bool = False
    """Only ``sa-redis-ids parse`` offers it (what decoding needs but ``next`` takes elsewhere)."""

    def __post_init__(self) -> None:
        if not FLAG.fullmatch(self.flag):
            raise ConfigError(f"option flag {self.flag!r} must look like --some-name")
        if not KEYWORD.fullmatch(self.keyword):
            raise ConfigError(f"option keyword {self.keyword!r} must be a Python identifier")
        if not callable(self.parse):
            raise ConfigError(f"option {self.flag}: parse must be callable, not {self.parse!r}")

    @property
    def dest(self) -> str:
        """The attribute argparse stores it under (``code_prefix`` for ``--code-prefix``)."""
        return self.flag.removeprefix("--").replace("-", "_")

    @property
    def is_switch(self) -> bool:
        return self.parse is switch

    @property
    def config_name(self) -> str:
        """The name of the option in a recorded ``config``."""
        return self.recorded or self.keyword


@dataclass(frozen=True)
class Strategy:
    """A registered strategy: how to build it and what the tools need to know of it."""

    name: str
    build: Build
    summary: str
    generator: type[IdGenerator[Any]] | None = None
    """The class ``build`` returns: the command line offers ``parse`` for it when it is
    [`Parseable`][sa_redis_ids.generators.abilities.Parseable], ``maintain`` when it is date-keyed or a
    pool; its ``strategy`` attribute is the key part of its claims."""
    options: tuple[OptionSpec, ...] = ()
    """Its command-line options (see [`OptionSpec`][sa_redis_ids.generators.registry.OptionSpec])."""
    config_kind: str = ""
    """The first part of its generators' ``config`` (``sequence`` of ``sequence:start=1``);
    default: the name."""
    from_claims: bool = False
    """Whether a generator can be rebuilt from the ``config`` its nodes record: that config is
    ``kind:name=value:…`` with every ``name`` a factory keyword (or an option's ``recorded``
    name), each value read back by its option's ``parse``."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    """Free for the strategy's own tools."""

    @property
    def kind(self) -> str:
        return self.config_kind or self.name

    @property
    def key_part(self) -> str | None:
        """The key part of its keys and claims (the generator class's ``strategy``), if known."""
        return None if self.generator is None else self.generator.strategy

    def option(self, flag: str) -> OptionSpec | None:
        return next((o for o in self.options if o.flag == flag), None)

    def has(self, ability: type) -> bool:
        """Whether its generators have ``ability`` (a protocol of
        [`abilities`][sa_redis_ids.generators.abilities]), judged by the methods of the declared class
        (a generator itself is asked with ``isinstance``)."""
        return self.generator is not None and _class_has(self.generator, ability)


def _class_has(cls: type, ability: type) -> bool:
    """Whether ``cls`` defines every method of protocol ``ability`` (its data members are set
    per instance, so only ``isinstance`` on a generator sees them)."""
    methods = [
        name
        for name, member in vars(ability).items()
        if not name.startswith("_") and callable(member)
    ]
    return all(callable(getattr(cls, name, None)) for name in methods)


_STRATEGIES: dict[str, Strategy] = {}
_LOCK = threading.Lock()


def register_strategy(
    name: str,
    build: Build,
    *,
    summary: str = "",
    generator: type[IdGenerator[Any]] | None = None,
    options: Iterable[OptionSpec] = (),
    config_kind: str = "",
    from_claims: bool = False,
    replace: bool = False,
) -> None:
    """Register strategy ``name`` (lowercase letters, digits, ``_``; not the name of one of the
    command line's own options, see [`RESERVED_FLAGS`][sa_redis_ids.generators.registry.RESERVED_FLAGS]): ``ids.generator(name, ns,
    **options)`` then calls ``build(context, ns, **options)``. A second registration of a name
    raises [`ConfigError`][sa_redis_ids.ConfigError] unless ``replace=True``.

    What the tools read (see [`Strategy`][sa_redis_ids.generators.registry.Strategy]): ``generator``, the class ``build`` returns;
    ``options``, its command-line options; ``config_kind``, the first part of its ``config``
    (default ``name``); ``from_claims=True`` when a generator can be rebuilt from that config.
    """
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(
            f"strategy name {name!r} must be 1-40 lowercase letters, digits or '_', "
            "starting with a letter"
        )
    if "--" + name.replace("_", "-") in RESERVED_FLAGS:
        raise ConfigError(
            f"strategy name {name!r} is taken by the command line's own option "
            f"--{name.replace('_', '-')} (sa-redis-ids maintain offers a flag per strategy)"
        )
    if not callable(build):
        raise ConfigError(f"build for strategy {name!r} must be callable, not {build!r}")
    for option, value in (("replace", replace), ("from_claims", from_claims)):
        if not isinstance(value, bool):
            raise ConfigError(f"strategy {name!r}: {option} must be True or False, not {value!r}")
    if not isinstance(summary, str):
        raise ConfigError(f"strategy {name!r}: summary must be a str, not {summary!r}")
    specs = _option_specs(name, options)
    kind = _config_kind(name, config_kind)
    if generator is not None and not (isinstance(generator, type) and hasattr(generator, "config")):
        raise ConfigError(f"strategy {name!r}: generator must be an IdGenerator class")
    found = Strategy(
        name,
        build,
        summary or (build.__doc__ or "").strip(),
        generator=generator,
        options=specs,
        config_kind="" if kind == name else kind,
        from_claims=from_claims,
    )
    with _LOCK:
        if name in _STRATEGIES and not replace:
            raise ConfigError(f"a strategy named {name!r} is already registered")
        _STRATEGIES[name] = found


def _option_specs(name: str, options: object) -> tuple[OptionSpec, ...]:
    """``options=`` of `register_strategy`, checked: OptionSpecs whose flags and keywords
    are each declared once and are not the command line's own."""
    if isinstance(options, (str, bytes)) or not isinstance(options, Iterable):
        raise ConfigError(
            f"strategy {name!r}: options must be an iterable of OptionSpec, not {options!r}"
        )
    specs = tuple(options)
    for spec in specs:
        if not isinstance(spec, OptionSpec):
            raise ConfigError(f"strategy {name!r}: options must be OptionSpec, not {spec!r}")
    flags = [spec.flag for spec in specs]
    taken = sorted(RESERVED_FLAGS.intersection(flags))
    if taken:
        raise ConfigError(f"strategy {name!r}: {', '.join(taken)} is the command line's own")
    if len(set(flags)) != len(flags):
        raise ConfigError(f"strategy {name!r} declares a flag twice: {flags}")
    keywords = [spec.keyword for spec in specs]
    twice = sorted({keyword for keyword in keywords if keywords.count(keyword) > 1})
    if twice:
        raise ConfigError(
            f"strategy {name!r}: options map two flags to the keyword {', '.join(twice)}"
        )
    return specs


def _config_kind(name: str, config_kind: object) -> str:
    """The kind of strategy ``name``'s configs (``config_kind=``, default ``name``): a name like
    a strategy's, and no other registered strategy's (the tools tell namespaces apart by it)."""
    if not isinstance(config_kind, str) or (config_kind and not NAME.fullmatch(config_kind)):
        raise ConfigError(
            f"strategy {name!r}: config_kind {config_kind!r} must be 1-40 lowercase letters, "
            "digits or '_', starting with a letter (or '' for the strategy's name)"
        )
    kind = config_kind or name
    with _LOCK:
        owner = next(
            (s.name for s in _STRATEGIES.values() if s.kind == kind and s.name != name), None
        )
    if owner is not None:
        raise ConfigError(
            f"strategy {name!r}: config_kind {kind!r} is already the kind of strategy {owner!r}; "
            "choose another so the tools can tell their namespaces apart"
        )
    return kind


def strategy(name: str) -> Strategy:
    """The registered strategy ``name``, or [`ConfigError`][sa_redis_ids.ConfigError] listing the known ones."""
    found = _STRATEGIES.get(name) if isinstance(name, str) else None
    if found is None:
        known = ", ".join(sorted(_STRATEGIES))
        raise ConfigError(f"no strategy named {name!r}; registered: {known}")
    return found


def strategies() -> list[Strategy]:
    """Every registered strategy, by name.

    A strategy is registered when the module that declares it is imported: the five built-in
    ones with `sa_redis_ids.generators.builtin`, which the front ends
    ([`RedisIds`][sa_redis_ids.RedisIds], `AsyncRedisIds`) and the command line import.
    """
    return [_STRATEGIES[name] for name in sorted(_STRATEGIES)]


def strategy_of_config(config: str) -> Strategy | None:
    """The registered strategy whose generators record ``config`` (by its kind), if any."""
    kind = config.partition(":")[0]
    return next((s for s in strategies() if s.kind == kind), None)


def load_strategy_modules(modules: Iterable[str] | None = None) -> list[str]:
    """Import the modules that register users' strategies: the entry points of group
    [`ENTRY_POINT_GROUP`][sa_redis_ids.generators.registry.ENTRY_POINT_GROUP] and the modules named in ``$SA_REDIS_IDS_STRATEGIES`` (or
    ``modules``); the names imported. A module that cannot be imported is a [`ConfigError`][sa_redis_ids.ConfigError].
    """
    names = list(modules) if modules is not None else _env_modules()
    loaded: list[str] = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as exc:
            raise ConfigError(
                f"the strategy entry point {point.name!r} ({point.value}) failed to load: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        loaded.append(point.value)
    for module in names:
        try:
            importlib.import_module(module)
        except Exception as exc:
            raise ConfigError(
                f"cannot import the strategy module {module!r} (from ${MODULES_ENV}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        loaded.append(module)
    return loaded


def _env_modules() -> list[str]:
    return [part.strip() for part in os.environ.get(MODULES_ENV, "").split(",") if part.strip()]
