"""The namespaces benchmark measures every strategy with all generators kept and with the bound.

Memory figures depend on the Python build, so only what the bound guarantees is asserted: the
bounded run keeps the generators it is told to, and holds less than keeping every one.
"""

from __future__ import annotations

from benchmarks import namespaces


def test_the_bound_keeps_fewer_generators_and_less_memory() -> None:
    rows = namespaces.run(300, 20, strategies=["short_id", "sequence block=1000"])
    for every, bounded in rows:
        assert every["generators_in_memory"] == 300
        assert bounded["generators_in_memory"] == 20
        assert every["bytes_per_namespace"] > 0
        assert bounded["mb"] < every["mb"]
    text = namespaces.render(rows)
    assert "| short_id | 300 |" in text and "kept 20" in text
