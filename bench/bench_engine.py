"""Backup and restore on each engine, side by side in one run: local, Spark ``local[2]``, and a Spark
standalone cluster with one and with two one-core workers.

    .venv/bin/python -m bench.bench_engine [--records N] [--record-size B] [--partitions P]
                                           [--quick] [--write-docs]

One local single-node cluster; a topic of ``--records`` records filled by ProducerPerformance.
First Kafka's own tools give the reference rates (ConsumerPerformance on the topic,
ProducerPerformance into a new topic with acks=all); then, for each engine, a backup of the topic
to a local folder and an exactly-once restore of that backup into a new topic, each in a process
of its own. Spark's start-up (the session, and for a cluster its executors) is timed apart from
the copy. CPU is the whole machine's (broker, driver, executors, Python workers; from
/proc/stat) over each backup or restore, start-up included, so the engines' cost per record is
compared on the same work. On this 2-core machine a second worker cannot add cores: the one- and
two-worker rows show what splitting the work costs, not how it scales on more machines.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench._perf import consumer_perf, produce_perf, replace_section
from bench._restore_perf import create_topic, producer_performance

START_MARKER = "<!-- engine:start -->"
END_MARKER = "<!-- engine:end -->"
REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"


def machine_cpu_seconds() -> float:
    """Busy CPU time of the whole machine so far (all cores, every process), from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class EngineRun:
    engine: str
    step: str
    records: int
    startup_seconds: float
    copy_seconds: float
    #: The whole machine's CPU over the step, start-up included, and over the copy only.
    cpu_seconds: float
    copy_cpu_seconds: float

    @property
    def records_per_sec(self) -> float:
        return self.records / self.copy_seconds


def spark_settings(cores: int) -> dict[str, str]:
    return {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "2g",
        "spark.cores.max": str(cores),
        "spark.default.parallelism": str(cores),
    }


def child(args: argparse.Namespace) -> None:
    """One backup or restore in this process; prints its timings as JSON."""
    from kbackup.backup.runner import BackupJob, run_backup
    from kbackup.backup.settings import BackupSettings, SourceSettings
    from kbackup.core.config import KafkaConnection, StorageSettings
    from kbackup.core.spark import SparkEngine, engine_master, spark_conf
    from kbackup.restore import service
    from kbackup.restore.settings import RestoreSettings

    engine = None
    startup = 0.0
    if args.master:
        master = engine_master(args.master)
        engine = SparkEngine(master, spark_conf(master, extra_conf=spark_settings(args.cores)))
        began = time.monotonic()
        session = engine.session("kafka-backup-bench")
        # Executors of a cluster start with the first job: one tiny job makes them part of start-up.
        session.sparkContext.parallelize(range(args.cores), args.cores).count()
        startup = time.monotonic() - began
    storage = StorageSettings(url=args.store)
    cpu_before = machine_cpu_seconds()
    began = time.monotonic()
    if args.child == "backup":
        job = BackupJob(
            backup_id="bench",
            source=SourceSettings.model_validate(
                {"bootstrap_servers": [args.bootstrap], "topics": {"include": [args.topic]}}
            ),
            storage=storage,
            settings=BackupSettings(),
        )
        records = run_backup(job, engine=engine).records
    else:
        prepared = service.prepare(
            backup_id="bench",
            storage=storage,
            target=KafkaConnection(bootstrap_servers=[args.bootstrap]),
            settings=RestoreSettings.model_validate({"topic_mapping": {args.topic: args.target_topic}}),
        )
        records = service.run(prepared, engine=engine).records
    copy = time.monotonic() - began
    cpu = machine_cpu_seconds() - cpu_before
    print(json.dumps({"records": records, "startup": startup, "copy": copy, "copy_cpu": cpu}))


def run_child(step: str, engine: str, master: str | None, cores: int, **values: str) -> EngineRun:
    command = [sys.executable, "-m", "bench.bench_engine", "--child", step, "--cores", str(cores)]
    if master:
        command += ["--master", master]
    for key, value in values.items():
        command += [f"--{key.replace('_', '-')}", value]
    env = {**os.environ, "KBACKUP_NO_PROGRESS": "1", "PYSPARK_PYTHON": sys.executable}
    cpu_before = machine_cpu_seconds()
    done = subprocess.run(
        command, capture_output=True, text=True, cwd=REPO, env=env, timeout=3600, check=False
    )
    cpu = machine_cpu_seconds() - cpu_before
    if done.returncode != 0:
        raise RuntimeError(f"{step} on {engine} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return EngineRun(
        engine, step, result["records"], result["startup"], result["copy"], cpu, result["copy_cpu"]
    )


