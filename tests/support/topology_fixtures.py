"""Pytest fixtures for the replicated topologies of :mod:`tests.support.topologies`.

Imported by ``tests/conftest.py``. Each topology starts on first use and is stopped at the end of
the session; a test that changes one (a failover, a killed master) leaves it usable: helpers such
as ``SentinelTopology.master()`` ask the topology where things are now.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import pytest

from tests.support.services import missing
from tests.support.topologies import (
    TEST_PERIODS,
    ReplicatedCluster,
    ReplicatedPair,
    SentinelTopology,
)

T = TypeVar("T", ReplicatedPair, SentinelTopology, ReplicatedCluster)


def _run(topology: T) -> Iterator[T]:
    try:
        topology.start()
    except (RuntimeError, OSError) as exc:
        topology.stop()
        missing(f"could not start {type(topology).__name__}: {exc}")
    yield topology
    topology.stop()


@pytest.fixture
def replicated_pair() -> Iterator[ReplicatedPair]:
    """A fresh master with one replica, for tests that pause or stop the replica."""
    yield from _run(ReplicatedPair(replicas=1))


@pytest.fixture(scope="session")
def sentinel_topology() -> Iterator[SentinelTopology]:
    """A master, one replica and three Sentinels, shared by the session."""
    yield from _run(SentinelTopology(periods=TEST_PERIODS))


@pytest.fixture(scope="session")
def replicated_cluster() -> Iterator[ReplicatedCluster]:
    """A 6-node Redis Cluster (3 masters, 3 replicas), shared by the session."""
    yield from _run(ReplicatedCluster())


@pytest.fixture
def own_sentinels() -> Iterator[SentinelTopology]:
    """A master, a replica and three Sentinels of this test alone (for tests that break them)."""
    yield from _run(SentinelTopology(periods=TEST_PERIODS))


@pytest.fixture
def own_cluster() -> Iterator[ReplicatedCluster]:
    """A 6-node Cluster (3 masters with a replica each) of this test alone."""
    yield from _run(ReplicatedCluster())
