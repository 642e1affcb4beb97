"""Which generator fills which mapped attribute: ``register()``, the ``redis_id`` defaults found
on mapped columns, and ``check_columns()``.

A `Binding` ties one column attribute of one mapped class to one generator. Bindings come
from two places and are treated alike afterwards: ``register(Model, generator, attr=None)``, and
columns declared with ``default=redis_id(generator)`` (found when the mapper configures). A
mapper's bindings include those of the classes it inherits from; they are kept in the ``info``
dictionary of the class's SQLAlchemy ``ClassManager`` (so they go when the class is unmapped).

Layers of `sa_redis_ids.orm`: the column default (`default`) below
this module, the flush reservation (`reservations`) and the session and
mapper events (`events`) above it.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from sqlalchemy import inspect
from sqlalchemy.orm import ColumnProperty, Mapper, RelationshipProperty, configure_mappers
from sqlalchemy.schema import Column, ColumnDefault

from sa_redis_ids.errors import ConfigError
from sa_redis_ids.generators.aio import AsyncIdGenerator
from sa_redis_ids.orm.batches import AnyGenerator, check_generator, core_of
from sa_redis_ids.orm.bound_floor import bind_column_floor
from sa_redis_ids.orm.checks import check_column, dialect_key
from sa_redis_ids.orm.default import RedisIdDefault
from sa_redis_ids.orm.sqlalchemy_internals import attach_column_default

REGISTERED = "sa_redis_ids.registered"
"""Info key: ``{attribute key: Binding}`` made by ``register()`` on that mapper."""

RESOLVED = "sa_redis_ids.bindings"
"""Info key: the mapper's bindings, its ancestors' included (a cache)."""

_lock = threading.RLock()
_all: weakref.WeakSet[Binding] = weakref.WeakSet()


class Binding:
    """One generator filling one column attribute of one mapped class when it is unset."""

    def __init__(
        self,
        mapper: Mapper[Any],
        key: str,
        column: Column[Any],
        generator: AnyGenerator,
        *,
        source: str,
        column_floor: bool = True,
    ):
        self.mapper = mapper
        self.key = key
        self.column = column
        self.generator = generator
        self.source = source
        """``"register"`` or ``"default"`` (a ``redis_id`` column default)."""
        self.column_floor = column_floor
        """Whether the column is part of the generator's floor (``bound_floor``)."""
        self._checked: set[str] = set()
        if column_floor:
            bind_column_floor(
                core_of(generator),
                mapper,
                column,
                asynchronous=isinstance(generator, AsyncIdGenerator),
            )

    @property
    def owner(self) -> str:
        """``Model.attr``, for messages."""
        return f"{self.mapper.class_.__name__}.{self.key}"

    def check(self, dialect: Any = None) -> None:
        """Check the column against the generator, once per dialect (``None``: mapping time)."""
        name = dialect_key(dialect)
        if name in self._checked:
            return
        check_column(core_of(self.generator), self.column, dialect, owner=self.owner)
        self._checked.add(name)

    def __repr__(self) -> str:
        return f"Binding({self.owner} <- {self.generator!r}, {self.source})"


def redis_default_of(column: Any) -> RedisIdDefault[Any] | None:
    """The ``redis_id`` default of ``column``, if it has one."""
    default = getattr(column, "default", None)
    if isinstance(default, ColumnDefault) and isinstance(default.arg, RedisIdDefault):
        return default.arg
    return None


def info(mapper: Mapper[Any]) -> dict[Any, Any]:
    """Where this module keeps its data about ``mapper``."""
    found: dict[Any, Any] = mapper.class_manager.info
    return found


def bindings_for(mapper: Mapper[Any]) -> tuple[Binding, ...]:
    """Every binding that applies to instances of ``mapper`` (cached per mapped class)."""
    data = mapper.class_manager.info
    found: tuple[Binding, ...] | None = data.get(RESOLVED)
    if found is None:
        found = data[RESOLVED] = _resolve(mapper)
    return found


def _resolve(mapper: Mapper[Any]) -> tuple[Binding, ...]:
    by_key: dict[str, Binding] = {}
    for level in mapper.iterate_to_root():
        for key, binding in info(level).get(REGISTERED, {}).items():
            by_key.setdefault(key, binding)
    for table in mapper.tables:
        for column in table.columns:
            default = redis_default_of(column)
            if default is None or default.registered or not isinstance(column, Column):
                continue
            try:
                key = mapper.get_property_by_column(column).key
            except Exception:  # a column of the table this mapper leaves unmapped
                continue
            if key not in by_key:
                binding = Binding(
                    mapper,
                    key,
                    column,
                    default.generator,
                    source="default",
                    column_floor=default.column_floor,
                )
                by_key[key] = binding
                with _lock:
                    _all.add(binding)
    return tuple(by_key.values())


def forget_resolved(mapper: Mapper[Any]) -> None:
    """Drop the cached bindings of ``mapper`` and its subclasses (after a registration)."""
    for each in mapper.self_and_descendants:
        info(each).pop(RESOLVED, None)


def all_bindings() -> list[Binding]:
    """Every binding of every class still mapped (for `check_columns`)."""
    with _lock:
        found = list(_all)
    return [b for b in found if inspect(b.mapper.class_, raiseerr=False) is b.mapper]


