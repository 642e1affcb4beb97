"""Smoke tests of the IDs benchmark: it runs end to end and reports well-formed results.

Speed is never asserted here (a shared, noisy machine); the benchmark itself states the targets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis

from benchmarks import ids as bench
from sa_redis_ids.cli import main
from tests.support.services import REDIS_URL

TARGET_NAMES = ("PING", "next_ids(1000) >= 100×", "300× unbuffered INCR", "1,000,000 IDs/s")


def _check_result(result: dict[str, object], *, processes: bool) -> None:
    strategies = result["strategies"]
    buffered = result["buffered"]
    assert isinstance(strategies, list) and isinstance(buffered, list)
    assert [row["mode"] for row in strategies[:2]] == ["PING", "EVALSHA 'return 1'"]
    names = {row["strategy"] for row in strategies if row["group"] == "strategies"}
    assert {"sequence", "date_prefixed"} <= names
    for row in strategies:
        assert row["ids"] > 0 and row["ids_per_s"] > 0 and row["ratio"] > 0
    modes = {(row["strategy"], row["mode"]) for row in buffered}
    assert ("INCR (unbuffered)", "1 thread") in modes
    for name in ("sequence", "date_prefixed"):
        assert (f"{name} block=1000", "1 thread") in modes
        assert (f"{name} block=1000", "4 threads") in modes
    measured = [row for row in buffered if row["ids"]]
    for row in measured:
        assert row["ids_per_s"] > 0 and row["ratio"] > 0
    in_processes = [row for row in buffered if row["mode"].endswith("processes")]
    assert len(in_processes) == 2
    assert all(bool(row["ids"]) == processes for row in in_processes)
    seq = next(r for r in buffered if r["strategy"].startswith("sequence") and r["ids"])
    assert seq["extra"]["blocks_taken"] >= 1, "buffer statistics are part of the result"
    targets = result["targets"]
    assert isinstance(targets, list)
    texts = " | ".join(target["target"] for target in targets)
    for name in TARGET_NAMES:
        assert name in texts
    assert all(isinstance(target["met"], bool) for target in targets)


def test_the_quick_benchmark_on_a_real_redis_reports_every_row(
    real_redis: redis.Redis, tmp_path: Path
) -> None:
    settings = bench.Settings(redis_url=REDIS_URL, out_dir=tmp_path, quiet=True).quick()
    result = bench.run(settings)
    _check_result(result, processes=True)
    assert result["machine"]["redis_server"], "the server version is recorded"
    text = bench.render(result)
    assert "sequence" in text and "× INCR" in text and "Targets:" in text
    markdown = bench.render(result, markdown=True)
    assert "| strategy | call |" in markdown
    assert not list(real_redis.scan_iter(match=f"{result['key_prefix']}:*")), "keys deleted"


def test_sa_redis_ids_bench_ids_writes_json_on_the_embedded_redis(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(bench.URL_ENV, raising=False)
    status = main(["bench", "ids", "--quick", "--quiet", "--no-chart", "--out", str(tmp_path)])
    assert status == 0
    printed = capsys.readouterr().out
    assert "Targets:" in printed
    assert "n/a: the embedded Redis lives in one process" in printed
    written = sorted(tmp_path.glob("ids-2*.json"))
    assert len(written) == 1
    result = json.loads(written[0].read_text(encoding="utf-8"))
    assert result == json.loads((tmp_path / "ids-latest.json").read_text(encoding="utf-8"))
    _check_result(result, processes=False)
    assert result["settings"]["buffered_ids"] == bench.Settings().quick().buffered_ids
