"""Backup and restore on each storage backend, side by side in one run, as ratios to a local folder.

    .venv/bin/python -m bench.bench_storage [--records N] [--rounds N] [--quick] [--write-docs] [--json FILE]

One local single-node Kafka 4.3 cluster and one topic of 1 KiB records (one partition, filled by
ProducerPerformance); four stores, all on this machine: a local folder, moto's S3 server,
fake-gcs-server (Cloud Storage's JSON API) and Azurite (Azure Blob Storage), each emulator in its
own process on loopback (``bench._emulators`` over ``kbackup.sandbox.emulators``). For each
operation (``schedule``):

- a warm-up: one unmeasured run on each store, so no measured run is the first of its kind
  (imports, the SDK's first connection, the emulator's first requests, the broker's);
- ``--rounds`` rounds of one run on each store, the order of the stores rotated each round
  (``rotated``): over a multiple of four rounds every store runs once in every place, so a load
  change that lasts a while hits each alike.

A backup is ``kafka-backup backup`` of the topic to a fresh prefix of the store (zstd level 1,
as the other benchmarks), removed after the run. A restore is ``kafka-backup restore
--idempotent`` of one backup per store (taken once, before the restore's warm-up, unmeasured) into
a fresh topic, deleted after the run. ``os.sync()`` runs before every run. Every run must copy
exactly the topic's records (the summaries' counts, and the restored topic's log end offsets).

The rate of a run is records over the run time the command reports itself (its summary's
``seconds``), and MiB/s its payload (records x 1 KiB) over the same time. Each store's ratio is
taken per round, against the local folder's run of that round; the table gives the median and
the range (min-max) of every rate and ratio. Nothing here is a pass mark: the figures say what the
storage layer and each SDK cost against an emulator, not what a cloud would do (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

from bench._emulators import Section, emulated_stores
from bench._perf import (
    create_topic,
    measured_backup,
    produce_perf,
    refuse_smoke_figures_in_docs,
    replace_section,
)
from bench._restore_perf import delete_topic, log_end_offsets, restore_cli
from bench._stats import Turn, paired_ratios, run_schedule, schedule, spread
from kbackup.core.config import StorageSettings
from kbackup.sandbox.kafka import local_clusters
from kbackup.storage import open_storage

START_MARKER = "<!-- storage:start -->"
END_MARKER = "<!-- storage:end -->"
DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
RECORD_SIZE = 1024
BACKUP_ID = "bench"
LOCAL = "local folder"
DEFAULT_RECORDS = 250_000
#: A multiple of the four stores: each runs once in every place of a round.
DEFAULT_ROUNDS = 4
QUICK_RECORDS, QUICK_ROUNDS = 5_000, 1


@dataclass(frozen=True)
class Run:
    """One measured command: the records it copied and the run time it reported."""

    records: int
    seconds: float

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds

    @property
    def mib_per_second(self) -> float:
        """Payload (records x record size) in MiB (2^20 bytes) per second."""
        return self.records * RECORD_SIZE / self.seconds / 2**20


@dataclass
class Operation:
    """One operation (backup or restore): each store's runs over the rounds, in round order."""

    name: str
    records: int
    runs: dict[str, list[Run]] = field(default_factory=dict)
    #: The order the stores ran in, per measured round.
    orders: list[list[str]] = field(default_factory=list)

    def rates(self, store: str) -> list[float]:
        return [run.records_per_second for run in self.runs[store]]

    def ratios(self, store: str) -> list[float]:
        """The store's rate over the local folder's, round by round."""
        return paired_ratios(self.rates(store), self.rates(LOCAL))


def measure(
    operation: Operation, stores: Sequence[str], rounds: int, run: Callable[[Turn[str]], Run]
) -> None:
    """The warm-up and the rounds of ``operation`` on every store (``os.sync()`` before each run)."""
    planned = schedule(stores, rounds)
    for round_ in range(rounds):
        operation.orders.append([turn.side for turn in planned if turn.round_ == round_])
    operation.runs.update(run_schedule(planned, run))


