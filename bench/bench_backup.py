"""Backup throughput against Kafka's own ConsumerPerformance, and the backup's peak memory.

    .venv/bin/python -m bench.bench_backup [--records-100 N] [--records-1k N] [--factor F]
                                           [--repeat R] [--partitions P] [--quick]
                                           [--nodes 1,3] [--write-docs]

Starts one local single-node cluster (``--nodes``: a cluster of each count, a
three-node one with replication factor 3 and ``min.insync.replicas=2``), fills topics of 100-byte and 1 KiB
records with ProducerPerformance, then for each topic runs ConsumerPerformance
and a ``kafka-backup backup`` process (to a local folder, zstd) one after the
other, ``--repeat`` rounds after a warm-up, which of them goes first rotating
from round to round, and keeps each side's best run (and the median of the
rounds' paired ratios).
Every record size is measured at two topic sizes (the second ``--factor``
times the first) to show that the backup's peak RSS does not grow with the
topic. Broker, tool and backup share this machine's cores, so figures move
with whatever else runs; the ratio of runs made side by side is the number
to compare.

With several node counts, each topic is filled and measured on every cluster,
the clusters taking turns going first from topic to topic; the report adds
replication's cost (each side's best rate on the larger cluster over its best
on the single node), the compression comparison is left out, and
``--write-docs`` writes the "Backup on three nodes" section instead.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench._perf import (
    BackupRunResult,
    ConsumerPerfResult,
    cluster_heading,
    cluster_words,
    consumer_perf,
    create_topic,
    measured_backup,
    node_counts_of,
    produce_perf,
    refuse_smoke_figures_in_docs,
    replace_section,
)
from bench._stats import rotated
from kbackup.backup.settings import BackupSettings
from kbackup.sandbox.kafka import local_clusters

START_MARKER = "<!-- backup:start -->"
END_MARKER = "<!-- backup:end -->"
#: The section a run on several node counts writes (the single-node Backup section stays).
NODES_START_MARKER, NODES_END_MARKER = "<!-- backup-nodes:start -->", "<!-- backup-nodes:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


@dataclass(frozen=True)
class Row:
    record_size: int
    records: int
    consumer: ConsumerPerfResult
    backup: BackupRunResult
    #: backup / ConsumerPerformance records/s of each pair of runs made one after the other.
    paired_ratios: tuple[float, ...]

    @property
    def backup_records_per_sec(self) -> float:
        return self.backup.records / self.backup.seconds

    @property
    def backup_mb_per_sec(self) -> float:
        # ConsumerPerformance counts payload bytes in MB of 2^20 bytes; so does this.
        return self.backup.records * self.record_size / self.backup.seconds / (1024 * 1024)

    @property
    def ratio(self) -> float:
        return self.backup_records_per_sec / self.consumer.records_per_sec

    @property
    def ratio_to_fetch(self) -> float:
        return self.backup_records_per_sec / self.consumer.fetch_records_per_sec


def best_consumer(results: list[ConsumerPerfResult]) -> ConsumerPerfResult:
    return max(results, key=lambda r: r.records_per_sec)


def best_backup(results: list[BackupRunResult]) -> BackupRunResult:
    fastest = max(results, key=lambda r: r.records / r.seconds)
    # Memory: the worst run counts.
    peak = max(r.peak_rss_bytes for r in results)
    return BackupRunResult(
        records=fastest.records,
        seconds=fastest.seconds,
        wall_seconds=fastest.wall_seconds,
        peak_rss_bytes=peak,
        stored_bytes=fastest.stored_bytes,
    )


def paired_ratios(consumers: list[ConsumerPerfResult], backups: list[BackupRunResult]) -> tuple[float, ...]:
    """Backup / ConsumerPerformance records/s of each pair of runs made one after the other."""
    return tuple((b.records / b.seconds) / c.records_per_sec for c, b in zip(consumers, backups, strict=True))


#: ConsumerPerformance's name among the sides of a round.
CONSUMER_PERF = "ConsumerPerformance"


def round_order(variants: list[str], attempt: int) -> list[str]:
    """Who runs when in round ``attempt``: ConsumerPerformance and each backup variant, the order
    rotated by one place a round, so ConsumerPerformance too takes every place in turn."""
    return rotated([CONSUMER_PERF, *variants], attempt)


def measure_variants(
    bootstrap: str,
    topic: str,
    records: int,
    repeat: int,
    work: Path,
    variants: dict[str, dict[str, object]],
) -> tuple[list[ConsumerPerfResult], dict[str, list[BackupRunResult]]]:
    """Each round runs ConsumerPerformance and a backup with each variant's settings, in an order
    rotated between rounds (``round_order``) so that a load change hits each of them alike."""
    names = list(variants)
    consumers: list[ConsumerPerfResult] = []
    backups: dict[str, list[BackupRunResult]] = {name: [] for name in names}
    for attempt in range(repeat):
        line = [f"  run {attempt + 1}:"]
        for name in round_order(names, attempt):
            if name == CONSUMER_PERF:
                consumers.append(consumer_perf(bootstrap, topic, records))
                line.append(f"ConsumerPerformance {consumers[-1].records_per_sec:,.0f} rec/s")
                continue
            target = work / f"{topic}-{name}-{attempt}"
            result = measured_backup(bootstrap, topic, target, "bench", **variants[name])
            if result.records != records:
                raise RuntimeError(f"backup ({name}) copied {result.records} records of {records}")
            shutil.rmtree(target, ignore_errors=True)
            backups[name].append(result)
            line.append(
                f"{name} {result.records / result.seconds:,.0f} rec/s "
                f"(peak RSS {result.peak_rss_bytes / 2**20:,.0f} MiB)"
            )
        print(" ".join(line[:1]) + " " + ", ".join(line[1:]), flush=True)
    return consumers, backups


def measure(
    bootstrap: str, topic: str, records: int, repeat: int, work: Path, compression_level: int
) -> tuple[ConsumerPerfResult, BackupRunResult, tuple[float, ...]]:
    variants: dict[str, dict[str, object]] = {"backup": {"compression_level": compression_level}}
    consumers, backups = measure_variants(bootstrap, topic, records, repeat, work, variants)
    return (
        best_consumer(consumers),
        best_backup(backups["backup"]),
        paired_ratios(consumers, backups["backup"]),
    )


@dataclass(frozen=True)
class CodecRow:
    label: str
    records: int
    consumer: ConsumerPerfResult
    backup: BackupRunResult
    paired_ratios: tuple[float, ...]


def measure_codecs(
    bootstrap: str, topic: str, records: int, repeat: int, work: Path, codecs: list[str], zstd_level: int
) -> list[CodecRow]:
    """The same topic backed up with each codec, in paired rounds (see ``measure_variants``)."""
    variants: dict[str, dict[str, object]] = {
        codec: {"compression": codec, **({"compression_level": zstd_level} if codec == "zstd" else {})}
        for codec in codecs
    }
    consumers, backups = measure_variants(bootstrap, topic, records, repeat, work, variants)
    return [
        CodecRow(
            label=f"zstd level {zstd_level}" if codec == "zstd" else codec,
            records=records,
            consumer=best_consumer(consumers),
            backup=best_backup(results),
            paired_ratios=paired_ratios(consumers, results),
        )
        for codec, results in backups.items()
    ]


def codec_table(rows: list[CodecRow]) -> str:
    lines = [
        "| compression | records | ConsumerPerformance rec/s | backup rec/s (MiB/s) | ratio of bests "
        "| median paired ratio | stored |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        rate = row.backup.records / row.backup.seconds
        lines.append(
            f"| {row.label} | {row.records:,} | {row.consumer.records_per_sec:,.0f} "
            f"| {rate:,.0f} ({rate * 1024 / 2**20:,.1f}) | {rate / row.consumer.records_per_sec:.2f} "
            f"| {statistics.median(row.paired_ratios):.2f} | {row.backup.stored_bytes / 2**20:,.0f} MiB |"
        )
    return "\n".join(lines)


def target_line(rows: list[Row]) -> str:
    """The issue's target, checked on the largest 1 KiB topic: at least 0.8 of ConsumerPerformance."""
    largest = max((row for row in rows if row.record_size == 1024), key=lambda row: row.records)
    median = statistics.median(largest.paired_ratios)
    verdict = "met" if median >= 0.8 else "not met"
    memory = ", ".join(
        f"{size} B: {' -> '.join(f'{row.backup.peak_rss_bytes / 2**20:,.0f} MiB' for row in group)}"
        for size in sorted({row.record_size for row in rows})
        for group in [[row for row in rows if row.record_size == size]]
    )
    return (
        f"Target (backup >= 0.8 x ConsumerPerformance on 1 KiB records): **{verdict}** on the "
        f"{largest.records:,}-record topic (median paired ratio {median:.2f}, ratio of bests "
        f"{largest.ratio:.2f}). Peak RSS from the smaller to the {args_factor(rows)}x larger topic: {memory}."
    )