def measure(records: int, record_size: int, partitions: int) -> tuple[list[EngineRun], float, float, str]:
    from kbackup.sandbox.kafka import local_clusters
    from kbackup.sandbox.spark_cluster import local_spark_cluster

    runs: list[EngineRun] = []
    with tempfile.TemporaryDirectory(prefix="kbackup-bench-engine-") as scratch:
        root = Path(scratch)
        with local_clusters(["bench"], root / "kafka") as (cluster,):
            bootstrap = cluster.bootstrap_servers
            topic = "engine-bench"
            create_topic(bootstrap, topic, partitions)
            produce_perf(bootstrap, topic, records, record_size)
            consumer = consumer_perf(bootstrap, topic, records)
            create_topic(bootstrap, "engine-bench-pp", partitions)
            producer = producer_performance(
                bootstrap, "engine-bench-pp", records=records, record_size=record_size
            )
            producer_rate = producer.records / producer.seconds

            def both(engine: str, master: str | None, cores: int) -> None:
                store = str(root / f"store-{len(runs)}")
                common = {"bootstrap": bootstrap, "topic": topic, "store": store}
                runs.append(run_child("backup", engine, master, cores, **common))
                runs.append(
                    run_child(
                        "restore", engine, master, cores, target_topic=f"{topic}-r{len(runs)}", **common
                    )
                )
                print(runs[-2], runs[-1], flush=True)

            both("local", None, 1)
            both("Spark local[2]", "local[2]", 2)
            for workers in (1, 2):
                with local_spark_cluster(
                    workers=workers, cores_per_worker=1, memory_per_worker="3g"
                ) as spark:
                    both(f"standalone, {workers} worker(s)", spark.master_url, workers)
    return runs, consumer.records_per_sec, producer_rate, platform.platform()


def report(
    runs: list[EngineRun], consumer_rate: float, producer_rate: float, record_size: int, seconds: float
) -> str:
    local = {run.step: run for run in runs if run.engine == "local"}
    lines = [
        "## Engines: local and Spark",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} by `python -m bench.bench_engine` "
        f"({runs[0].records:,} records of {record_size} B, "
        f"one run, {seconds / 60:.0f} min) on {os.cpu_count()} cores. Rates count the copy only; "
        "start-up (the Spark session, a cluster's executors) is its own column. CPU is the whole "
        "machine's (broker included), in seconds per million records: over the copy, and over the "
        "whole step with start-up.",
        "",
        "| step | engine | start-up s | copy s | records/s | ratio to Kafka's tool "
        "| copy CPU s / M records | copy CPU to local | step CPU s / M records |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        reference = consumer_rate if run.step == "backup" else producer_rate
        per_million = run.cpu_seconds / run.records * 1e6
        copy_per_million = run.copy_cpu_seconds / run.records * 1e6
        base = local[run.step]
        lines.append(
            f"| {run.step} | {run.engine} | {run.startup_seconds:.1f} | {run.copy_seconds:.1f} | "
            f"{run.records_per_sec:,.0f} | {run.records_per_sec / reference:.2f} | {copy_per_million:.1f} | "
            f"{run.copy_cpu_seconds / base.copy_cpu_seconds:.2f} | {per_million:.1f} |"
        )
    lines += [
        "",
        f"References in the same run: ConsumerPerformance {consumer_rate:,.0f} records/s (backup), "
        f"ProducerPerformance acks=all {producer_rate:,.0f} records/s (restore, exactly-once).",
        "",
        "Each step runs once, without a warm-up, on an 8-partition topic: the local engine's backup "
        "ratio here is below the Backup section's (best of 3 after a warm-up, one partition); compare "
        "the engines with each other, in this table. On 2 cores the standalone cluster's second worker "
        "adds no core (the broker and the driver share them): see docs/scaling.md for what that means "
        "and for sizing a real cluster.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--quick", action="store_true", help="200,000 records: checks the bench runs")
    parser.add_argument("--write-docs", action="store_true")
    # The child mode: one step in this process.
    parser.add_argument("--child", choices=["backup", "restore"], help=argparse.SUPPRESS)
    parser.add_argument("--master", help=argparse.SUPPRESS)
    parser.add_argument("--cores", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--target-topic", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    records = 200_000 if args.quick else args.records
    began = time.monotonic()
    runs, consumer_rate, producer_rate, _machine = measure(records, args.record_size, args.partitions)
    text = report(runs, consumer_rate, producer_rate, args.record_size, time.monotonic() - began)
    print(text)
    if args.write_docs:
        replace_section(DOC, START_MARKER, END_MARKER, text)


if __name__ == "__main__":
    main()