def label(turn: Turn[str]) -> str:
    return "warm-up" if turn.round_ is None else f"round-{turn.round_ + 1}"


def slug(store: str) -> str:
    """A store's name as a part of a key or topic name: ``S3 (moto server)`` -> ``s3``."""
    return store.split()[0].lower()


def remove_backup(section: dict[str, Any]) -> None:
    """Every object under the section's location, removed (through kafka-backup's own storage)."""
    storage = open_storage(StorageSettings.model_validate(section))
    storage.delete_many([info.key for info in storage.list()])


def backup_once(
    bootstrap: str, topic: str, records: int, sections: dict[str, Section], turn: Turn[str]
) -> Run:
    section = sections[turn.side](f"backup-{label(turn)}-{slug(turn.side)}")
    result = measured_backup(bootstrap, topic, section, BACKUP_ID, compression_level=1)
    if result.records != records:
        raise RuntimeError(f"backup to {turn.side} copied {result.records} records of {records}")
    remove_backup(section)
    run = Run(result.records, result.seconds)
    print(f"  backup  {label(turn):8} {turn.side:22} {run.records_per_second:>10,.0f} rec/s", flush=True)
    return run


def restore_once(
    bootstrap: str, topic: str, records: int, configs: dict[str, tuple[str, Path]], turn: Turn[str]
) -> Run:
    url, config = configs[turn.side]
    target_topic = f"restored-{label(turn)}-{slug(turn.side)}-{int(time.time())}"
    measured = restore_cli(
        url, BACKUP_ID, bootstrap, topic=topic, target_topic=target_topic, exactly_once=False,
        record_size=RECORD_SIZE, extra=["-c", str(config)],
    )  # fmt: skip
    log_end = log_end_offsets(bootstrap, target_topic)
    if measured.records != records or log_end != records:
        raise RuntimeError(
            f"restore from {turn.side} wrote {measured.records} records (log end {log_end}) of {records}"
        )
    delete_topic(bootstrap, target_topic)
    run = Run(measured.records, measured.seconds)
    print(f"  restore {label(turn):8} {turn.side:22} {run.records_per_second:>10,.0f} rec/s", flush=True)
    return run


def restore_sources(
    bootstrap: str, topic: str, sections: dict[str, Section], work: Path
) -> dict[str, tuple[str, Path]]:
    """One unmeasured backup per store, and a config naming its storage section: (URL, config file)."""
    configs = {}
    for store, section_of in sections.items():
        section = section_of(f"restore-source-{slug(store)}")
        measured_backup(bootstrap, topic, section, BACKUP_ID, compression_level=1)
        config = work / f"restore-{slug(store)}.yaml"
        config.write_text(json.dumps({"storage": section}))  # JSON is YAML
        configs[store] = (str(section["url"]), config)
    return configs