def args_factor(rows: list[Row]) -> int:
    sizes = sorted(row.records for row in rows if row.record_size == rows[0].record_size)
    return sizes[-1] // sizes[0]


def table(rows: list[Row]) -> str:
    lines = [
        "| record size | records | ConsumerPerformance rec/s (MiB/s) | backup rec/s (MiB/s) "
        "| ratio of bests | ratio to fetch-only | median paired ratio | backup peak RSS | stored |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row.record_size} B | {row.records:,} "
            f"| {row.consumer.records_per_sec:,.0f} ({row.consumer.mb_per_sec:,.1f}) "
            f"| {row.backup_records_per_sec:,.0f} ({row.backup_mb_per_sec:,.1f}) "
            f"| {row.ratio:.2f} | {row.ratio_to_fetch:.2f} | {statistics.median(row.paired_ratios):.2f} "
            f"| {row.backup.peak_rss_bytes / 2**20:,.0f} MiB | {row.backup.stored_bytes / 2**20:,.0f} MiB |"
        )
    return "\n".join(lines)


def measure_topic(
    bootstrap: str, record_size: int, records: int, args: argparse.Namespace, work: Path, warm_up: bool
) -> Row:
    """Fill a topic of ``records`` records on the cluster at ``bootstrap`` and measure its backup
    against ConsumerPerformance; ``warm_up`` first runs each once untimed (JIT, page cache, imports)."""
    topic = f"bench-{record_size}b-{records}"
    create_topic(bootstrap, topic, args.partitions)
    print(f"{topic} at {bootstrap}: {produce_perf(bootstrap, topic, records, record_size)}", flush=True)
    if warm_up:
        consumer_perf(bootstrap, topic, records)
        measured_backup(bootstrap, topic, work / "warm-up", "bench")
        shutil.rmtree(work / "warm-up", ignore_errors=True)
    consumer, backup, ratios = measure(bootstrap, topic, records, args.repeat, work, args.compression_level)
    return Row(record_size, records, consumer, backup, ratios)


