"""What client-side encryption costs: backup and restore with it against without, side by side.

    .venv/bin/python -m bench.bench_encryption [--rounds N] [--quick] [--write-docs]

One local single-node Kafka 4.3 cluster; the 1 KiB topics of the backup and
restore benchmarks, filled by ProducerPerformance: 250,000 and 2,000,000
records for the backup (bench_backup's), 250,000 and 1,000,000 for the restore
(bench_restore's). Each round:

- backs up the topic with ``kafka-backup backup`` twice, to a folder: without
  encryption and with ``--encryption-key file:KEY`` (zstd level 1, as both
  benchmarks), the order of the two rotated from round to round;
- restores the two backups of the topic (taken once, before the rounds) with
  ``kafka-backup restore --idempotent`` into fresh topics, the order rotated too.

Every run must copy exactly the topic's records (the backup's and the
restore's summary counts). The rate is records over the run time each command
reports itself; the ratio is taken per round between the two runs of that
round, and the table gives its median and range over the rounds. The issue's
bound: at least 0.9 of the unencrypted rate on each.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench._perf import measured_backup, produce_perf, replace_section
from bench._restore_perf import Measured, create_topic, delete_topic, log_end_offsets, restore_cli
from bench._stats import rotated
from kbackup.sandbox.kafka import local_clusters
from kbackup.storage.keys import new_key_text

START_MARKER = "<!-- encryption:start -->"
END_MARKER = "<!-- encryption:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
RECORD_SIZE = 1024
PLAIN, ENCRYPTED = "without encryption", "encrypted"
BOUND = 0.9


@dataclass
class Side:
    """One operation (backup or restore) on one topic: each variant's rates over the rounds."""

    operation: str
    records: int
    rates: dict[str, list[float]] = field(default_factory=dict)
    #: CPU seconds (user and system, all threads) per million records, each run.
    cpu: dict[str, list[float]] = field(default_factory=dict)
    peak_rss: dict[str, int] = field(default_factory=dict)

    def add(self, variant: str, records_per_second: float, rss: int, cpu_seconds: float) -> None:
        self.rates.setdefault(variant, []).append(records_per_second)
        self.cpu.setdefault(variant, []).append(cpu_seconds / self.records * 1e6)
        self.peak_rss[variant] = max(self.peak_rss.get(variant, 0), rss)

    def ratios(self) -> list[float]:
        return [e / p for e, p in zip(self.rates[ENCRYPTED], self.rates[PLAIN], strict=True)]

    def cpu_ratios(self) -> list[float]:
        return [e / p for e, p in zip(self.cpu[ENCRYPTED], self.cpu[PLAIN], strict=True)]