def table(operations: Sequence[Operation]) -> str:
    lines = [
        "| operation | store | 1 KiB records | rounds | rec/s, median (range) | MiB/s, median (range) "
        "| ratio to the local folder, median (range) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for operation in operations:
        for store, runs in operation.runs.items():
            ratio = "1 (the reference)" if store == LOCAL else spread(operation.ratios(store)).format(2)
            lines.append(
                f"| {operation.name} | {store} | {operation.records:,} | {len(runs)} "
                f"| {spread(operation.rates(store)).format()} "
                f"| {spread([run.mib_per_second for run in runs]).format(1)} | {ratio} |"
            )
    return "\n".join(lines)


def rounds_list(operations: Sequence[Operation]) -> list[str]:
    """Every round's ratios, in round order, with the order the stores ran in."""
    lines = []
    for operation in operations:
        for round_, order in enumerate(operation.orders):
            ratios = ", ".join(
                f"{store} {operation.ratios(store)[round_]:.2f}" for store in order if store != LOCAL
            )
            lines.append(f"- {operation.name}, round {round_ + 1} (order: {', '.join(order)}): {ratios}")
    return lines


def as_json(operations: Sequence[Operation], rounds: int) -> dict[str, Any]:
    """Every measured run, for a file (``--json``): rates, run times and ratios, in round order."""
    return {
        "record_size": RECORD_SIZE,
        "rounds": rounds,
        "operations": [
            {
                "operation": operation.name,
                "records": operation.records,
                "orders": operation.orders,
                "stores": {
                    store: {
                        "seconds": [run.seconds for run in runs],
                        "records_per_second": operation.rates(store),
                        "mib_per_second": [run.mib_per_second for run in runs],
                        "ratio_to_local_folder": operation.ratios(store),
                    }
                    for store, runs in operation.runs.items()
                },
            }
            for operation in operations
        ],
    }


def measure_all(records: int, rounds: int, work: Path) -> list[Operation]:
    """The cluster, the topic and the emulators up; the backups' and the restores' rounds."""
    with local_clusters(["bench"]) as clusters, emulated_stores(work) as emulated:
        bootstrap = clusters[0].bootstrap_servers
        topic = f"bench-1024b-{records}"
        create_topic(bootstrap, topic, 1)
        print(f"{topic}: {produce_perf(bootstrap, topic, records, RECORD_SIZE)}", flush=True)
        local_root = work / "local"
        sections: dict[str, Section] = {
            LOCAL: lambda prefix: {"url": str(local_root / prefix)},
            **emulated,
        }
        stores = list(sections)
        backup = Operation("backup", records)
        measure(backup, stores, rounds, partial(backup_once, bootstrap, topic, records, sections))
        restore = Operation("restore (idempotent)", records)
        configs = restore_sources(bootstrap, topic, sections, work)
        measure(restore, stores, rounds, partial(restore_once, bootstrap, topic, records, configs))
        shutil.rmtree(local_root, ignore_errors=True)
    return [backup, restore]


def docs_body(operations: Sequence[Operation], args: argparse.Namespace, minutes: float, load: str) -> str:
    return "\n".join(
        [
            "### Results",
            "",
            f"Measured {datetime.now(UTC):%Y-%m-%d} with `.venv/bin/python -m bench.bench_storage "
            f"--records {args.records} --rounds {args.rounds}` ({minutes:.0f} min) on {os.cpu_count()} "
            f"cores ({platform.machine()}, Python {platform.python_version()}); load average (1/5/15 "
            f"min) {load}.",
            "",
            table(operations),
            "",
            "Every round's ratio to the local folder, with the order the stores ran in:",
            "",
            *rounds_list(operations),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=DEFAULT_RECORDS, help="records of the 1 KiB topic")
    parser.add_argument(
        "--rounds",
        type=int,
        default=DEFAULT_ROUNDS,
        help=f"default {DEFAULT_ROUNDS}; a multiple of 4 puts each store in each place",
    )
    parser.add_argument("--write-docs", action="store_true", help=f"write the results into {DOC}")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write every measured run into FILE")
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_RECORDS:,} records, {QUICK_ROUNDS} round (a smoke run)"
    )
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    if args.quick:
        args.records, args.rounds = QUICK_RECORDS, QUICK_ROUNDS
    if args.rounds < 1 or args.records < 1:
        parser.error("--rounds and --records: at least 1")
    start_load, started = os.getloadavg(), time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kbackup-bench-storage-") as work_dir:
        operations = measure_all(args.records, args.rounds, Path(work_dir))
    end_load = os.getloadavg()
    print()
    print(table(operations))
    print("\n".join(["", *rounds_list(operations)]))
    if args.json is not None:
        args.json.write_text(json.dumps(as_json(operations, args.rounds), indent=2) + "\n")
        print(f"\nwritten to {args.json}")
    if args.write_docs:
        load = (
            f"{start_load[0]:.1f} / {start_load[1]:.1f} / {start_load[2]:.1f} at the start, "
            f"{end_load[0]:.1f} / {end_load[1]:.1f} / {end_load[2]:.1f} at the end"
        )
        body = docs_body(operations, args, (time.monotonic() - started) / 60, load)
        replace_section(DOC, START_MARKER, END_MARKER, body)
        print(f"\nwritten to {DOC}")


if __name__ == "__main__":
    main()
