"""What client-side encryption costs: backup and restore with it against without, side by side.

    .venv/bin/python -m bench.bench_encryption [--rounds N] [--quick] [--write-docs]

One local single-node Kafka 4.3 cluster; the 1 KiB topics of the backup and
restore benchmarks, filled by ProducerPerformance: 250,000 and 2,000,000
records for the backup (bench_backup's), 250,000 and 1,000,000 for the restore
(bench_restore's). For each operation and topic (``schedule``):

- a warm-up: one unmeasured run of each side (without encryption, then with
  it), so no measured run is the first of its kind (JIT, page cache, imports,
  the broker's first requests);
- ``--rounds`` rounds (6 by default; an even number, so that over the rounds
  each side goes first as often as the other: ``rotated``) of one run of each
  side. A backup is ``kafka-backup backup`` to a folder, without encryption
  and with ``--encryption-key file:KEY`` (zstd level 1, as both benchmarks); a
  restore is ``kafka-backup restore --idempotent`` of the two backups of the
  topic (taken once, before its warm-up) into a fresh topic.

``os.sync()`` runs before every run (the last run's dirty pages are written
back then, not during the next one); nothing is dropped from the page cache.
Every run must copy exactly the topic's records (the backup's and the
restore's summary counts, and the restored topic's log end offsets). The rate
is records over the run time each command reports itself; the ratio is taken
per round between the two runs of that round, and the table gives the median
and the full range (min-max) of every rate and ratio. The issue's bound: at
least 0.9 of the unencrypted rate on each. It is called met only when every
round of every operation is at or above it; a range that crosses it is
reported as such, with how many rounds fell below.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from bench._perf import (
    create_topic,
    measured_backup,
    produce_perf,
    refuse_smoke_figures_in_docs,
    replace_section,
)
from bench._restore_perf import Measured, delete_topic, log_end_offsets, restore_cli
from bench._stats import Turn, run_schedule, schedule, spread
from kbackup.sandbox.kafka import local_clusters
from kbackup.storage.keys import new_key_text

START_MARKER = "<!-- encryption:start -->"
END_MARKER = "<!-- encryption:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
RECORD_SIZE = 1024
PLAIN, ENCRYPTED = "without encryption", "encrypted"
#: The two sides, in the order of the warm-up and of the first round.
VARIANTS = (PLAIN, ENCRYPTED)
BOUND = 0.9
#: Rounds of a full run: even, so each side goes first in as many rounds as the other.
DEFAULT_ROUNDS = 6
QUICK_ROUNDS = 2


@dataclass(frozen=True)
class Run:
    """One measured command: records/s as it reports its own run time, peak RSS, CPU seconds."""

    records_per_second: float
    peak_rss: int
    cpu_seconds: float


@dataclass
class Side:
    """One operation (backup or restore) on one topic: each variant's rates over the rounds."""

    operation: str
    records: int
    rates: dict[str, list[float]] = field(default_factory=dict)
    #: CPU seconds (user and system, all threads) per million records, each run.
    cpu: dict[str, list[float]] = field(default_factory=dict)
    peak_rss: dict[str, int] = field(default_factory=dict)
    #: The order the variants ran in, per measured round.
    orders: list[list[str]] = field(default_factory=list)

    def add(self, variant: str, records_per_second: float, rss: int, cpu_seconds: float) -> None:
        self.rates.setdefault(variant, []).append(records_per_second)
        self.cpu.setdefault(variant, []).append(cpu_seconds / self.records * 1e6)
        self.peak_rss[variant] = max(self.peak_rss.get(variant, 0), rss)

    def ratios(self) -> list[float]:
        return [e / p for e, p in zip(self.rates[ENCRYPTED], self.rates[PLAIN], strict=True)]

    def cpu_ratios(self) -> list[float]:
        return [e / p for e, p in zip(self.cpu[ENCRYPTED], self.cpu[PLAIN], strict=True)]


def turns(rounds: int) -> list[Turn[str]]:
    """The runs of one operation on one topic: a warm-up of each variant, then ``rounds`` rounds,
    the order rotated."""
    if rounds < 2 or rounds % 2:
        raise ValueError(f"{rounds} round(s): an even number of at least 2, so each side goes first as often")
    return schedule(VARIANTS, rounds)