def children_cpu_seconds() -> float:
    """CPU of this process's finished, waited-for children: taken before and after one command, the
    difference is that command's (the broker, also a child, is still running, so not in it)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def backup_round(bootstrap: str, topic: str, side: Side, work: Path, key_file: Path, round_: int) -> None:
    for variant in rotated([PLAIN, ENCRYPTED], round_):
        flags = ["--encryption-key", f"file:{key_file}"] if variant == ENCRYPTED else []
        target = work / f"backup-{topic}-{round_}-{variant.split()[0]}"
        result = measured_backup(bootstrap, topic, target, "bench", flags, compression_level=1)
        # wait4's rusage of the backup process itself.
        cpu = result.cpu_seconds
        if result.records != side.records:
            raise RuntimeError(f"backup ({variant}) copied {result.records} records of {side.records}")
        shutil.rmtree(target, ignore_errors=True)
        side.add(variant, result.records / result.seconds, result.peak_rss_bytes, cpu)
        rate = result.records / result.seconds
        print(f"  backup  {side.records:>9,} round {round_}: {variant:20} {rate:>10,.0f} rec/s", flush=True)


def restore_round(
    bootstrap: str, topic: str, side: Side, stores: dict[str, Path], key_file: Path, round_: int
) -> None:
    for variant in rotated([PLAIN, ENCRYPTED], round_):
        target_topic = f"restored-{topic}-{round_}-{variant.split()[0]}-{int(time.time())}"
        extra = ["--encryption-key", f"file:{key_file}"] if variant == ENCRYPTED else []
        cpu_before = children_cpu_seconds()
        measured: Measured = restore_cli(
            stores[variant], "bench", bootstrap, topic=topic, target_topic=target_topic,
            exactly_once=False, record_size=RECORD_SIZE, extra=extra,
        )  # fmt: skip
        cpu = children_cpu_seconds() - cpu_before
        log_end = log_end_offsets(bootstrap, target_topic)
        if measured.records != side.records or log_end != side.records:
            raise RuntimeError(
                f"restore ({variant}) wrote {measured.records} records (log end {log_end}) of {side.records}"
            )
        delete_topic(bootstrap, target_topic)
        side.add(variant, measured.records_per_second, measured.peak_rss_bytes, cpu)
        rate = measured.records_per_second
        print(f"  restore {side.records:>9,} round {round_}: {variant:20} {rate:>10,.0f} rec/s", flush=True)


def spread(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def table(sides: list[Side]) -> str:
    lines = [
        "| operation | 1 KiB records | without encryption rec/s | encrypted rec/s | encrypted / without, "
        "median (range) | CPU s per 1M records, without / encrypted | CPU encrypted / without, median "
        "(range) | peak RSS without / encrypted |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for side in sides:
        lines.append(
            f"| {side.operation} | {side.records:,} | {statistics.median(side.rates[PLAIN]):,.0f} "
            f"| {statistics.median(side.rates[ENCRYPTED]):,.0f} | {spread(side.ratios())} "
            f"| {statistics.median(side.cpu[PLAIN]):,.1f} / {statistics.median(side.cpu[ENCRYPTED]):,.1f} "
            f"| {spread(side.cpu_ratios())} "
            f"| {side.peak_rss[PLAIN] / 2**20:,.0f} / {side.peak_rss[ENCRYPTED] / 2**20:,.0f} MiB |"
        )
    return "\n".join(lines)


def verdict(sides: list[Side]) -> str:
    worst = min(sides, key=lambda side: statistics.median(side.ratios()))
    median = statistics.median(worst.ratios())
    met = "met" if all(statistics.median(side.ratios()) >= BOUND for side in sides) else "not met"
    return (
        f"Bound (encrypted >= {BOUND} x without, median of the rounds): **{met}**; the lowest median is "
        f"{median:.2f}, the {worst.operation} of {worst.records:,} records."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--backup-records", default="250000,2000000", help="backup topics (comma-separated)")
    parser.add_argument(
        "--restore-records", default="250000,1000000", help="restore topics (comma-separated)"
    )
    parser.add_argument("--write-docs", action="store_true", help=f"write the table into {DOC}")
    parser.add_argument("--quick", action="store_true", help="20,000 records, 2 rounds (a smoke run)")
    args = parser.parse_args()
    backup_sizes = [int(n) for n in args.backup_records.split(",")]
    restore_sizes = [int(n) for n in args.restore_records.split(",")]
    if args.quick:
        backup_sizes, restore_sizes, args.rounds = [20_000], [20_000], 2
    start_load, started = os.getloadavg(), time.monotonic()
    sides: list[Side] = []
    with (
        tempfile.TemporaryDirectory(prefix="kbackup-bench-encryption-") as work_dir,
        local_clusters(["bench"]) as clusters,
    ):
        work = Path(work_dir)
        key_file = work / "backup.key"
        key_file.write_text(new_key_text())
        bootstrap = clusters[0].bootstrap_servers
        topics = {records: f"bench-1024b-{records}" for records in sorted({*backup_sizes, *restore_sizes})}
        for records, topic in topics.items():
            create_topic(bootstrap, topic, 1)
            print(f"{topic}: {produce_perf(bootstrap, topic, records, RECORD_SIZE)}", flush=True)
        # Warm-up: JIT, page cache and imports, before anything is timed.
        smallest = min(topics)
        for flags in ([], ["--encryption-key", f"file:{key_file}"]):
            measured_backup(bootstrap, topics[smallest], work / "warm-up", "bench", flags)
            shutil.rmtree(work / "warm-up", ignore_errors=True)
        for records in backup_sizes:
            side = Side("backup", records)
            for round_ in range(args.rounds):
                backup_round(bootstrap, topics[records], side, work, key_file, round_)
            sides.append(side)
        for records in restore_sizes:
            stores = {
                variant: work / f"restore-source-{records}-{variant.split()[0]}"
                for variant in (PLAIN, ENCRYPTED)
            }
            for variant, store in stores.items():
                flags = ["--encryption-key", f"file:{key_file}"] if variant == ENCRYPTED else []
                measured_backup(bootstrap, topics[records], store, "bench", flags, compression_level=1)
            side = Side("restore (idempotent)", records)
            for round_ in range(args.rounds):
                restore_round(bootstrap, topics[records], side, stores, key_file, round_)
            sides.append(side)
            for store in stores.values():
                shutil.rmtree(store, ignore_errors=True)
    result = table(sides)
    print()
    print(result)
    print()
    print(verdict(sides))
    if args.write_docs:
        load = os.getloadavg()
        body = "\n".join(
            [
                "## Encryption",
                "",
                f"Measured {datetime.now(UTC):%Y-%m-%d} with `.venv/bin/python -m bench.bench_encryption "
                f"--rounds {args.rounds} --backup-records {args.backup_records} --restore-records "
                f"{args.restore_records}` ({(time.monotonic() - started) / 60:.0f} min) on {os.cpu_count()} "
                f"cores ({platform.machine()}, Python {platform.python_version()}), one local single-node "
                "Kafka 4.3.1 broker, a local folder as storage, zstd level 1, a key file "
                "(`storage.encryption.key_file`). Per round each operation runs without and with "
                "encryption, the order rotated; rates are the median of the rounds, the ratio is taken "
                "per round. Load average (1/5/15 min) at the start "
                f"{start_load[0]:.1f} / {start_load[1]:.1f} / {start_load[2]:.1f}, at the end "
                f"{load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.",
                "",
                result,
                "",
                verdict(sides),
                "",
                "- Encrypted, each segment is Parquet Modular Encryption (AES-GCM over every page and the "
                "footer, a fresh data key per file) and each manifest is sealed with AES-256-GCM: "
                "[security.md](security.md). The key file is read once; no KMS is involved here.",
                "- CPU: user and system seconds of the command's process (all its threads), per million "
                "records; steadier than the rates on a shared machine, as it does not count the time the "
                "process waited for a core.",
                "- The restore reads both backups the same way: size and SHA-256 of every segment "
                "first, then the records; encrypted, each page is also authenticated and decrypted.",
            ]
        )
        replace_section(DOC, START_MARKER, END_MARKER, body)
        print(f"\nwritten to {DOC}")


if __name__ == "__main__":
    main()
