"""Benchmark of the mapping scan against Kafka's own ConsumerPerformance, on the same topic in one run.

    .venv/bin/python -m bench.bench_mapping [--records 1000000 10000000] [--rounds 2] [--e2e-rounds N]
                                            [--quick] [--write-docs]

Starts a throwaway local cluster and, for each size (default 1,000,000 and
10,000,000 records, to show how the cost grows), fills a topic with
100-byte records that carry origin headers (a hole-free restore), then
makes two alternations (ABAB..., as many runs on each side):

1. ``--rounds`` times Kafka's ``ConsumerPerformance`` reading the topic (the
   ceiling of one Kafka consumer on this machine; its own rate, without the
   JVM's start-up) then the mapping scan (``build_offset_mapping``) in an
   already started local Spark session (without Spark's start-up);
2. with that Spark session stopped, ``--e2e-rounds`` times
   ``ConsumerPerformance`` again, timed as a process from exec to exit (JVM
   start-up included), then ``kafka-backup show-offset-mapping`` in a fresh
   process, timed the same way (Python's and Spark's start-up and writing the
   file included).

Each ratio divides the best run of one side by the best run of the other side
of the same alternation: the scan's rate by ConsumerPerformance's own, the
end-to-end process's by ConsumerPerformance's process. It prints records/s,
the ratios, the mapping file sizes, one table row per size, and writes them
into the "Mapping" section of docs/benchmarks.md (with ``--write-docs``).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench._perf import create_topic, refuse_smoke_figures_in_docs, replace_section, run_with_tree_peak_rss
from kbackup.sandbox.jars import classpath, kafka_libs
from kbackup.sandbox.kafka import LocalKafkaCluster, local_clusters

SOURCE_CLUSTER = "prod-us-east-1"
VALUE = b"v" * 100
DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
START, END = "<!-- mapping:start -->", "<!-- mapping:end -->"


def _fill_partition(bootstrap: str, topic: str, partition: int, count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            # Idempotence keeps order through retries: a hole-free, in-order restore.
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "queue.buffering.max.messages": 1_000_000,
            "compression.type": "none",
        }
    )
    cluster, source_topic, source_partition = SOURCE_CLUSTER.encode(), b"orders", str(partition).encode()
    timestamp = b"1700000000000"
    for offset in range(count):
        headers: list[tuple[str, str | bytes | None]] = [
            ("x-kafka-backup-cluster", cluster),
            ("x-kafka-backup-topic", source_topic),
            ("x-kafka-backup-partition", source_partition),
            ("x-kafka-backup-offset", str(1_000_000 + offset).encode()),
            ("x-kafka-backup-timestamp", timestamp),
        ]
        while True:
            try:
                producer.produce(topic, VALUE, partition=partition, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if offset % 20_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        raise RuntimeError(f"partition {partition}: records not delivered")


def fill(cluster: LocalKafkaCluster, topic: str, records: int, partitions: int) -> float:
    """Produce ``records`` restored records, one producer process per partition; returns seconds."""
    create_topic(cluster.bootstrap_servers, topic, partitions)
    share = [records // partitions + (1 if p < records % partitions else 0) for p in range(partitions)]
    started = time.monotonic()
    workers = [
        multiprocessing.Process(target=_fill_partition, args=(cluster.bootstrap_servers, topic, p, share[p]))
        for p in range(partitions)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
        if worker.exitcode != 0:
            raise RuntimeError("a producer process failed")
    return time.monotonic() - started


@dataclass
class ConsumerPerfRun:
    records: int
    seconds: float
    records_per_sec: float
    fetch_records_per_sec: float
    #: The tool's process from exec to exit (JVM start-up included).
    wall_seconds: float = 0.0

    @property
    def wall_records_per_sec(self) -> float:
        return self.records / self.wall_seconds if self.wall_seconds else 0.0


def consumer_performance(cluster: LocalKafkaCluster, topic: str, records: int) -> ConsumerPerfRun:
    """Kafka's ConsumerPerformance; its nMsg.sec is over its whole run (join included), fetch.nMsg.sec not."""
    command = [
        "java", "-Xmx1g", "-cp", classpath(kafka_libs()), "org.apache.kafka.tools.ConsumerPerformance",
        "--bootstrap-server", cluster.bootstrap_servers, "--topic", topic,
        "--num-records", str(records), "--timeout", "60000",
    ]  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    wall = time.monotonic() - started
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    header = [name.strip() for name in lines[-2].split(",")]
    values = dict(zip(header, (value.strip() for value in lines[-1].split(",")), strict=True))
    consumed = int(values["data.consumed.in.nMsg"])
    if consumed < records:
        raise RuntimeError(f"ConsumerPerformance read {consumed} of {records} records")
    rate = float(values["nMsg.sec"])
    return ConsumerPerfRun(consumed, consumed / rate, rate, float(values["fetch.nMsg.sec"]), wall)