def _mapper_of(model: Any) -> Mapper[Any]:
    name = getattr(model, "__name__", repr(model))
    if not isinstance(model, type):
        raise ConfigError(f"register() needs a mapped class, not {name}")
    mapper: Any = inspect(model, raiseerr=False)
    if not isinstance(mapper, Mapper):
        raise ConfigError(f"{name} is not a mapped class; map it (declarative or imperative) first")
    return mapper


def _property(mapper: Mapper[Any], attr: str) -> Any:
    """The mapped property ``attr`` that is no column (a relationship …), or ``None``."""
    try:
        return mapper.get_property(attr)
    except Exception:  # no such attribute, or the mappers cannot configure yet
        return None


def _column_of(mapper: Mapper[Any], attr: str | None) -> tuple[str, Column[Any]]:
    name = mapper.class_.__name__
    if attr is None:
        if len(mapper.primary_key) != 1:
            keys = ", ".join(c.key or "?" for c in mapper.primary_key)
            raise ConfigError(
                f"{name} has a composite primary key ({keys}); name the attribute: "
                f"register({name}, generator, attr=...)"
            )
        attr = mapper.get_property_by_column(mapper.primary_key[0]).key
    # Mapper.columns has every column attribute from the start: looking there never configures
    # the mappers (register() may run before the classes a relationship names exist).
    found = mapper.columns.get(attr)
    prop = mapper.get_property_by_column(found) if found is not None else _property(mapper, attr)
    if prop is None:
        raise ConfigError(f"{name} has no mapped attribute {attr!r}")
    if not isinstance(prop, ColumnProperty):
        kind = "relationship" if isinstance(prop, RelationshipProperty) else type(prop).__name__
        raise ConfigError(f"{name}.{attr} is a {kind}, not a column; register() fills a column")
    columns = [c for c in prop.columns if isinstance(c, Column)]
    if not columns or len(prop.columns) != 1 or columns[0].table is None:
        if len(columns) > 1:
            base = mapper.base_mapper.class_.__name__
            raise ConfigError(
                f"{name}.{attr} spans several tables (joined inheritance); register the base "
                f"class instead: register({base}, generator)"
            )
        raise ConfigError(f"{name}.{attr} is not a table column (an SQL expression?)")
    return attr, columns[0]


def register(
    model: Any, generator: AnyGenerator, attr: str | None = None, *, column_floor: bool = True
) -> Binding:
    """Fill ``model``'s primary key (or ``attr``) from ``generator`` on every insert path.

    The attribute is filled when it is unset (``None``); a value set explicitly is left alone. The
    ORM flush reserves the IDs of all pending objects with one ``next_ids(n)`` per generator and a
    ``before_insert`` hook assigns them; bulk ``insert()``, ``bulk_insert_mappings`` and Core
    executemany take one reservation per statement through the column default this installs.
    Register at import time, before the first insert. Raises [`ConfigError`][sa_redis_ids.ConfigError] for a class that is
    not mapped, an attribute that is not a single table column, a column that already has a
    (``redis_id`` or other) Python default, a second registration, or a column that cannot hold the
    generator's values. ``generator`` may be an ``AsyncIdGenerator`` for models used with
    ``AsyncSession``: the reservations are then awaited on the event loop.

    The column becomes the generator's floor (read at a process's first use of each node and
    after a detected loss, so a Redis that lost its data cannot repeat a value the table holds)
    unless ``column_floor=False`` or the generator was given ``floor=``; see
    ``bound_floor``.
    """
    check_generator(generator, "register()")
    if not isinstance(column_floor, bool):
        raise ConfigError(f"column_floor must be True or False, not {column_floor!r}")
    mapper = _mapper_of(model)
    key, column = _column_of(mapper, attr)
    owner = f"{mapper.class_.__name__}.{key}"
    existing = redis_default_of(column)
    if existing is not None:
        if existing.registered:
            raise ConfigError(f"{owner} is already registered to {existing.generator!r}")
        raise ConfigError(
            f"{owner} already has default=redis_id({existing.generator!r}); use that default or "
            f"register(), not both (one of them would allocate IDs that are never used)"
        )
    if column.default is not None:
        raise ConfigError(
            f"{owner} already has a Python-side default ({column.default!r}); "
            f"remove it to fill the column from Redis"
        )
    identity = getattr(column, "identity", None)
    if identity is not None and getattr(identity, "always", False):
        raise ConfigError(f"{owner} is GENERATED ALWAYS AS IDENTITY; it refuses explicit IDs")
    for level in mapper.iterate_to_root():
        if key in info(level).get(REGISTERED, {}):
            raise ConfigError(f"{owner} is already registered (on {level.class_.__name__})")
    binding = Binding(mapper, key, column, generator, source="register", column_floor=column_floor)
    binding.check()
    with _lock:
        attach_column_default(
            column, RedisIdDefault(generator, registered=True, column_floor=column_floor)
        )
        info(mapper).setdefault(REGISTERED, {})[key] = binding
        _all.add(binding)
        forget_resolved(mapper)
    return binding


def check_columns(bind: Any) -> None:
    """Check every bound column against ``bind``'s dialect now (an Engine, Connection or Dialect).

    The same checks run by themselves before the first insert on each dialect; call this at start-up
    to fail there instead. Configures the mappers first.
    """
    configure_mappers()
    dialect = getattr(bind, "dialect", bind)
    for binding in all_bindings():
        binding.check()
        binding.check(dialect)
