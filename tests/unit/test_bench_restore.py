"""The restore benchmark: ProducerPerformance gets the restore's own producer settings, every run must
write the backup's records, and the report headlines like with like with the median and range of the
rounds' paired ratios."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.__main__ import markdown_tables, throughput_ratios
from bench._client_floor import _records
from bench._floor_span import TWO_WORKER_SPLIT
from bench._restore_perf import Measured, build_backup, joined_floor_result, restore_producer_props
from bench.bench_restore import (
    EXACTLY_ONCE,
    EXACTLY_ONCE_1,
    FLOOR,
    FLOOR_NO_HEADERS,
    FLOOR_TX,
    FLOOR_TX_2,
    IDEMPOTENT_1,
    PEER,
    PP_SAME_TX,
    SIDES,
    Case,
    check_counts,
    report,
)
from kbackup.format.catalog import BackupCatalog
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.writer import PRODUCER_TUNING
from kbackup.storage import LocalStorage


def test_the_restore_settings_given_to_producer_performance_are_the_restore_producers() -> None:
    props, left_out = restore_producer_props()
    settings = dict(prop.split("=", 1) for prop in props)
    assert settings["acks"] == "all"
    assert settings["enable.idempotence"] == "true"
    assert settings["linger.ms"] == str(PRODUCER_TUNING["linger.ms"])
    assert settings["batch.size"] == str(PRODUCER_TUNING["batch.size"])
    assert settings["compression.type"] == RestoreSettings().compression
    assert settings["max.request.size"] == str(PRODUCER_TUNING["message.max.bytes"])
    assert int(settings["buffer.memory"]) == PRODUCER_TUNING["queue.buffering.max.kbytes"] * 1024
    # Every setting of the restore is either handed over or named as left out.
    assert len(props) - 2 + len(left_out) == len(PRODUCER_TUNING) + 1  # and the compression
    # A change to the restore's tuning changes the reference too.
    changed, _ = restore_producer_props({**PRODUCER_TUNING, "linger.ms": 5})
    assert "linger.ms=5" in changed


def measured(records: int, *, transactions: int = 0, mode: str = "") -> Measured:
    return Measured("x", records, 100, 1.0, 0, transactions=transactions, mode=mode)


def test_a_run_that_wrote_other_than_the_backups_records_stops_the_benchmark() -> None:
    check_counts(IDEMPOTENT_1, measured(1_000), 1_000, log_end=1_000)
    check_counts(FLOOR, measured(1_000), 1_000, log_end=1_000)
    check_counts(EXACTLY_ONCE, measured(1_000, transactions=2, mode="exactly-once"), 1_000, log_end=1_006)
    check_counts(PP_SAME_TX, measured(1_000), 1_000, log_end=1_003)
    check_counts(FLOOR_TX, measured(1_000), 1_000, log_end=1_003)
    with pytest.raises(RuntimeError, match="reports 999 records"):
        check_counts(IDEMPOTENT_1, measured(999), 1_000, log_end=999)
    with pytest.raises(RuntimeError, match="log end offsets add up to 1,001"):
        check_counts(FLOOR, measured(1_000), 1_000, log_end=1_001)
    with pytest.raises(RuntimeError, match="no room for commit markers"):
        check_counts(FLOOR_TX, measured(1_000), 1_000, log_end=1_000)
    with pytest.raises(RuntimeError, match="more than 1,000 records"):
        check_counts(
            EXACTLY_ONCE_1, measured(1_000, transactions=1, mode="exactly-once"), 1_000, log_end=1_004
        )
    with pytest.raises(RuntimeError, match="mode 'idempotent'"):
        check_counts(EXACTLY_ONCE, measured(1_000, transactions=1, mode="idempotent"), 1_000, log_end=1_002)


def test_the_restore_report_gives_paired_ratios_of_rates_and_of_cpu_per_record() -> None:
    case = Case(100, 1_000)
    # (records/s, CPU seconds) per round.
    runs = {
        PP_SAME_TX: [(40.0, 9.0), (80.0, 9.0), (80.0, 9.0)],
        FLOOR_NO_HEADERS: [(200.0, 0.002), (200.0, 0.002), (200.0, 0.002)],
        FLOOR: [(100.0, 0.004), (100.0, 0.004), (100.0, 0.004)],
        FLOOR_TX: [(80.0, 0.005), (80.0, 0.005), (80.0, 0.010)],
        FLOOR_TX_2: [(100.0, 0.006), (120.0, 0.006), (80.0, 0.010)],
        IDEMPOTENT_1: [(50.0, 0.004), (50.0, 0.006), (100.0, 0.004)],
        EXACTLY_ONCE_1: [(40.0, 0.005), (40.0, 0.006), (40.0, 0.005)],
        EXACTLY_ONCE: [(60.0, 0.006), (80.0, 0.006), (40.0, 0.010)],
    }
    for name, values in runs.items():
        case.runs[name] = [
            Measured(name, 1_000, 100, 1_000 / rate, 2**20, cpu_seconds=cpu) for rate, cpu in values
        ]
    case.orders = [list(SIDES)] * 3
    text = report([case], rounds=3, seconds=60.0)
    rate_table, cpu_table, ratio_table, cpu_ratio_table = markdown_tables(text)[:4]
    row = dict(zip(ratio_table[0], ratio_table[1][0], strict=False))
    # Per round 60/40, 80/40, 40/40: the median of the ratios, not a ratio of medians.
    assert row["2 workers / 1 worker (exactly-once)"] == "1.50"
    assert ratio_table[1][0][3] == "1.00-2.00"
    # The client's own gain from a second process, per round 100/80, 120/80, 80/80.
    assert row["client loop + transactions, 2 processes / 1"] == "1.25"
    cpu_row = dict(zip(cpu_ratio_table[0], cpu_ratio_table[1][0], strict=False))
    # Per round 4/4, 6/4, 4/4 us per record.
    assert cpu_row["idempotent, 1 worker / client loop"] == "1.00"
    assert cpu_row["client loop, 5 headers / no headers"] == "2.00"
    # Per round 6/5, 6/5, 10/10.
    assert cpu_row["exactly-once, 2 workers / client loop + transactions"] == "1.20"
    assert cpu_table[1][0][4].startswith("4.0 (4.0-4.0)")
    assert rate_table[1][0][5].startswith("100 (100-100) rec/s")
    labels = [label for label, _ in throughput_ratios(f"<!-- restore:start -->{text}<!-- restore:end -->")]
    assert labels == [
        "restore: 100 B 1,000 [ratio exactly-once, 2 workers / PP restore's settings + transactions]",
        "restore: 100 B 1,000 [ratio exactly-once, 1 worker / PP restore's settings + transactions]",
    ]


def test_the_peer_is_compared_by_wall_time_with_the_default_one_worker_and_with_two() -> None:
    # Issue 40 asks for the restore "with its default workers" against the peer: on this 2-core
    # machine `auto` picks one, so both layouts get a column, by wall time (start-up included).
    case = Case(100, 1_000)
    for name in (*SIDES, PEER):
        case.runs[name] = [Measured(name, 1_000, 100, 1.0, 0, wall_seconds=2.0, cpu_seconds=0.005)] * 3
    # Wall seconds per round: the peer 4, 4, 2; one worker 5, 4, 1; two workers 2, 8, 2.
    case.runs[PEER] = [Measured(PEER, 1_000, 100, w, 0, wall_seconds=w) for w in (4.0, 4.0, 2.0)]
    case.runs[EXACTLY_ONCE_1] = [
        Measured(EXACTLY_ONCE_1, 1_000, 100, 1.0, 0, wall_seconds=w, cpu_seconds=0.005)
        for w in (5.0, 4.0, 1.0)
    ]
    case.runs[EXACTLY_ONCE] = [
        Measured(EXACTLY_ONCE, 1_000, 100, 1.0, 0, wall_seconds=w, cpu_seconds=0.005) for w in (2.0, 8.0, 2.0)
    ]
    case.orders = [[*SIDES, PEER]] * 3
    ratio_table = markdown_tables(report([case], rounds=3, seconds=60.0))[2]
    row = dict(zip(ratio_table[0], ratio_table[1][0], strict=False))
    # Records/s of wall time, per round: 4/5, 4/4, 2/1 for one worker; 4/2, 4/8, 2/2 for two.
    assert row["exactly-once, 1 worker (auto here) / peer (wall)"] == "1.00"
    assert row["exactly-once, 2 workers / peer (wall)"] == "1.00"
    header = ratio_table[0]
    one = header.index("exactly-once, 1 worker (auto here) / peer (wall)")
    two = header.index("exactly-once, 2 workers / peer (wall)")
    assert ratio_table[1][0][one + 1] == "0.80-2.00"
    assert ratio_table[1][0][two + 1] == "0.50-2.00"


def test_the_benchmarks_backup_holds_every_record_even_when_partitions_do_not_divide_them(
    tmp_path: Path,
) -> None:
    # 100,000 records over 3 partitions once made a backup of 99,999, restored against 100,000 sent.
    build_backup(
        tmp_path / "store", "b", record_size=10, records=10, partitions=3, topic="bench", scratch=tmp_path
    )
    backup = BackupCatalog(LocalStorage(tmp_path / "store")).load("b")
    assert sorted(entry.record_count for entry in backup.latest.partitions) == [3, 3, 4]


def test_two_client_loop_processes_send_every_record_once_and_join_into_one_span() -> None:
    # The split is the records of a whole run, each partition's in one process only.
    whole = _records(1_000, 10, 3, headers=True)
    parts = [_records(1_000, 10, 3, headers=True, only=set(group)) for group in TWO_WORKER_SPLIT]

    def batches(
        sent: list[tuple[int, list[bytes], list[int], list[Any] | None]],
    ) -> list[tuple[int, list[bytes], int]]:
        return sorted((partition, values, len(headers or ())) for partition, values, _, headers in sent)

    assert batches([batch for part in parts for batch in part]) == batches(whole)
    assert [{p for p, *_ in part} for part in parts] == [{0, 2}, {1}]
    assert sum(len(values) for part in parts for _, values, _, _ in part) == 1_000
    # Two processes' lines: the span from the first start to the last end, CPU and memory summed.
    lines = [
        {"records": 667, "seconds": 4.0, "cpu_seconds": 5.0, "peak_rss_bytes": 100,
         "started_at": 1000.5, "ended_at": 1004.5},
        {"records": 333, "seconds": 2.0, "cpu_seconds": 2.5, "peak_rss_bytes": 60,
         "started_at": 1000.0, "ended_at": 1002.0},
    ]  # fmt: skip
    joined = joined_floor_result(FLOOR_TX_2, 10, lines, wall_seconds=9.0)
    assert (joined.records, joined.seconds) == (1_000, 4.5)
    assert (joined.cpu_seconds, joined.peak_rss_bytes) == (7.5, 160)
    assert joined.wall_seconds == 9.0