@dataclass
class ScanRun:
    records: int
    seconds: float
    ranges: int

    @property
    def records_per_sec(self) -> float:
        return self.records / self.seconds


def mapping_scan(spark: object, cluster: LocalKafkaCluster, topic: str) -> ScanRun:
    from kbackup.mapping import build_offset_mapping

    started = time.monotonic()
    mapping = build_offset_mapping(
        cluster.connection(),
        source_cluster=SOURCE_CLUSTER,
        topics=[topic],
        spark=spark,  # type: ignore[arg-type]
    )
    seconds = time.monotonic() - started
    return ScanRun(mapping.records, seconds, len(mapping.ranges))


def end_to_end(cluster: LocalKafkaCluster, topic: str, output: Path) -> tuple[float, int]:
    """``kafka-backup show-offset-mapping`` in a new process: Python, Spark start-up, scan, file.

    Returns its seconds and the peak resident memory of the process and its Spark JVM together.
    """
    command = [
        str(Path(sys.executable).with_name("kafka-backup")), "show-offset-mapping",
        "-b", cluster.bootstrap_servers, "--topic", topic, "--source-cluster", SOURCE_CLUSTER,
        "--output", str(output),
    ]  # fmt: skip
    code, seconds, peak_rss = run_with_tree_peak_rss(command)
    if code != 0:
        raise RuntimeError(f"show-offset-mapping failed (exit {code}): {' '.join(command)}")
    return seconds, peak_rss


def update_docs(section: str) -> None:
    """Replace (or add) the "mapping" section of docs/benchmarks.md, keeping other stages' sections."""
    replace_section(DOCS, START, END, section)


@dataclass
class E2eRun:
    """One ``show-offset-mapping`` process, exec to exit."""

    records: int
    seconds: float
    #: Peak resident memory of the process and its Spark JVM together.
    peak_rss: int

    @property
    def records_per_sec(self) -> float:
        return self.records / self.seconds


@dataclass
class SizeRun:
    """Everything measured at one topic size."""

    records: int
    fill_seconds: float
    spark_start: float
    #: The first alternation: ConsumerPerformance (its own rate) and the scan in a running Spark.
    perf_runs: list[ConsumerPerfRun]
    scan_runs: list[ScanRun]
    #: The second: ConsumerPerformance and show-offset-mapping, both timed as processes.
    wall_perf_runs: list[ConsumerPerfRun]
    e2e_runs: list[E2eRun]
    #: Mapping file bytes by format.
    sizes: dict[str, int]

    @property
    def best_perf(self) -> float:
        return max(run.records_per_sec for run in self.perf_runs)

    @property
    def best_scan(self) -> float:
        return max(run.records_per_sec for run in self.scan_runs)

    @property
    def best_perf_wall(self) -> float:
        return max(run.wall_records_per_sec for run in self.wall_perf_runs)

    @property
    def best_e2e(self) -> float:
        return max(run.records_per_sec for run in self.e2e_runs)

    @property
    def e2e_peak_rss(self) -> int:
        return max(run.peak_rss for run in self.e2e_runs)


def alternate(rounds: int, first: Callable[[int], None], second: Callable[[int], None]) -> None:
    """ABAB...: ``first(n)`` then ``second(n)`` for each round ``n`` (from 1), so both sides run as
    often, interleaved."""
    for round_number in range(1, rounds + 1):
        first(round_number)
        second(round_number)


