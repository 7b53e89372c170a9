"""Restore throughput and memory against Kafka's own ProducerPerformance, on one local broker.

    .venv/bin/python -m bench.bench_restore [--quick] [--write-docs]

For 100-byte and 1 KiB records it builds backups at two sizes (a folder, with
the test backup builder), starts a local single-node Kafka 4.3 cluster, warms
up, then for each backup runs one after the other, each into a fresh topic
with the same partition count:

- ProducerPerformance with its defaults and ``acks=all`` (the reference);
- ProducerPerformance with the restore's batching (``linger.ms=20``,
  ``batch.size=1000000``, ``compression.type=lz4``), to separate tuning from
  the cost of Python, Parquet and headers;
- ``kafka-backup restore --idempotent`` and ``--exactly-once`` as subprocesses.

The restore's rate is records over the run time it reports itself (planning is
not in it; the up-front SHA-256 check of every segment, topic creation,
producing, commits and the wait for commit markers are); its peak RSS is the
process's VmHWM. ProducerPerformance's rate is its own report (JVM start-up
excluded). With ``--write-docs`` the table replaces the Restore section of
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from bench._restore_perf import (
    REPO,
    Measured,
    build_backup,
    create_topic,
    producer_performance,
    restore_cli,
)
from kbackup.sandbox.kafka import local_clusters

PARTITIONS = 3
DOCS = REPO / "docs" / "benchmarks.md"
START, END = "<!-- restore:start -->", "<!-- restore:end -->"
TUNED = ["linger.ms=20", "batch.size=1000000", "compression.type=lz4"]
TUNED_NAME = "ProducerPerformance tuned"


@dataclass
class Case:
    record_size: int
    records: int
    backup_bytes: int = 0
    runs: dict[str, list[Measured]] = field(default_factory=dict)

    def median_rate(self, name: str) -> float:
        return statistics.median(m.records_per_second for m in self.runs[name])

    def peak_rss(self, name: str) -> int:
        return max(m.peak_rss_bytes for m in self.runs[name])


def run_case(case: Case, bootstrap: str, root: Path, rounds: int) -> None:
    backup_id = f"bench-{case.record_size}-{case.records}"
    tag = f"{case.record_size}-{case.records}"
    for round_ in range(rounds):
        stamp = f"{tag}-{round_}-{int(time.time())}"
        runs: tuple[tuple[str, Callable[[], Measured]], ...] = (
            ("ProducerPerformance", partial(_pp, bootstrap, f"pp-{stamp}", case)),
            (TUNED_NAME, partial(_pp, bootstrap, f"ppt-{stamp}", case, TUNED)),
            (
                "restore idempotent",
                partial(
                    restore_cli, root, backup_id, bootstrap, topic="bench", target_topic=f"ri-{stamp}",
                    exactly_once=False, record_size=case.record_size,
                ),
            ),
            (
                "restore exactly-once",
                partial(
                    restore_cli, root, backup_id, bootstrap, topic="bench", target_topic=f"re-{stamp}",
                    exactly_once=True, record_size=case.record_size,
                ),
            ),
        )  # fmt: skip
        for name, run in runs:
            measured = run()
            case.runs.setdefault(name, []).append(measured)
            print(
                f"  {tag:>14} round {round_}: {name:26} {measured.records_per_second:>10,.0f} rec/s "
                f"{measured.mb_per_second:7.1f} MB/s  peak RSS {measured.peak_rss_bytes / 2**20:6.0f} MiB",
                flush=True,
            )


def _pp(bootstrap: str, topic: str, case: Case, extra: list[str] | None = None) -> Measured:
    create_topic(bootstrap, topic, PARTITIONS)
    return producer_performance(
        bootstrap, topic, records=case.records, record_size=case.record_size, extra_props=extra
    )


def report(cases: list[Case], rounds: int, seconds: float) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m bench.bench_restore` on "
        f"{os.cpu_count()} CPU(s) ({platform.machine()}, {platform.system()}), one local Kafka 4.3.1 "
        f"broker (KRaft, loopback), {PARTITIONS} partitions, acks=all everywhere, median of {rounds} "
        f"round(s) run one after the other after a warm-up; {seconds / 60:.0f} min in all; broker, "
        "tools and restore share the cores: expect noise.",
        "",
        "| record size | records | backup on disk | ProducerPerformance (defaults) | PP (restore's batching) "
        "| restore idempotent | ratio | restore exactly-once | ratio | restore peak RSS (idem / EOS) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        pp = case.median_rate("ProducerPerformance")
        tuned = case.median_rate("ProducerPerformance tuned")
        idem = case.median_rate("restore idempotent")
        eos = case.median_rate("restore exactly-once")
        mb = case.record_size / 1e6
        lines.append(
            f"| {case.record_size} B | {case.records:,} | {case.backup_bytes / 2**20:,.0f} MiB "
            f"| {pp:,.0f} rec/s ({pp * mb:.1f} MB/s) | {tuned:,.0f} rec/s ({tuned * mb:.1f} MB/s) "
            f"| {idem:,.0f} rec/s ({idem * mb:.1f} MB/s) | {idem / pp:.2f} "
            f"| {eos:,.0f} rec/s ({eos * mb:.1f} MB/s) | {eos / pp:.2f} "
            f"| {case.peak_rss('restore idempotent') / 2**20:,.0f} / "
            f"{case.peak_rss('restore exactly-once') / 2**20:,.0f} MiB |"
        )
    lines += [
        "",
        "Ratios are restore / ProducerPerformance with its defaults (the issue's reference). Against "
        "ProducerPerformance with the restore's batching: "
        + "; ".join(
            f"{c.record_size} B x {c.records:,}: idempotent "
            f"{c.median_rate('restore idempotent') / c.median_rate(TUNED_NAME):.2f}, "
            f"exactly-once {c.median_rate('restore exactly-once') / c.median_rate(TUNED_NAME):.2f}"
            for c in cases
        )
        + ".",
        "",
        "The restore's rate is its records over the run time it reports: the up-front SHA-256 check "
        "of every segment, topic creation, producing, commits and the wait for commit markers are in it; "
        "start-up and planning are not (ProducerPerformance's JVM start is not in its rate either). "
        "Peak RSS is the process's VmHWM; the table shows the highest of the rounds. Every restored "
        "record carries five origin headers (about 150 bytes) that ProducerPerformance's records do not.",
        "",
        "Every run (records/s, peak RSS):",
        "",
    ]
    for case in cases:
        for name, runs in case.runs.items():
            values = ", ".join(
                f"{m.records_per_second:,.0f} ({m.peak_rss_bytes / 2**20:,.0f} MiB)" for m in runs
            )
            lines.append(f"- {case.record_size} B x {case.records:,}, {name}: {values}")
    return "\n".join(lines)


def write_docs(text: str) -> None:
    block = f"{START}\n## Restore\n\n{text}\n{END}"
    if DOCS.exists():
        current = DOCS.read_text()
        if START in current and END in current:
            before, rest = current.split(START, 1)
            _, after = rest.split(END, 1)
            DOCS.write_text(before + block + after)
            return
        DOCS.write_text(current.rstrip() + "\n\n" + block + "\n")
        return
    DOCS.write_text(f"# Benchmarks\n\n{block}\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small backups and one round (a smoke run)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/benchmarks.md")
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="where backups go (default: a temp folder)"
    )
    args = parser.parse_args()
    scale = 10 if args.quick else 1
    rounds = 1 if args.quick else args.rounds
    cases = [
        Case(100, 1_000_000 // scale),
        Case(100, 4_000_000 // scale),
        Case(1024, 250_000 // scale),
        Case(1024, 1_000_000 // scale),
    ]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kbackup-bench-restore-"))
    root = work / "store"
    started = time.monotonic()
    try:
        for case in cases:
            built = time.monotonic()
            scratch = work / "scratch"
            scratch.mkdir(parents=True, exist_ok=True)
            case.backup_bytes = build_backup(
                root,
                f"bench-{case.record_size}-{case.records}",
                record_size=case.record_size,
                records=case.records,
                partitions=PARTITIONS,
                topic="bench",
                scratch=scratch,
            )
            print(
                f"backup of {case.records:,} x {case.record_size} B: {case.backup_bytes / 2**20:,.0f} MiB "
                f"in {time.monotonic() - built:.0f}s",
                flush=True,
            )
        with local_clusters(["bench"], work / "kafka") as (cluster,):
            bootstrap = cluster.bootstrap_servers
            print(f"broker at {bootstrap}; warming up", flush=True)
            warm = Case(1024, min(cases[2].records, 100_000))
            _pp(bootstrap, f"warm-{int(time.time())}", warm)
            restore_cli(
                root, f"bench-{cases[2].record_size}-{cases[2].records}", bootstrap, topic="bench",
                target_topic=f"warm-r-{int(time.time())}", exactly_once=True, record_size=1024,
            )  # fmt: skip
            for case in cases:
                run_case(case, bootstrap, root, rounds)
        text = report(cases, rounds, time.monotonic() - started)
        print("\n" + text)
        if args.write_docs:
            write_docs(text)
            print(f"\nwritten to {DOCS}")
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
