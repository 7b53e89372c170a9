"""The backup on worker processes against one process, and both against the bare client loop.

    .venv/bin/python -m bench.bench_backup_workers [--rounds N] [--quick] [--write-docs]

Starts one local broker, fills a topic of 4,000,000 x 100 B and one of 1,000,000 x 1 KiB records
(3 partitions, ProducerPerformance), warms up, then per topic runs ``--rounds`` rounds (3 by
default) of five runs in rotated order: the **bare consumer loop** (``bench/_consumer_floor.py``:
the topic read through confluent-kafka with the backup's consumer settings, each record's fields
taken out, nothing else) in one process and in two started together (partitions 0 and 2 in one,
1 in the other: what two backup workers make of three partitions; what a second process gives
the client itself here, the ceiling for two workers), and ``kafka-backup backup`` (a local folder,
zstd) with ``--workers 1``, ``--workers 2`` and its default (``backup.workers: auto``).

Per run: records/s (the backup's own run time, which includes the workers' start; the loop's
read span) and CPU seconds per million records (the backup: user + system of the process and its
workers from ``wait4``, less the fixed cost of a backup, measured as the median of three backups
of an empty topic: Python's start, imports, connecting, the group snapshot, the manifest; the
loop: its read span). The ratios (two workers / one, the backup's CPU per record / the loop's) are
taken per round; the table gives the median of the rounds and their range. Every backup must
copy exactly the topic's records. With ``--write-docs`` the section "Backup on workers" of
docs/benchmarks.md is replaced.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench._floor_span import TWO_WORKER_SPLIT, joined, run_together
from bench._perf import (
    create_topic,
    measured_backup,
    produce_perf,
    refuse_smoke_figures_in_docs,
    replace_section,
)
from bench._restore_perf import REPO, run_measured
from bench._stats import Spread, paired_ratios, rotated, spread
from kbackup.sandbox.kafka import local_clusters

PARTITIONS = 3
DOCS = REPO / "docs" / "benchmarks.md"
START, END = "<!-- backup-workers:start -->", "<!-- backup-workers:end -->"
LOOP = "consumer loop (backup's settings)"
LOOP_2 = "consumer loop (backup's settings), 2 processes"
ONE = "backup, 1 worker"
TWO = "backup, 2 workers"
DEFAULT = "backup, default workers"
SIDES = (LOOP, LOOP_2, ONE, TWO, DEFAULT)
#: --workers of each backup side (None: the default, ``auto``).
WORKERS = {ONE: 1, TWO: 2, DEFAULT: None}


@dataclass
class Run:
    records: int
    seconds: float
    cpu_seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def cpu_per_million(self) -> float:
        return self.cpu_seconds / self.records * 1e6


@dataclass
class Case:
    record_size: int
    records: int
    fixed_cpu: float = 0.0
    runs: dict[str, list[Run]] = field(default_factory=dict)

    @property
    def topic(self) -> str:
        return f"bw-{self.record_size}-{self.records}"

    def rates(self, side: str) -> Spread:
        return spread([run.rate for run in self.runs[side]])

    def cpu(self, side: str) -> Spread:
        return spread([run.cpu_per_million for run in self.runs[side]])

    def paired(self, numerator: str, denominator: str, metric: Callable[[Run], float]) -> Spread:
        """The median and range of the per-round ratios of two sides' ``metric``."""
        return spread(
            paired_ratios(
                [metric(r) for r in self.runs[numerator]], [metric(r) for r in self.runs[denominator]]
            )
        )

    def rate_ratio(self, numerator: str, denominator: str) -> Spread:
        return self.paired(numerator, denominator, lambda r: r.rate)

    def cpu_ratio(self, numerator: str, denominator: str) -> Spread:
        return self.paired(numerator, denominator, lambda r: r.cpu_per_million)


def consumer_loop(bootstrap: str, topic: str) -> Run:
    done = run_measured(
        [sys.executable, "-m", "bench._consumer_floor", "--bootstrap", bootstrap, "--topic", topic], cwd=REPO
    )
    result = json.loads(done.out)
    return Run(int(result["records"]), float(result["seconds"]), float(result["cpu_seconds"]))


def consumer_loops_together(bootstrap: str, topic: str) -> Run:
    """The consumer loop in two processes (``TWO_WORKER_SPLIT``), their spans started together."""
    base = [sys.executable, "-m", "bench._consumer_floor", "--bootstrap", bootstrap, "--topic", topic]
    result = joined(run_together(base, TWO_WORKER_SPLIT, REPO))
    return Run(result["records"], result["seconds"], result["cpu_seconds"])


def backup(bootstrap: str, case: Case, work: Path, side: str, round_: int) -> Run:
    target = work / f"{case.topic}-{round_}-{side.replace(' ', '_').replace(',', '')}"
    workers = WORKERS[side]
    flags = ["--workers", str(workers)] if workers is not None else []
    result = measured_backup(bootstrap, case.topic, target, "bench", flags)
    shutil.rmtree(target, ignore_errors=True)
    return Run(result.records, result.seconds, max(0.0, result.cpu_seconds - case.fixed_cpu))