def measure_size(
    cluster: LocalKafkaCluster, records: int, partitions: int, rounds: int, e2e_rounds: int, scratch: Path
) -> SizeRun:
    """Fill a topic of ``records``, alternate ConsumerPerformance and the scan, then ConsumerPerformance
    and end to end, both as processes (see the module's doc)."""
    topic = f"bench-restored-{records}"
    fill_seconds = fill(cluster, topic, records, partitions)
    print(f"{records:,}: filled in {fill_seconds:.0f}s", flush=True)

    from kbackup.mapping.spark_session import build_spark_session

    started = time.monotonic()
    spark = build_spark_session("local[2]")
    spark_start = time.monotonic() - started
    print(f"{records:,}: Spark started in {spark_start:.1f}s", flush=True)
    perf_runs: list[ConsumerPerfRun] = []
    scan_runs: list[ScanRun] = []

    def perf(round_number: int, into: list[ConsumerPerfRun]) -> None:
        into.append(consumer_performance(cluster, topic, records))
        print(
            f"{records:,} round {round_number}: ConsumerPerformance {into[-1].records_per_sec:,.0f} "
            f"records/s (process {into[-1].wall_seconds:.1f} s: {into[-1].wall_records_per_sec:,.0f} "
            "records/s)",
            flush=True,
        )

    def scan(round_number: int) -> None:
        scan_runs.append(mapping_scan(spark, cluster, topic))
        print(
            f"{records:,} round {round_number}: mapping scan {scan_runs[-1].records_per_sec:,.0f} records/s "
            f"({scan_runs[-1].ranges} ranges)",
            flush=True,
        )

    alternate(rounds, lambda n: perf(n, perf_runs), scan)
    # End to end starts its own Spark: this one must not compete with it for the two cores.
    spark.stop()
    json_file = scratch / f"mapping-{records}.json"
    wall_perf_runs: list[ConsumerPerfRun] = []
    e2e_runs: list[E2eRun] = []

    def e2e(round_number: int) -> None:
        seconds, peak_rss = end_to_end(cluster, topic, json_file)
        e2e_runs.append(E2eRun(records, seconds, peak_rss))
        print(
            f"{records:,} round {round_number}: show-offset-mapping process {seconds:.1f} s, "
            f"{e2e_runs[-1].records_per_sec:,.0f} records/s",
            flush=True,
        )

    alternate(e2e_rounds, lambda n: perf(n, wall_perf_runs), e2e)

    from kbackup.format.mapping_file import read_mapping, write_mapping

    mapping = read_mapping(json_file)
    assert mapping.records == records, "the mapping must cover every record"
    sizes = {"json": json_file.stat().st_size}
    for output_format in ("csv", "parquet"):
        sizes[output_format] = write_mapping(mapping, scratch / f"m-{records}.{output_format}", output_format)
    # Delete the topic's data before the next size fills the disk again.
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # must outlive its futures
    for future in admin.delete_topics([topic]).values():
        future.result(60)
    return SizeRun(records, fill_seconds, spark_start, perf_runs, scan_runs, wall_perf_runs, e2e_runs, sizes)


