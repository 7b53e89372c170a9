"""The backup-workers and restore-compression benchmarks: paired per-round ratios of rates and of
CPU per record, and the JSON events that stand for application records."""

from __future__ import annotations

import json

from bench.__main__ import markdown_tables
from bench._restore_perf import Measured
from bench.bench_backup_workers import DEFAULT, LOOP, LOOP_2, ONE, TWO, Run
from bench.bench_backup_workers import Case as WorkersCase
from bench.bench_backup_workers import report as workers_report
from bench.bench_compression import CODECS, event_payloads
from bench.bench_compression import Case as CompressionCase
from bench.bench_compression import report as compression_report


def test_the_backup_workers_report_takes_ratios_per_round() -> None:
    case = WorkersCase(100, 1_000_000)
    # (records/s, CPU seconds per million records) per round.
    runs = {
        LOOP: [(900.0, 1.0), (900.0, 1.0), (900.0, 2.0)],
        LOOP_2: [(1_080.0, 1.1), (990.0, 1.0), (1_350.0, 2.0)],
        ONE: [(100.0, 1.5), (200.0, 1.5), (100.0, 2.0)],
        TWO: [(150.0, 3.0), (100.0, 1.5), (100.0, 3.0)],
        DEFAULT: [(100.0, 1.5), (200.0, 1.5), (100.0, 2.0)],
    }
    for side, values in runs.items():
        case.runs[side] = [Run(1_000_000, 1_000_000 / rate, cpu) for rate, cpu in values]
    _, ratios = markdown_tables(workers_report([case], rounds=3, seconds=60.0, argv=""))[:2]
    row = dict(zip(ratios[0], ratios[1][0], strict=True))
    # Rates per round 150/100, 100/200, 100/100: the median of the ratios, not a ratio of medians.
    assert row["2 workers / 1 worker (records/s)"] == "1.00 (0.50-1.50)"
    assert row["default / 1 worker (records/s)"] == "1.00 (1.00-1.00)"
    # What a second process gives the bare client, per round 1.2, 1.1, 1.5.
    assert row["consumer loop, 2 processes / 1 (records/s)"] == "1.20 (1.10-1.50)"
    # CPU per round 1.5/1.0, 1.5/1.0, 2.0/2.0.
    assert row["backup 1 worker / consumer loop (CPU per record)"] == "1.50 (1.00-1.50)"


def test_the_events_are_json_of_the_record_size() -> None:
    for size in (100, 1024):
        payloads = event_payloads(size, distinct=50)
        assert {len(payload) for payload in payloads} == {size}
        assert len(set(payloads)) == 50
    # A 1 KiB event holds order lines: the repetition application records have.
    event = json.loads(event_payloads(1024, distinct=1)[0])
    assert event["lines"]
    assert event["status"] in {"CREATED", "PAID", "PACKED", "SHIPPED", "DELIVERED", "RETURNED"}


def test_the_compression_report_gives_cpu_rate_and_bytes_on_disk_per_codec() -> None:
    case = CompressionCase("events", 100, 1_000)
    for number, codec in enumerate(CODECS):
        case.runs[codec] = [Measured(codec, 1_000, 100, 0.5, 0, cpu_seconds=0.004 + number / 1000)]
        case.disk_bytes[codec] = [268_000 // (number + 1)]
    header, rows = markdown_tables(compression_report([case], rounds=1, seconds=60.0, argv=""))[0]
    row = dict(zip(header, rows[0], strict=True))
    assert row["none CPU s/M"] == "4.00"
    assert row["zstd CPU s/M"] == "6.00"
    assert row["lz4 rec/s"] == "2,000"
    assert row["lz4 B/record on disk"] == "134"
