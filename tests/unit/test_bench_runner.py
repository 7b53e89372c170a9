"""The one benchmark command: which benchmarks it finds, and the throughput ratios it plots."""

from __future__ import annotations

from pathlib import Path

from bench.__main__ import BENCHMARKS, markdown_tables, run_one, throughput_ratios

DOCUMENT = """# Benchmarks
<!-- backup:start -->
## Backup
| record size | records | ConsumerPerformance rec/s | backup rec/s | ratio of bests |
|---:|---:|---:|---:|---:|
| 100 B | 1,000,000 | 500,000 | 250,000 | 0.50 |
<!-- backup:end -->
<!-- restore:start -->
| record size | records | PP | restore idempotent | ratio | restore exactly-once | ratio |
|---|---|---|---|---|---|---|
| 1024 B | 250,000 | 1 | 2 | 1.81 | 3 | 1.28 |
<!-- restore:end -->
<!-- accuracy:start -->
| scenario | ratio |
|---|---|
| not a throughput | 9.9 |
<!-- accuracy:end -->
"""


def test_tables_are_parsed_with_their_rows() -> None:
    tables = markdown_tables(DOCUMENT)
    assert [len(rows) for _, rows in tables] == [1, 1, 1]
    assert tables[0][0][-1] == "ratio of bests"
    assert tables[1][1][0][:2] == ["1024 B", "250,000"]


def test_ratios_come_from_the_throughput_sections_only() -> None:
    assert throughput_ratios(DOCUMENT) == [
        ("backup: 100 B 1,000,000 [ratio of bests]", 0.50),
        ("restore: 1024 B 250,000 [restore idempotent]", 1.81),
        ("restore: 1024 B 250,000 [restore exactly-once]", 1.28),
    ]


def test_a_missing_benchmark_module_is_skipped_with_a_reason(tmp_path: Path) -> None:
    outcome = run_one("reset", "bench.no_such_benchmark", quick=True, logs=tmp_path)
    assert outcome.status == "skipped (bench.no_such_benchmark not in this checkout)"


def test_the_runner_knows_every_benchmark_in_the_folder_and_only_those() -> None:
    folder = Path(__file__).resolve().parents[2] / "bench"
    in_folder = {f"bench.{path.stem}" for path in folder.glob("bench_*.py")}
    in_folder |= {f"bench.{path.parent.name}" for path in folder.glob("*/__init__.py")}
    assert set(BENCHMARKS.values()) == in_folder