def section_text(runs: list[SizeRun], partitions: int, load_before: float, load_after: float) -> str:
    """The "Mapping" section of docs/benchmarks.md: one table row per size, then the raw runs."""
    sizes = " ".join(str(run.records) for run in runs)
    rounds = max(len(run.scan_runs) for run in runs)
    e2e_rounds = max(len(run.e2e_runs) for run in runs)
    table = (
        "| size | partitions | ConsumerPerformance rec/s | mapping scan rec/s | ratio "
        "| ConsumerPerformance process rec/s | show-offset-mapping process rec/s | ratio "
        "| end to end peak RSS (Python + Spark JVM) | mapping file (JSON / CSV / Parquet bytes) |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"
    ) + "".join(
        f"| {run.records:,} records | {partitions} partitions | {run.best_perf:,.0f} | {run.best_scan:,.0f} "
        f"| {run.best_scan / run.best_perf:.2f} | {run.best_perf_wall:,.0f} | {run.best_e2e:,.0f} "
        f"| {run.best_e2e / run.best_perf_wall:.2f} | {run.e2e_peak_rss / 2**20:,.0f} MiB "
        f"| {run.sizes['json']:,} / {run.sizes['csv']:,} / {run.sizes['parquet']:,} |\n"
        for run in runs
    )
    raw = "".join(
        f"\n{run.records:,} records (filled in {run.fill_seconds:.0f} s; {run.scan_runs[-1].ranges} ranges): "
        "ConsumerPerformance runs (nMsg.sec / fetch.nMsg.sec) "
        + ", ".join(f"{r.records_per_sec:,.0f} / {r.fetch_records_per_sec:,.0f}" for r in run.perf_runs)
        + "; mapping scan runs "
        + ", ".join(f"{r.seconds:.1f} s" for r in run.scan_runs)
        + "; ConsumerPerformance processes "
        + ", ".join(f"{r.wall_seconds:.1f} s" for r in run.wall_perf_runs)
        + "; show-offset-mapping processes "
        + ", ".join(f"{r.seconds:.1f} s" for r in run.e2e_runs)
        + f"; the scan's Spark session took {run.spark_start:.1f} s to start (only the first size pays "
        "for the JVM).\n"
        for run in runs
    )
    return (
        "## Mapping\n\n"
        f"`python -m bench.bench_mapping --records {sizes} --partitions {partitions} --rounds {rounds} "
        f"--e2e-rounds {e2e_rounds}` on {time.strftime('%Y-%m-%d')}, {os.cpu_count()} CPU(s) "
        f"({platform.machine()}), broker, producer and Spark `local[2]` on the same machine; per size, "
        f"one topic of restored records (100-byte values, five origin headers, {partitions} partitions, "
        "hole-free). Two alternations per size (ABAB..., as many runs on both sides: "
        f"{rounds} and {e2e_rounds}); each figure is the best run of its side, each ratio divides two "
        "sides of the same alternation. The first: ConsumerPerformance's own rate (its JVM's start-up "
        "excluded) and the scan in a running Spark session (Spark's start-up excluded). The second, "
        "with that session stopped: ConsumerPerformance and `kafka-backup show-offset-mapping`, each a "
        "new process timed from exec to exit (the JVM's, Python's and Spark's start-up, and writing the "
        f"file, included). Load average {load_before:.1f} before, {load_after:.1f} after (the "
        "benchmark's own broker, tool and Spark included).\n\n"
        f"{table}{raw}\n"
        "A hole-free partition is one range, so the mapping file's size does not grow with the records.\n"
    )


def main() -> None:
    args = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    args.add_argument(
        "--records",
        type=int,
        nargs="+",
        default=[1_000_000, 10_000_000],
        help="topic sizes, each measured on its own topic (default: 1,000,000 and 10,000,000)",
    )
    args.add_argument("--partitions", type=int, default=2)
    args.add_argument(
        "--rounds", type=int, default=2, help="alternating rounds of ConsumerPerformance and scan"
    )
    args.add_argument(
        "--e2e-rounds",
        type=int,
        default=None,
        help="alternating rounds of ConsumerPerformance and show-offset-mapping, both as processes "
        "(default: --rounds)",
    )
    args.add_argument(
        "--quick",
        action="store_true",
        help="20,000 and 100,000 records, one round of each alternation (a smoke run)",
    )
    args.add_argument("--write-docs", action="store_true", help="write the section into docs/benchmarks.md")
    options = args.parse_args()
    refuse_smoke_figures_in_docs(options)
    if options.quick:
        options.records, options.rounds = [20_000, 100_000], 1
    e2e_rounds = options.e2e_rounds or options.rounds
    load_before = os.getloadavg()[0]
    with (
        tempfile.TemporaryDirectory(prefix="kbackup-bench-") as scratch,
        local_clusters(
            ["bench"], Path(scratch), extra_properties={"num.io.threads": "4", "num.network.threads": "2"}
        ) as (cluster,),
    ):
        runs = [
            measure_size(cluster, records, options.partitions, options.rounds, e2e_rounds, Path(scratch))
            for records in options.records
        ]
    section = section_text(runs, options.partitions, load_before, os.getloadavg()[0])
    print()
    print(section)
    if options.write_docs:
        update_docs(section)
        print(f"updated {DOCS}")


if __name__ == "__main__":
    main()
