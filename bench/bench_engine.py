"""Backup and restore on each engine, side by side in one run: local, Spark ``local[2]``, and a Spark
standalone cluster with one and with two one-core workers, against Kafka's own tools.

    .venv/bin/python -m bench.bench_engine [--records N] [--record-size B] [--partitions P]
                                           [--rounds R] [--quick] [--write-docs]

One local single-node cluster; a topic of ``--records`` records filled by ProducerPerformance.
Five sides take turns (``schedule``): Kafka's own tools, and the four engines. The tools' turn runs
ConsumerPerformance on the topic (the backup's reference) and ProducerPerformance into a new topic
with the restore's own producer settings in transactions of ``restore.transaction_max_ms``, as
bench_restore runs it for the exactly-once restore (``RESTORE_PROPS`` and ``TRANSACTION_MS``, the
same ``producer_performance``): the exactly-once restore's reference. An engine's turn runs a
backup of the topic to a local folder and an exactly-once restore of that backup into a new topic,
each in a process of its own (a standalone cluster is started for the turn, and its start is not
timed). First one unmeasured turn of each side (the warm-up: Spark's and the broker's first runs,
the page cache); then ``--rounds`` rounds (5 by default, a multiple of the five sides) of one turn
of each side, the order rotated from round to round (``rotated``), so each side goes first, and
runs in every place, as often as the others. ``os.sync()`` runs before every turn; nothing is
dropped from the page cache.

Every run must write exactly the topic's records: the backup's count, the restore's (in
exactly-once mode) and ProducerPerformance's, and the target topics' log end offsets (records and
at most a commit marker per transaction and partition). Each ratio to Kafka's tool is taken
between the runs of one round; the report gives the median of the rounds and their range.

Spark's start-up (the session, and for a cluster its executors) is timed apart from the copy. CPU
is the whole machine's (broker, driver, executors, Python workers; from /proc/stat) over each backup
or restore, start-up included, so the engines' cost per record is compared on the same work. On
this 2-core machine a second worker cannot add cores: the one- and two-worker rows show what
splitting the work costs, not how it scales on more machines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench._perf import (
    consumer_perf,
    create_topic,
    produce_perf,
    refuse_smoke_figures_in_docs,
    replace_section,
)
from bench._restore_perf import (
    TRANSACTION_MS,
    Measured,
    delete_topic,
    producer_performance,
)
from bench._stats import Turn, paired_ratios, run_schedule, schedule, spread
from bench.bench_restore import EXACTLY_ONCE, PP_SAME_TX, RESTORE_PROPS, check_counts, settled_log_end

START_MARKER = "<!-- engine:start -->"
END_MARKER = "<!-- engine:end -->"
REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
TOOLS = "Kafka's tools"
LOCAL = "local"
#: Engine -> (Spark master: None for the local engine, ``local[2]``, or a standalone cluster's
#: workers as ``workers:N``; the cores it gets).
ENGINES: dict[str, tuple[str | None, int]] = {
    LOCAL: (None, 1),
    "Spark local[2]": ("local[2]", 2),
    "standalone, 1 worker(s)": ("workers:1", 1),
    "standalone, 2 worker(s)": ("workers:2", 2),
}
#: Every side, in the order of the warm-up and of the first round.
SIDES = (TOOLS, *ENGINES)
DEFAULT_ROUNDS = len(SIDES)
QUICK_ROUNDS, QUICK_RECORDS = 1, 50_000
CONSUMER_PERF = "ConsumerPerformance"


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
    #: A restore's mode and the transactions it committed, as its summary says.
    mode: str = ""
    transactions: int = 0

    @property
    def records_per_sec(self) -> float:
        return self.records / self.copy_seconds


@dataclass(frozen=True)
class TurnResult:
    """One side's turn: its backup (ConsumerPerformance for the tools) and its restore
    (ProducerPerformance with the restore's settings and transactions for the tools)."""

    backup: EngineRun
    restore: EngineRun

    def step(self, step: str) -> EngineRun:
        return self.backup if step == "backup" else self.restore


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
    from kbackup.backup import BackupJob, run_backup
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
    mode, transactions = "", 0
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
            settings=RestoreSettings.model_validate(
                {"topic_mapping": {args.topic: args.target_topic}, "exactly_once": True}
            ),
        )
        summary = service.run(prepared, engine=engine)
        records, mode, transactions = summary.records, summary.mode, summary.transactions
    copy = time.monotonic() - began
    cpu = machine_cpu_seconds() - cpu_before
    print(
        json.dumps(
            {
                "records": records,
                "startup": startup,
                "copy": copy,
                "copy_cpu": cpu,
                "mode": mode,
                "transactions": transactions,
            }
        )
    )


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
        engine, step, result["records"], result["startup"], result["copy"], cpu, result["copy_cpu"],
        mode=result["mode"], transactions=result["transactions"],
    )  # fmt: skip


