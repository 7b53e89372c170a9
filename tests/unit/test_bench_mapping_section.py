"""The mapping benchmark's docs section: one table row per size, ratios the plot can tell apart, and
each ratio taken between the two sides of one alternation (wall against wall for end to end)."""

from __future__ import annotations

from bench.__main__ import markdown_tables, throughput_ratios
from bench.bench_mapping import ConsumerPerfRun, E2eRun, ScanRun, SizeRun, alternate, section_text


def size_run(
    records: int, perf_rate: float, scan_seconds: float, perf_wall: float, e2e_seconds: float
) -> SizeRun:
    perf = ConsumerPerfRun(records, records / perf_rate, perf_rate, perf_rate * 1.05, wall_seconds=99.0)
    walled = ConsumerPerfRun(
        records, records / perf_rate, perf_rate, perf_rate * 1.05, wall_seconds=perf_wall
    )
    return SizeRun(
        records=records,
        fill_seconds=10.0,
        spark_start=20.0,
        perf_runs=[perf, perf],
        scan_runs=[ScanRun(records, scan_seconds, 2), ScanRun(records, scan_seconds * 2, 2)],
        wall_perf_runs=[walled, walled],
        e2e_runs=[
            E2eRun(records, e2e_seconds, 1_500 * 2**20),
            E2eRun(records, e2e_seconds * 2, 1_400 * 2**20),
        ],
        sizes={"json": 1160, "csv": 559, "parquet": 3712},
    )


def test_each_size_is_a_row_and_each_ratio_a_distinct_plot_label() -> None:
    runs = [
        size_run(1_000_000, 500_000.0, 4.0, perf_wall=5.0, e2e_seconds=10.0),
        size_run(10_000_000, 400_000.0, 50.0, perf_wall=40.0, e2e_seconds=80.0),
    ]
    section = section_text(runs, partitions=2, load_before=1.0, load_after=2.0)
    (header, rows), *_ = markdown_tables(section)
    assert [row[0] for row in rows] == ["1,000,000 records", "10,000,000 records"]
    assert rows[0][header.index("mapping scan rec/s")] == "250,000"
    assert rows[0][header.index("ConsumerPerformance process rec/s")] == "200,000"
    assert rows[1][header.index("end to end peak RSS (Python + Spark JVM)")] == "1,500 MiB"
    document = f"<!-- mapping:start -->{section}<!-- mapping:end -->"
    ratios = throughput_ratios(document)
    # Scan against ConsumerPerformance's own rate; end to end against ConsumerPerformance's process
    # (1,000,000 / 5 s and 10,000,000 / 40 s), not against its own rate, which leaves the JVM out.
    assert ratios == [
        ("mapping: 1,000,000 records 2 partitions [mapping scan rec/s]", 0.5),
        ("mapping: 10,000,000 records 2 partitions [mapping scan rec/s]", 0.5),
        ("mapping: 1,000,000 records 2 partitions [show-offset-mapping process rec/s]", 0.5),
        ("mapping: 10,000,000 records 2 partitions [show-offset-mapping process rec/s]", 0.5),
    ]
    assert len({label for label, _ in ratios}) == len(ratios)
    assert "--rounds 2 --e2e-rounds 2" in section


def test_alternate_runs_both_sides_equally_often_interleaved() -> None:
    calls: list[str] = []
    alternate(3, lambda n: calls.append(f"A{n}"), lambda n: calls.append(f"B{n}"))
    assert calls == ["A1", "B1", "A2", "B2", "A3", "B3"]
