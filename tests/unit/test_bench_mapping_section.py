"""The mapping benchmark's docs section: one table row per size, and ratios the plot can tell apart."""

from __future__ import annotations

from bench.__main__ import markdown_tables, throughput_ratios
from bench.bench_mapping import ConsumerPerfRun, ScanRun, SizeRun, section_text


def size_run(records: int, perf_rate: float, scan_seconds: float, e2e_seconds: float) -> SizeRun:
    perf = ConsumerPerfRun(records, records / perf_rate, perf_rate, perf_rate * 1.05)
    return SizeRun(
        records=records,
        fill_seconds=10.0,
        spark_start=20.0,
        perf_runs=[perf, perf],
        scan_runs=[ScanRun(records, scan_seconds, 2), ScanRun(records, scan_seconds * 2, 2)],
        e2e_seconds=e2e_seconds,
        e2e_peak_rss=1_500 * 2**20,
        sizes={"json": 1160, "csv": 559, "parquet": 3712},
    )


def test_each_size_is_a_row_and_each_ratio_a_distinct_plot_label() -> None:
    runs = [size_run(1_000_000, 500_000.0, 4.0, 10.0), size_run(10_000_000, 400_000.0, 50.0, 80.0)]
    section = section_text(runs, partitions=2, load_before=1.0, load_after=2.0)
    (header, rows), *_ = markdown_tables(section)
    assert [row[0] for row in rows] == ["1,000,000 records", "10,000,000 records"]
    assert rows[0][header.index("mapping scan rec/s")] == "250,000"
    assert rows[1][header.index("end to end peak RSS (Python + Spark JVM)")] == "1,500 MiB"
    document = f"<!-- mapping:start -->{section}<!-- mapping:end -->"
    ratios = throughput_ratios(document)
    assert ratios == [
        ("mapping: 1,000,000 records 2 partitions [mapping scan rec/s]", 0.5),
        ("mapping: 10,000,000 records 2 partitions [mapping scan rec/s]", 0.5),
        ("mapping: 1,000,000 records 2 partitions [show-offset-mapping end to end rec/s]", 0.2),
        ("mapping: 10,000,000 records 2 partitions [show-offset-mapping end to end rec/s]", 0.31),
    ]
    assert len({label for label, _ in ratios}) == len(ratios)
