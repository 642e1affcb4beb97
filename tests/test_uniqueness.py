"""Uniqueness of Sequence under threads and processes on a real Redis and a real cluster."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import Backend
from tests.support.servers import RedisServer
from tests.support.uniqueness import GeneratorSpec, draw_in_processes, duplicates


def test_four_processes_of_four_threads_never_share_a_sequence_value(real_backend: Backend) -> None:
    spec = real_backend.spec("sequence", "users")
    values = draw_in_processes(spec, processes=4, threads=4, per_thread=5000)
    assert len(values) == 4 * 4 * 5000
    assert duplicates(values) == {}
    assert set(values) == set(range(1, len(values) + 1)), "no gaps on a single node"


def test_batches_from_processes_on_three_nodes_never_collide(
    redis_servers: Callable[[int], list[RedisServer]],
) -> None:
    servers = redis_servers(3)
    spec = GeneratorSpec({"urls": [s.url for s in servers]}, "uniq", "sequence", "orders", batch=50)
    values = draw_in_processes(spec, processes=4, threads=4, per_thread=2000)
    assert len(values) == 4 * 4 * 2000
    assert duplicates(values) == {}
    assert {v % 3 for v in values} == {0, 1, 2}