def restore_reference(
    bootstrap: str, topic: str, *, records: int, record_size: int, partitions: int
) -> Measured:
    """The exactly-once restore's reference, as bench_restore runs it: ProducerPerformance with the
    restore's producer settings (``RESTORE_PROPS``), in transactions of ``TRANSACTION_MS``, into a new
    topic of ``partitions``; it must write ``records`` (and its commit markers)."""
    create_topic(bootstrap, topic, partitions)
    measured = producer_performance(
        bootstrap, topic, records=records, record_size=record_size, extra_props=RESTORE_PROPS,
        transaction_ms=TRANSACTION_MS, name=PP_SAME_TX,
    )  # fmt: skip
    check_counts(PP_SAME_TX, measured, records, settled_log_end(bootstrap, topic, records), partitions)
    delete_topic(bootstrap, topic)
    return measured


@contextmanager
def master_of(engine: str) -> Iterator[str | None]:
    """The Spark master of an engine's turn (None: the local engine); a standalone cluster is started
    for the turn and stopped after it."""
    from kbackup.sandbox.spark_cluster import local_spark_cluster

    master, _cores = ENGINES[engine]
    if master is None or not master.startswith("workers:"):
        yield master
        return
    workers = int(master.split(":", 1)[1])
    with local_spark_cluster(workers=workers, cores_per_worker=1, memory_per_worker="3g") as spark:
        yield spark.master_url


@dataclass
class Bench:
    """What every turn needs: the cluster, the measured topic, a scratch folder."""

    bootstrap: str
    topic: str
    records: int
    record_size: int
    partitions: int
    root: Path
    turns: int = 0

    def turn(self, turn: Turn[str]) -> TurnResult:
        self.turns += 1
        tag = f"{self.turns}-{'warm-up' if turn.round_ is None else turn.round_}"
        result = self._tools(tag) if turn.side == TOOLS else self._engine(turn.side, tag)
        what = "warm-up" if turn.round_ is None else f"round {turn.round_}"
        print(
            f"  {what:8} {turn.side:24} backup {result.backup.records_per_sec:>10,.0f} rec/s  "
            f"restore {result.restore.records_per_sec:>10,.0f} rec/s",
            flush=True,
        )
        return result

    def _tools(self, tag: str) -> TurnResult:
        cpu_before = machine_cpu_seconds()
        consumer = consumer_perf(self.bootstrap, self.topic, self.records)
        cpu_between = machine_cpu_seconds()
        producer = restore_reference(
            self.bootstrap, f"{self.topic}-pp-{tag}", records=self.records,
            record_size=self.record_size, partitions=self.partitions,
        )  # fmt: skip
        cpu_after = machine_cpu_seconds()
        if consumer.records != self.records:
            raise RuntimeError(f"ConsumerPerformance read {consumer.records:,} records of {self.records:,}")
        backup_cpu, restore_cpu = cpu_between - cpu_before, cpu_after - cpu_between
        return TurnResult(
            EngineRun(TOOLS, "backup", consumer.records, 0.0, consumer.records / consumer.records_per_sec,
                      backup_cpu, backup_cpu),
            EngineRun(TOOLS, "restore", producer.records, 0.0, producer.seconds, restore_cpu, restore_cpu),
        )  # fmt: skip

    def _engine(self, engine: str, tag: str) -> TurnResult:
        store = self.root / f"store-{tag}"
        target_topic = f"{self.topic}-r-{tag}"
        common = {"bootstrap": self.bootstrap, "topic": self.topic, "store": str(store)}
        _master, cores = ENGINES[engine]
        with master_of(engine) as master:
            backup = run_child("backup", engine, master, cores, **common)
            restore = run_child("restore", engine, master, cores, target_topic=target_topic, **common)
        if backup.records != self.records:
            raise RuntimeError(f"backup on {engine} copied {backup.records:,} records of {self.records:,}")
        as_measured = Measured(
            EXACTLY_ONCE, restore.records, self.record_size, restore.copy_seconds, 0,
            transactions=restore.transactions, mode=restore.mode,
        )  # fmt: skip
        log_end = settled_log_end(self.bootstrap, target_topic, self.records)
        check_counts(EXACTLY_ONCE, as_measured, self.records, log_end, self.partitions)
        delete_topic(self.bootstrap, target_topic)
        shutil.rmtree(store, ignore_errors=True)
        return TurnResult(backup, restore)


def turns(rounds: int) -> list[Turn[str]]:
    """A warm-up turn of every side, then ``rounds`` rounds, the order rotated."""
    return schedule(SIDES, rounds)


@dataclass
class Results:
    """Each side's measured turns, in round order, and the order of each round."""

    records: int
    record_size: int
    partitions: int
    rounds: int
    runs: dict[str, list[TurnResult]] = field(default_factory=dict)
    orders: list[list[str]] = field(default_factory=list)

    def rates(self, side: str, step: str) -> list[float]:
        return [result.step(step).records_per_sec for result in self.runs[side]]

    def ratio_to_tool(self, engine: str, step: str) -> list[float]:
        """The engine's records/s over the tool's, round by round."""
        return paired_ratios(self.rates(engine, step), self.rates(TOOLS, step))

    def copy_cpu_to_local(self, engine: str, step: str) -> list[float]:
        """The engine's copy CPU over the local engine's, round by round."""
        return paired_ratios(
            [result.step(step).copy_cpu_seconds for result in self.runs[engine]],
            [result.step(step).copy_cpu_seconds for result in self.runs[LOCAL]],
        )


