"""The restore benchmark: ProducerPerformance gets the restore's own producer settings, every run must
write the backup's records, and the report headlines like with like with the median and range of the
rounds' paired ratios."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.__main__ import markdown_tables, throughput_ratios
from bench._restore_perf import Measured, build_backup, restore_producer_props
from bench.bench_restore import (
    EXACTLY_ONCE,
    IDEMPOTENT,
    PP_DEFAULTS,
    PP_SAME,
    PP_SAME_TX,
    SIDES,
    Case,
    check_counts,
    report,
)
from kbackup.format.catalog import BackupCatalog
from kbackup.restore.writer import PRODUCER_TUNING
from kbackup.storage import LocalStorage


def test_the_restore_settings_given_to_producer_performance_are_the_restore_producers() -> None:
    props, left_out = restore_producer_props()
    settings = dict(prop.split("=", 1) for prop in props)
    assert settings["acks"] == "all"
    assert settings["enable.idempotence"] == "true"
    assert settings["linger.ms"] == str(PRODUCER_TUNING["linger.ms"])
    assert settings["batch.size"] == str(PRODUCER_TUNING["batch.size"])
    assert settings["compression.type"] == PRODUCER_TUNING["compression.type"]
    assert settings["max.request.size"] == str(PRODUCER_TUNING["message.max.bytes"])
    assert int(settings["buffer.memory"]) == PRODUCER_TUNING["queue.buffering.max.kbytes"] * 1024
    # Every setting of the restore is either handed over or named as left out.
    assert len(props) - 2 + len(left_out) == len(PRODUCER_TUNING)
    # A change to the restore's tuning changes the reference too.
    changed, _ = restore_producer_props({**PRODUCER_TUNING, "linger.ms": 5})
    assert "linger.ms=5" in changed


def measured(records: int, *, transactions: int = 0, mode: str = "") -> Measured:
    return Measured("x", records, 100, 1.0, 0, transactions=transactions, mode=mode)


def test_a_run_that_wrote_other_than_the_backups_records_stops_the_benchmark() -> None:
    check_counts(IDEMPOTENT, measured(1_000), 1_000, log_end=1_000)
    check_counts(PP_DEFAULTS, measured(1_000), 1_000, log_end=1_000)
    check_counts(EXACTLY_ONCE, measured(1_000, transactions=2, mode="exactly-once"), 1_000, log_end=1_006)
    check_counts(PP_SAME_TX, measured(1_000), 1_000, log_end=1_003)
    with pytest.raises(RuntimeError, match="reports 999 records"):
        check_counts(IDEMPOTENT, measured(999), 1_000, log_end=999)
    with pytest.raises(RuntimeError, match="log end offsets add up to 1,001"):
        check_counts(PP_SAME, measured(1_000), 1_000, log_end=1_001)
    with pytest.raises(RuntimeError, match="no room for commit markers"):
        check_counts(PP_SAME_TX, measured(1_000), 1_000, log_end=1_000)
    with pytest.raises(RuntimeError, match="more than 1,000 records"):
        check_counts(EXACTLY_ONCE, measured(1_000, transactions=1, mode="exactly-once"), 1_000, log_end=1_004)
    with pytest.raises(RuntimeError, match="mode 'idempotent'"):
        check_counts(EXACTLY_ONCE, measured(1_000, transactions=1, mode="idempotent"), 1_000, log_end=1_002)


def test_the_restore_report_headlines_like_with_like_with_median_and_range() -> None:
    case = Case(100, 1_000)
    rates = {
        PP_DEFAULTS: [100.0, 200.0, 300.0],
        PP_SAME: [50.0, 100.0, 200.0],
        PP_SAME_TX: [40.0, 80.0, 80.0],
    }
    rates |= {IDEMPOTENT: [50.0, 50.0, 100.0], EXACTLY_ONCE: [40.0, 40.0, 40.0]}
    for name, values in rates.items():
        case.runs[name] = [Measured(name, 1_000, 100, 1_000 / value, 2**20) for value in values]
    case.orders = [list(SIDES)] * 3
    text = report([case], rounds=3, seconds=60.0)
    rate_table, ratio_table = markdown_tables(text)
    header, rows = ratio_table
    row = dict(zip(header, rows[0], strict=False))
    # Per round: idempotent / same settings 1.0, 0.5, 0.5; exactly-once / transactions 1.0, 0.5, 0.5.
    assert rows[0][2:6] == ["0.50", "0.50-1.00", "0.50", "0.50-1.00"]
    # Per round: 50 / 100, 50 / 200, 100 / 300: the median of the ratios, not a ratio of medians.
    assert row["ratio idempotent / PP defaults"] == "0.33"
    assert rate_table[1][0][3].startswith("200 (100-300) rec/s")
    labels = [label for label, _ in throughput_ratios(f"<!-- restore:start -->{text}<!-- restore:end -->")]
    assert labels[0] == "restore: 100 B 1,000 [ratio idempotent / PP restore's settings]"
    assert len(labels) == 4


def test_the_benchmarks_backup_holds_every_record_even_when_partitions_do_not_divide_them(
    tmp_path: Path,
) -> None:
    # 100,000 records over 3 partitions once made a backup of 99,999, restored against 100,000 sent.
    build_backup(
        tmp_path / "store", "b", record_size=10, records=10, partitions=3, topic="bench", scratch=tmp_path
    )
    backup = BackupCatalog(LocalStorage(tmp_path / "store")).load("b")
    assert sorted(entry.record_count for entry in backup.latest.partitions) == [3, 3, 4]