def fixed_backup_cpu(bootstrap: str, work: Path) -> float:
    """CPU seconds of a backup that copies nothing: the median of three of an empty topic."""
    create_topic(bootstrap, "bw-empty", PARTITIONS)
    runs = []
    for number in range(3):
        target = work / f"empty-{number}"
        runs.append(measured_backup(bootstrap, "bw-empty", target, "bench").cpu_seconds)
        shutil.rmtree(target, ignore_errors=True)
    return statistics.median(runs)


def run_round(case: Case, bootstrap: str, work: Path, round_: int) -> None:
    for side in rotated(list(SIDES), round_):
        if side == LOOP:
            run = consumer_loop(bootstrap, case.topic)
        elif side == LOOP_2:
            run = consumer_loops_together(bootstrap, case.topic)
        else:
            run = backup(bootstrap, case, work, side, round_)
        if run.records != case.records:
            raise RuntimeError(f"{side} read {run.records:,} records of {case.records:,}")
        case.runs.setdefault(side, []).append(run)
        print(
            f"  {case.topic:>16} round {round_}: {side:34} {run.rate:>10,.0f} rec/s "
            f"{run.cpu_per_million:6.2f} CPU s/M",
            flush=True,
        )


def report(cases: list[Case], rounds: int, seconds: float, argv: str) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m bench.bench_backup_workers{argv}` on "
        f"{os.cpu_count()} CPU(s) ({platform.machine()}, {platform.system()}), one local broker, "
        f"{PARTITIONS} partitions, a local folder as storage, {rounds} round(s) after a warm-up, the "
        f"five runs' order rotating; {seconds / 60:.0f} min in all; broker and backup share the cores.",
        "",
        "Records/s, then CPU seconds per million records: the median of the rounds (their range).",
        "",
        "| record size | records | "
        + " | ".join(SIDES)
        + " | "
        + " | ".join(f"{s} CPU s/M" for s in SIDES)
        + " |",
        "|---:|---:|" + "---:|" * (2 * len(SIDES)),
    ]
    for case in cases:
        rates = [case.rates(side).format(digits=0) for side in SIDES]
        cpus = [case.cpu(side).format(digits=2) for side in SIDES]
        lines.append(f"| {case.record_size} B | {case.records:,} | " + " | ".join(rates + cpus) + " |")
    lines += [
        "",
        "Per-round ratios, the median of the rounds (their range):",
        "",
        "| record size | records | 2 workers / 1 worker (records/s) "
        "| consumer loop, 2 processes / 1 (records/s) | default / 1 worker (records/s) "
        "| backup 1 worker / consumer loop (CPU per record) "
        "| backup 2 workers / consumer loop (CPU per record) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        cells = [
            case.rate_ratio(TWO, ONE).format(digits=2),
            case.rate_ratio(LOOP_2, LOOP).format(digits=2),
            case.rate_ratio(DEFAULT, ONE).format(digits=2),
            case.cpu_ratio(ONE, LOOP).format(digits=2),
            case.cpu_ratio(TWO, LOOP).format(digits=2),
        ]
        lines.append(f"| {case.record_size} B | {case.records:,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"The backup's CPU is the process's and its workers' (`wait4`), less the fixed cost of a backup "
        f"that copies nothing ({', '.join(f'{c.fixed_cpu:.2f} s' for c in cases)}: the median of three "
        "backups of an empty topic); the workers' own start-up stays in. Its rate is its own run time "
        "(the workers' start in it). The consumer loop's rate and CPU are its read span; in two "
        "processes, from the first one's start to the last one's end, and the CPU of both.",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="a tenth of the records, one round")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    rounds = args.rounds or (1 if args.quick else 3)
    scale = 10 if args.quick else 1
    argv = "".join(f" {arg}" for arg in sys.argv[1:] if arg != "--write-docs")
    cases = [Case(100, 4_000_000 // scale), Case(1024, 1_000_000 // scale)]
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="kbackup-bench-backup-workers-"))
    try:
        with local_clusters(["bench-backup-workers"], work / "kafka") as (cluster,):
            bootstrap = cluster.bootstrap_servers
            for case in cases:
                create_topic(bootstrap, case.topic, PARTITIONS)
                print(f"{case.topic}: {produce_perf(bootstrap, case.topic, case.records, case.record_size)}")
            fixed = fixed_backup_cpu(bootstrap, work)
            print(f"fixed cost of a backup: {fixed:.2f} CPU s", flush=True)
            consumer_loop(bootstrap, cases[-1].topic)
            backup(bootstrap, Case(cases[-1].record_size, cases[-1].records), work, TWO, -1)
            for case in cases:
                case.fixed_cpu = fixed
                for round_ in range(rounds):
                    run_round(case, bootstrap, work, round_)
        text = report(cases, rounds, time.monotonic() - started, argv)
        print("\n" + text)
        if args.write_docs:
            replace_section(DOCS, START, END, f"## Backup on workers\n\n{text}")
            print(f"\nwritten to {DOCS}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