def measure(records: int, record_size: int, partitions: int, rounds: int) -> Results:
    from kbackup.sandbox.kafka import local_clusters

    planned = turns(rounds)
    results = Results(records, record_size, partitions, rounds)
    results.orders = [[turn.side for turn in planned if turn.round_ == round_] for round_ in range(rounds)]
    with tempfile.TemporaryDirectory(prefix="kbackup-bench-engine-") as scratch:
        root = Path(scratch)
        with local_clusters(["bench"], root / "kafka") as (cluster,):
            bootstrap = cluster.bootstrap_servers
            topic = "engine-bench"
            create_topic(bootstrap, topic, partitions)
            produce_perf(bootstrap, topic, records, record_size)
            bench = Bench(bootstrap, topic, records, record_size, partitions, root)
            results.runs = run_schedule(planned, bench.turn)
    return results


def median_cell(values: Sequence[float], digits: int = 1) -> str:
    return f"{statistics.median(values):,.{digits}f}"


def report(results: Results, seconds: float) -> str:
    rounds = results.rounds
    lines = [
        "## Engines: local and Spark",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} by `python -m bench.bench_engine --records "
        f"{results.records} --record-size {results.record_size} --partitions {results.partitions} "
        f"--rounds {rounds}` ({results.records:,} records of {results.record_size} B on "
        f"{results.partitions} partitions, {seconds / 60:.0f} min) on {os.cpu_count()} cores. Five sides "
        f"take turns: Kafka's tools and the four engines; one unmeasured turn of each first (the "
        f"warm-up), then {rounds} round(s) of one turn of each, the order rotated from round to round "
        "(each side went first in as many rounds as the others when the rounds are a multiple of five); "
        "`os.sync()` before every turn. Rates count the copy only; start-up (the Spark session, a "
        "cluster's executors) is its own column. CPU is the whole machine's (broker included), in "
        "seconds per million records: over the copy, and over the whole step with start-up. Each "
        "figure is the median of the rounds; a ratio is taken within each round, then given as the "
        "median of the rounds and their range (min-max).",
        "",
        "| step | engine | start-up s | copy s | records/s, median (range) | ratio to Kafka's tool, "
        "median (range) | copy CPU s / M records | copy CPU to local, median (range) "
        "| step CPU s / M records |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for step in ("backup", "restore"):
        for engine in ENGINES:
            runs = [result.step(step) for result in results.runs[engine]]
            per_million = [run.cpu_seconds / run.records * 1e6 for run in runs]
            copy_per_million = [run.copy_cpu_seconds / run.records * 1e6 for run in runs]
            cells = [
                median_cell([run.startup_seconds for run in runs]),
                median_cell([run.copy_seconds for run in runs]),
                spread(results.rates(engine, step)).format(),
                spread(results.ratio_to_tool(engine, step)).format(2),
                median_cell(copy_per_million),
                spread(results.copy_cpu_to_local(engine, step)).format(2),
                median_cell(per_million),
            ]
            lines.append(f"| {step} | {engine} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"References, in the same rounds: {CONSUMER_PERF} {spread(results.rates(TOOLS, 'backup')).format()} "
        "records/s (the backup's, group join included); ProducerPerformance with the restore's producer "
        f"settings in transactions of {TRANSACTION_MS} ms {spread(results.rates(TOOLS, 'restore')).format()} "
        "records/s (the exactly-once restore's: `--producer-props "
        + " ".join(RESTORE_PROPS)
        + f" --transaction-duration-ms {TRANSACTION_MS}`, as in the Restore section).",
        "",
        "The order of each round:",
        "",
        *(f"- round {number}: " + " -> ".join(order) for number, order in enumerate(results.orders)),
        "",
        f"On the {results.partitions}-partition topic here the local engine's ratios are not the Backup "
        "and Restore sections' (one and three partitions, other sizes); compare the engines with each other, "
        "in this table. On 2 cores "
        "the standalone cluster's second worker adds no core (the broker and the driver share them): see "
        "docs/scaling.md for what that means and for sizing a real cluster.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--record-size", type=int, default=1024)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help=f"rounds after the warm-up, a multiple of {len(SIDES)} (default {DEFAULT_ROUNDS})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_RECORDS:,} records, {QUICK_ROUNDS} round after the warm-up: checks the bench runs",
    )
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
    refuse_smoke_figures_in_docs(args)
    if args.child:
        child(args)
        return
    records, rounds = (QUICK_RECORDS, QUICK_ROUNDS) if args.quick else (args.records, args.rounds)
    if not args.quick and (rounds < 1 or rounds % len(SIDES)):
        parser.error(f"--rounds {rounds}: a multiple of {len(SIDES)}, so each side goes first as often")
    began = time.monotonic()
    results = measure(records, args.record_size, args.partitions, rounds)
    text = report(results, time.monotonic() - began)
    print(text)
    if args.write_docs:
        replace_section(DOC, START_MARKER, END_MARKER, text)


if __name__ == "__main__":
    main()