def nodes_report(
    rows_of: dict[int, list[Row]], args: argparse.Namespace, start_load: tuple[float, ...]
) -> str:
    """The runs on several node counts: replication's cost, then each cluster's table."""
    load = os.getloadavg()
    smallest = min(rows_of)
    lines = [
        "## Backup on three nodes",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} with `.venv/bin/python -m bench.bench_backup "
        f"--records-100 {args.records_100} --records-1k {args.records_1k} --factor {args.factor} "
        f"--repeat {args.repeat} --partitions {args.partitions} --nodes "
        f"{','.join(map(str, rows_of))}` on {os.cpu_count()} cores ({platform.machine()}, Python "
        f"{platform.python_version()}): {' and '.join(cluster_words(nodes) for nodes in rows_of)}, "
        f"side by side in one run (each topic filled and measured on each cluster, the clusters taking "
        f"turns going first), a local folder as storage, zstd level {args.compression_level}, best of "
        f"{args.repeat} rounds, ConsumerPerformance and the backup taking turns going first. Load "
        f"average (1/5/15 min) at the start {start_load[0]:.1f} / {start_load[1]:.1f} / "
        f"{start_load[2]:.1f}, at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.",
        "",
        f"Replication's cost: each side's best records/s on the larger cluster over its best on "
        f"{cluster_words(smallest)} (below 1: slower there).",
        "",
        "| nodes | record size | records | ConsumerPerformance | backup |",
        "|---:|---:|---:|---:|---:|",
    ]
    for nodes, rows in rows_of.items():
        if nodes == smallest:
            continue
        for row, reference in zip(rows, rows_of[smallest], strict=True):
            lines.append(
                f"| {nodes} | {row.record_size} B | {row.records:,} "
                f"| {row.consumer.records_per_sec / reference.consumer.records_per_sec:.2f} "
                f"| {row.backup_records_per_sec / reference.backup_records_per_sec:.2f} |"
            )
    for nodes, rows in rows_of.items():
        lines += ["", f"### {cluster_heading(nodes)}", "", table(rows)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--records-100", type=int, default=1_000_000, help="smaller topic of 100-byte records"
    )
    parser.add_argument("--records-1k", type=int, default=250_000, help="smaller topic of 1 KiB records")
    parser.add_argument(
        "--factor", type=int, default=8, help="the larger topic has this many times the records"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--compression-level", type=int, default=BackupSettings().compression_level)
    parser.add_argument(
        "--codecs",
        default="zstd,lz4,none",
        help="compression codecs compared on the largest 1 KiB topic (comma-separated; empty: none)",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"write the results into {DOC}")
    parser.add_argument("--quick", action="store_true", help="10,000 / 2,500 records, one run (a smoke run)")
    parser.add_argument(
        "--nodes",
        type=node_counts_of,
        default=[1],
        help="nodes of the cluster, or several counts (1,3) measured side by side (default 1)",
    )
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    if args.quick:
        args.records_100, args.records_1k, args.repeat = 10_000, 2_500, 1
    start_load = os.getloadavg()

    rows_of: dict[int, list[Row]] = {nodes: [] for nodes in args.nodes}
    with tempfile.TemporaryDirectory(prefix="kbackup-bench-") as work_dir, ExitStack() as stack:
        work = Path(work_dir)
        servers = {
            nodes: stack.enter_context(local_clusters([f"bench-{nodes}"], nodes=nodes))[0].bootstrap_servers
            for nodes in args.nodes
        }
        plan = [
            (record_size, records)
            for record_size, small in [(100, args.records_100), (1024, args.records_1k)]
            for records in (small, small * args.factor)
        ]
        for index, (record_size, records) in enumerate(plan):
            for nodes in rotated(args.nodes, index):
                rows_of[nodes].append(
                    measure_topic(servers[nodes], record_size, records, args, work, warm_up=index == 0)
                )
        codecs = [codec for codec in args.codecs.split(",") if codec] if len(args.nodes) == 1 else []
        codec_rows: list[CodecRow] = []
        if codecs:
            records = args.records_1k * args.factor
            topic = f"bench-1024b-{records}"
            codec_rows = measure_codecs(
                servers[args.nodes[0]], topic, records, args.repeat, work, codecs, args.compression_level
            )

    if len(args.nodes) > 1:
        several = nodes_report(rows_of, args, start_load)
        print("\n" + several)
        if args.write_docs:
            replace_section(DOC, NODES_START_MARKER, NODES_END_MARKER, several)
            print(f"\nwritten to {DOC}")
        return
    rows = rows_of[args.nodes[0]]
    result = table(rows)
    print()
    print(result)
    codecs_result = codec_table(codec_rows) if codec_rows else ""
    if codecs_result:
        print()
        print(codecs_result)
    if args.write_docs:
        load = os.getloadavg()
        body = "\n".join(
            [
                "## Backup",
                "",
                f"Measured {datetime.now(UTC):%Y-%m-%d} with `.venv/bin/python -m bench.bench_backup "
                f"--records-100 {args.records_100} --records-1k {args.records_1k} --factor {args.factor} "
                f"--repeat {args.repeat} --partitions {args.partitions}` on {os.cpu_count()} cores "
                f"({platform.machine()}, Python {platform.python_version()}), "
                f"{cluster_words(args.nodes[0])}, a local folder as storage, "
                f"zstd level {args.compression_level}, "
                f"best of {args.repeat} rounds after a warm-up, ConsumerPerformance and the backup "
                "taking turns going first (peak RSS: the worst run). Load average "
                f"(1/5/15 min) at the start {start_load[0]:.1f} / {start_load[1]:.1f} / {start_load[2]:.1f}, "
                f"at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.",
                "",
                result,
                "",
                target_line(rows),
                "",
                *(
                    [
                        "### What compression costs",
                        "",
                        f"The {codec_rows[0].records:,}-record 1 KiB topic again, backed up with each "
                        f"codec and read by ConsumerPerformance in each of {args.repeat} rounds, the "
                        "order of the four (ConsumerPerformance's place too) rotated between rounds. "
                        "ProducerPerformance's payloads are random "
                        "capital letters: no repeats for LZ77 to find, so zstd's gain is its entropy coding "
                        "alone, and lz4 stores them as they are.",
                        "",
                        codecs_result,
                        "",
                    ]
                    if codecs_result
                    else []
                ),
                "- *ratio of bests*: the best backup records/s divided by the best ConsumerPerformance "
                "`nMsg.sec`, which, like the backup's time, includes joining/connecting; *ratio to "
                "fetch-only* divides by its `fetch.nMsg.sec` (group join excluded), the stricter figure; "
                "*median paired ratio*: the median over the rounds of backup/ConsumerPerformance "
                "records/s of the two runs of one round (the least sensitive to load changes). MiB/s: "
                "payload bytes (record size x records) in 2^20 bytes per second, the unit of "
                "ConsumerPerformance's `MB.sec`.",
                "- The backup's time is the run's own (metadata, group snapshot, end offsets, copy, "
                "encode, zstd, SHA-256, upload, manifest), without the Python process start-up.",
                "- Peak RSS is the backup process's maximum resident set (`wait4` rusage).",
                "- Where the time goes, and why the gap grows with record count (ConsumerPerformance's "
                "JVM start-up and group join weigh less on long runs, while the backup's per-record work, "
                "Python objects, Arrow copy, Parquet and zstd, stays): see "
                "[backup.md](backup.md#memory-and-throughput).",
                "- Broker, tool and backup share the cores (and whatever else runs on the machine: see the "
                "load average): figures vary between runs; compare the ratio of runs made side by side.",
            ]
        )
        replace_section(DOC, START_MARKER, END_MARKER, body)
        print(f"\nwritten to {DOC}")


if __name__ == "__main__":
    main()
