"""The engine benchmark compares the exactly-once restore with what bench_restore compares it with
(ProducerPerformance with the restore's producer settings, in transactions), rotates the order of
the sides from round to round after a warm-up of each, and gives every ratio per round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import bench_engine
from bench._restore_perf import Measured, restore_producer_props
from bench._stats import first_counts
from bench.bench_engine import (
    DEFAULT_ROUNDS,
    ENGINES,
    LOCAL,
    SIDES,
    TOOLS,
    Bench,
    EngineRun,
    Results,
    TurnResult,
    report,
    restore_reference,
    turns,
)
from bench.bench_restore import PP_SAME_TX
from kbackup.restore.settings import RestoreSettings


def test_the_exactly_once_restore_is_compared_with_producer_performance_in_transactions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The engine benchmark once gave ProducerPerformance nothing but acks=all: no transactions, none
    # of the restore's producer settings.
    calls: list[dict[str, Any]] = []

    def producer_performance(bootstrap: str, topic: str, **kwargs: Any) -> Measured:
        calls.append(kwargs)
        return Measured(kwargs["name"], kwargs["records"], kwargs["record_size"], 1.0, 0)

    log_end = {"value": 1_016}
    monkeypatch.setattr(bench_engine, "producer_performance", producer_performance)
    monkeypatch.setattr(bench_engine, "create_topic", lambda *args: None)
    monkeypatch.setattr(bench_engine, "delete_topic", lambda *args: None)
    monkeypatch.setattr(bench_engine, "settled_log_end", lambda *args: log_end["value"])
    restore_reference("b:9092", "t", records=1_000, record_size=1024, partitions=8)
    assert calls == [
        {
            "records": 1_000,
            "record_size": 1024,
            "extra_props": restore_producer_props()[0],
            "transaction_ms": RestoreSettings().transaction_max_ms,
            "name": PP_SAME_TX,
        }
    ]
    # Its records are checked as bench_restore checks them: commit markers must be there.
    log_end["value"] = 1_000
    with pytest.raises(RuntimeError, match="no room for commit markers"):
        restore_reference("b:9092", "t", records=1_000, record_size=1024, partitions=8)


def run(engine: str, step: str, records_per_second: float, *, mode: str = "", cpu: float = 1.0) -> EngineRun:
    return EngineRun(engine, step, 1_000, 0.5, 1_000 / records_per_second, cpu, cpu, mode, 1)


def test_an_engine_restore_that_was_not_exactly_once_stops_the_benchmark(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def run_child(step: str, engine: str, master: str | None, cores: int, **values: str) -> EngineRun:
        assert master is None  # the local engine: no Spark
        return run(engine, step, 100.0, mode="idempotent" if step == "restore" else "")

    monkeypatch.setattr(bench_engine, "run_child", run_child)
    monkeypatch.setattr(bench_engine, "settled_log_end", lambda *args: 1_002)
    monkeypatch.setattr(bench_engine, "delete_topic", lambda *args: None)
    bench = Bench("b:9092", "t", 1_000, 1024, 2, tmp_path)
    with pytest.raises(RuntimeError, match="mode 'idempotent'"):
        bench._engine(LOCAL, "1-0")


def test_every_side_warms_up_then_goes_first_and_runs_in_every_place_as_often() -> None:
    planned = turns(DEFAULT_ROUNDS)
    warm_up = planned[: len(SIDES)]
    assert [turn.side for turn in warm_up] == list(SIDES)
    assert not any(turn.measured for turn in warm_up)
    assert all(turn.measured for turn in planned[len(SIDES) :])
    assert set(first_counts(planned).values()) == {DEFAULT_ROUNDS // len(SIDES)}
    for place in range(len(SIDES)):
        in_place = [
            [turn.side for turn in planned if turn.round_ == round_][place]
            for round_ in range(DEFAULT_ROUNDS)
        ]
        assert sorted(in_place) == sorted(SIDES)


def test_the_report_gives_each_ratio_per_round_with_median_and_range() -> None:
    results = Results(1_000, 1024, 8, rounds=3)
    tool_rates = {"backup": [400.0, 200.0, 400.0], "restore": [100.0, 100.0, 50.0]}
    results.runs[TOOLS] = [
        TurnResult(
            run(TOOLS, "backup", tool_rates["backup"][i]), run(TOOLS, "restore", tool_rates["restore"][i])
        )
        for i in range(3)
    ]
    for engine in ENGINES:
        results.runs[engine] = [
            TurnResult(
                run(engine, "backup", 200.0),
                run(engine, "restore", 50.0, cpu=2.0 if engine != LOCAL else 1.0),
            )
            for _ in range(3)
        ]
    results.orders = [list(SIDES)] * 3
    text = report(results, 60.0)
    rows = [line for line in text.splitlines() if line.startswith("| backup | local")]
    # Per round 200/400, 200/200, 200/400: median 0.50, range 0.50-1.00 (not 200 over a median of 400).
    assert "| 0.50 (0.50-1.00) |" in rows[0]
    restore_row = next(line for line in text.splitlines() if line.startswith("| restore | Spark local[2]"))
    assert "| 0.50 (0.50-1.00) |" in restore_row
    assert "| 2.00 (2.00-2.00) |" in restore_row  # copy CPU to local
    assert "in transactions of 2000 ms" in text
    assert " ".join(restore_producer_props()[0]) in text
    assert "round 0: " + " -> ".join(SIDES) in text