def measure(side: Side, rounds: int, run: Callable[[Turn[str]], Run]) -> None:
    """Run the warm-up and the rounds of ``side`` (``os.sync()`` before each run) into it."""
    planned = turns(rounds)
    for round_ in range(rounds):
        side.orders.append([turn.side for turn in planned if turn.round_ == round_])
    for variant, runs in run_schedule(planned, run).items():
        for measured in runs:
            side.add(variant, measured.records_per_second, measured.peak_rss, measured.cpu_seconds)


def label(turn: Turn[str]) -> str:
    return "warm-up" if turn.round_ is None else f"round {turn.round_}"


def children_cpu_seconds() -> float:
    """CPU of this process's finished, waited-for children: taken before and after one command, the
    difference is that command's (the broker, also a child, is still running, so not in it)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def key_flags(variant: str, key_file: Path) -> list[str]:
    return ["--encryption-key", f"file:{key_file}"] if variant == ENCRYPTED else []


def backup_once(bootstrap: str, topic: str, records: int, work: Path, key_file: Path, turn: Turn[str]) -> Run:
    target = work / f"backup-{topic}-{label(turn).replace(' ', '-')}-{turn.side.split()[0]}"
    result = measured_backup(
        bootstrap, topic, target, "bench", key_flags(turn.side, key_file), compression_level=1
    )
    if result.records != records:
        raise RuntimeError(f"backup ({turn.side}) copied {result.records} records of {records}")
    shutil.rmtree(target, ignore_errors=True)
    rate = result.records / result.seconds
    print(f"  backup  {records:>9,} {label(turn):8}: {turn.side:20} {rate:>10,.0f} rec/s", flush=True)
    # wait4's rusage of the backup process itself.
    return Run(rate, result.peak_rss_bytes, result.cpu_seconds)


def restore_once(
    bootstrap: str, topic: str, records: int, stores: dict[str, Path], key_file: Path, turn: Turn[str]
) -> Run:
    target_topic = (
        f"restored-{topic}-{label(turn).replace(' ', '-')}-{turn.side.split()[0]}-{int(time.time())}"
    )
    cpu_before = children_cpu_seconds()
    measured: Measured = restore_cli(
        stores[turn.side], "bench", bootstrap, topic=topic, target_topic=target_topic,
        exactly_once=False, record_size=RECORD_SIZE, extra=key_flags(turn.side, key_file),
    )  # fmt: skip
    cpu = children_cpu_seconds() - cpu_before
    log_end = log_end_offsets(bootstrap, target_topic)
    if measured.records != records or log_end != records:
        raise RuntimeError(
            f"restore ({turn.side}) wrote {measured.records} records (log end {log_end}) of {records}"
        )
    delete_topic(bootstrap, target_topic)
    rate = measured.records_per_second
    print(f"  restore {records:>9,} {label(turn):8}: {turn.side:20} {rate:>10,.0f} rec/s", flush=True)
    return Run(rate, measured.peak_rss_bytes, cpu)


def table(sides: list[Side]) -> str:
    lines = [
        "| operation | 1 KiB records | rounds | without encryption rec/s, median (range) | encrypted rec/s, "
        "median (range) | encrypted / without, median (range) | rounds below "
        f"{BOUND} | CPU s per 1M records, without / encrypted (medians) | CPU encrypted / without, median "
        "(range) | peak RSS without / encrypted |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for side in sides:
        ratios = side.ratios()
        below = sum(ratio < BOUND for ratio in ratios)
        lines.append(
            f"| {side.operation} | {side.records:,} | {len(ratios)} | {spread(side.rates[PLAIN]).format()} "
            f"| {spread(side.rates[ENCRYPTED]).format()} | {spread(ratios).format(2)} "
            f"| {below} of {len(ratios)} "
            f"| {spread(side.cpu[PLAIN]).median:,.1f} / {spread(side.cpu[ENCRYPTED]).median:,.1f} "
            f"| {spread(side.cpu_ratios()).format(2)} "
            f"| {side.peak_rss[PLAIN] / 2**20:,.0f} / {side.peak_rss[ENCRYPTED] / 2**20:,.0f} MiB |"
        )
    return "\n".join(lines)


def seen(side: Side) -> str:
    """What the rounds of one operation showed against the bound, without rounding it into a yes."""
    ratios = side.ratios()
    found = spread(ratios)
    rounds = len(ratios)
    below = sum(ratio < BOUND for ratio in ratios)
    faster = sum(ratio > 1 for ratio in ratios)
    name = f"{side.operation} of {side.records:,} records"
    if below == 0:
        text = f"{name}: at or above {BOUND} in every round"
    elif below == rounds:
        text = f"{name}: below {BOUND} in every round"
    else:
        text = f"{name}: the rounds cross {BOUND}, {below} of {rounds} below it"
    text += f" (ratio {found.low:.2f}-{found.high:.2f}, median {found.median:.2f})"
    if faster:
        text += (
            f"; the encrypted run was the faster in {faster} of {rounds} rounds (up to {found.high:.2f}): "
            "encryption cannot speed a run up, so two runs of this size differ by more than encryption "
            "costs here, and the range, not the median, is the figure to read"
        )
    return text + "."


def verdict(sides: Sequence[Side]) -> str:
    """The bound over every round: met only when no round of any operation fell below it."""
    ratios = [side.ratios() for side in sides]
    if all(ratio >= BOUND for values in ratios for ratio in values):
        met = "met in every round"
    elif any(all(ratio < BOUND for ratio in values) for values in ratios):
        met = "not met"
    else:
        met = "not settled: some rounds below it, others above"
    lines = [f"Bound (encrypted >= {BOUND} x without, in every round): **{met}**.", ""]
    lines += [f"- {seen(side)}" for side in sides]
    return "\n".join(lines)


def rounds_list(sides: Sequence[Side]) -> list[str]:
    """Every round's ratio, in round order, with the variant that went first in it."""
    return [
        f"- {side.operation} of {side.records:,} records: "
        + ", ".join(
            f"{ratio:.2f} ({'encrypted' if order[0] == ENCRYPTED else 'without'} first)"
            for ratio, order in zip(side.ratios(), side.orders, strict=True)
        )
        for side in sides
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help=f"an even number (default {DEFAULT_ROUNDS})"
    )
    parser.add_argument("--backup-records", default="250000,2000000", help="backup topics (comma-separated)")
    parser.add_argument(
        "--restore-records", default="250000,1000000", help="restore topics (comma-separated)"
    )
    parser.add_argument("--write-docs", action="store_true", help=f"write the table into {DOC}")
    parser.add_argument(
        "--quick", action="store_true", help=f"20,000 records, {QUICK_ROUNDS} rounds (a smoke run)"
    )
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    backup_sizes = [int(n) for n in args.backup_records.split(",")]
    restore_sizes = [int(n) for n in args.restore_records.split(",")]
    if args.quick:
        backup_sizes, restore_sizes, args.rounds = [20_000], [20_000], QUICK_ROUNDS
    if args.rounds < 2 or args.rounds % 2:
        parser.error(f"--rounds {args.rounds}: an even number, so each side goes first in as many rounds")
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
        for records in backup_sizes:
            side = Side("backup", records)
            measure(
                side, args.rounds, partial(backup_once, bootstrap, topics[records], records, work, key_file)
            )
            sides.append(side)
        for records in restore_sizes:
            stores = {
                variant: work / f"restore-source-{records}-{variant.split()[0]}" for variant in VARIANTS
            }
            for variant, store in stores.items():
                measured_backup(
                    bootstrap,
                    topics[records],
                    store,
                    "bench",
                    key_flags(variant, key_file),
                    compression_level=1,
                )
            side = Side("restore (idempotent)", records)
            measure(
                side,
                args.rounds,
                partial(restore_once, bootstrap, topics[records], records, stores, key_file),
            )
            sides.append(side)
            for store in stores.values():
                shutil.rmtree(store, ignore_errors=True)
    result = table(sides)
    print()
    print(result)
    print()
    print(verdict(sides))
    print("\n".join(["", *rounds_list(sides)]))
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
                "(`storage.encryption.key_file`). For each operation and topic: one unmeasured run of "
                f"each side first (the warm-up), then {args.rounds} rounds of one run of each, the order "
                "rotated so each side went first in half of them; `os.sync()` before every run, nothing "
                "dropped from the page cache. Rates and ratios: the median of the rounds and their full "
                "range (min-max); each ratio is taken between the two runs of one round. Load average "
                f"(1/5/15 min) at the start {start_load[0]:.1f} / {start_load[1]:.1f} / "
                f"{start_load[2]:.1f}, at the end {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}.",
                "",
                result,
                "",
                verdict(sides),
                "",
                "Every round's ratio (encrypted / without), in round order:",
                "",
                *rounds_list(sides),
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
