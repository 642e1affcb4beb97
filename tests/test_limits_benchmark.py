"""The limits benchmark: the figures the guarantees table quotes for the faults it calls not covered.

Held values are deterministic, so their figure is pinned: a process holds ``N`` values of a
sequence in an open transaction when Redis is emptied, and a new process, whose column floor
cannot see uncommitted rows, resumes at the table's maximum plus the headroom; exactly
``max(0, N - headroom)`` of its next ``N`` values are held ones. The timing-dependent scenarios
(a double failover, an in-place rewind) run once with small sizes: the output has its shape and
the counts are consistent with each other. Nothing about time is asserted.
"""

from __future__ import annotations

import math
import os

import pytest

from benchmarks import limits


@pytest.mark.parametrize(("held", "headroom"), [(800, None), (1250, None), (1250, 300)])
def test_a_new_process_repeats_exactly_the_values_held_past_the_headroom(
    postgresql_url: str, held: int, headroom: int | None
) -> None:
    (run,) = limits.held(1, values=held, batch=100, db_url=postgresql_url, headroom=headroom)
    assert run.headroom == (1000 if headroom is None else headroom)  # 1,000: the default
    past = max(0, held - run.headroom)
    # same table: the new process draws exactly the held values past the headroom, and every
    # batch holding one of them fails once the holder commits
    assert run.repeated == past
    assert run.failed == math.ceil(past / run.batch)
    assert run.batches == math.ceil(held / run.batch)
    # one sequence bound to two tables: the same values commit in both
    assert run.committed_twice == past


def test_runs_and_repeats_count_every_extra_copy() -> None:
    assert limits.runs_of([5, 6, 7, 9, 3, 4]) == [(5, 7), (9, 9), (3, 4)]
    assert limits.repeated([(1, 10), (5, 14), (8, 8)]) == 6 + 1
    assert limits.repeated(limits.runs_of([1, 2, 3])) == 0
    assert limits.total([(1, 10), (5, 14)]) == 20


def test_the_held_table_has_its_columns(
    postgresql_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--scenario", "held", "--runs", "1", "--held", "300", "--db-url", postgresql_url]
    assert limits.main(argv) == 0
    out = capsys.readouterr().out
    assert "same table: failed batches" in out and "two tables: committed twice" in out
    row = out.strip().splitlines()[-1].split()
    assert row == ["300", "1,000", "0", "3", "0", "0"]


def _rows(out: str) -> list[list[str]]:
    """The data rows of the last table printed."""
    lines = out.strip().splitlines()
    rule = max(i for i, line in enumerate(lines) if line.startswith("---"))
    return [line.split() for line in lines[rule + 1 :]]


def _numbers(row: list[str]) -> list[int]:
    return [int(cell.replace(",", "")) for cell in row[1:6]]


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("SA_REDIS_IDS_LONG_BENCHMARKS"),
    reason="two Sentinel failovers take about 30 s: set SA_REDIS_IDS_LONG_BENCHMARKS=1 to run it",
)
def test_a_double_failover_run_reports_what_the_idle_process_repeated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--scenario", "double-failover", "--runs", "1", "--variant", "idle"]
    assert limits.main([*argv, "--on-successor", "200"]) == 0
    (row,) = _rows(capsys.readouterr().out)
    assert row[0] == "idle"
    drawn, lost, idle_drew, by_idle, among = _numbers(row)
    assert lost >= 200  # the others drew at least that many from the successor
    assert idle_drew > 0 and by_idle <= min(idle_drew, lost) and among >= 0
    assert drawn >= lost + idle_drew


@pytest.mark.slow
def test_a_rewind_run_reports_what_the_idle_process_repeated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--scenario", "rewind", "--runs", "1", "--variant", "busy", "--processes", "2"]
    assert limits.main([*argv, "--idle-draws", "20000"]) == 0
    (row,) = _rows(capsys.readouterr().out)
    assert row[0] == "busy"
    drawn, lost, idle_drew, by_idle, among = _numbers(row)
    assert idle_drew == 20000
    # (how much the counter rose between the snapshot and the reload depends on when the
    # drawing processes fetched their blocks: counted, not required)
    assert lost >= 0 and by_idle <= idle_drew and among >= 0
    assert drawn > idle_drew
