"""The restore producer's compression (``restore.compression``): CPU per record against bytes on
the wire, on two kinds of data.

    .venv/bin/python -m bench.bench_compression [--rounds N] [--records N] [--quick] [--write-docs]

Builds two backups per record size (100 B and 1 KiB values, null keys, 3 partitions): ``letters``,
the restore benchmark's random upper-case letters (no repeats a compressor can find; only an
entropy coder gains, from 26 symbols in a byte), and ``events``, JSON order events of the sizes
(field names, repeated enumerations and number formats, as application records have). Starts one
local broker, warms up, then per backup runs ``--rounds`` rounds of an exactly-once restore on one
worker with each codec (``--compression`` over ``none``, ``lz4``, ``zstd``), in rotated order.

Per run: records/s (the restore's own run time), CPU seconds per million records (the whole
process less its start-up and planning, a ``--dry-run`` of the same restore), and the bytes the
target topic holds on the broker's disk (its ``.log`` files: the producer's batches as sent, so
the bytes on the wire, framing included). Every run must land exactly the backup's records.
With ``--write-docs`` the table replaces the Compression section of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench._perf import refuse_smoke_figures_in_docs, replace_section
from bench._restore_perf import (
    REPO,
    Measured,
    delete_topic,
    letter_payloads,
    log_end_offsets,
    restore_cli,
    restore_startup_cpu,
)
from bench._stats import Spread, rotated, spread
from kbackup.sandbox.kafka import LocalKafkaCluster, local_clusters
from kbackup.sandbox.synthetic_backup import GeneratedRecord, write_synthetic_backup
from kbackup.storage import LocalStorage

PARTITIONS = 3
CODECS = ("none", "lz4", "zstd")
DOCS = REPO / "docs" / "benchmarks.md"
START, END = "<!-- compression:start -->", "<!-- compression:end -->"
_STATUSES = ("CREATED", "PAID", "PACKED", "SHIPPED", "DELIVERED", "RETURNED")
_CURRENCIES = ("EUR", "USD", "GBP", "CHF")


def event_payloads(size: int, distinct: int = 65_536, seed: int = 11) -> list[bytes]:
    """JSON order events of about ``size`` bytes: an order's fields, and for larger sizes its lines."""
    chooser = random.Random(seed)
    payloads = []
    for number in range(distinct):
        event: dict[str, object] = {
            "order_id": 10_000_000 + number,
            "customer": f"c-{chooser.randrange(100_000):06d}",
            "status": chooser.choice(_STATUSES),
            "amount": round(chooser.uniform(1, 500), 2),
            "currency": chooser.choice(_CURRENCIES),
        }
        lines: list[dict[str, object]] = []
        event["lines"] = lines
        while len(json.dumps(event)) < size - 60:
            lines.append(
                {"sku": f"SKU-{chooser.randrange(50_000):05d}", "qty": chooser.randrange(1, 5),
                 "price": round(chooser.uniform(1, 99), 2)}
            )  # fmt: skip
        text = json.dumps(event, separators=(",", ":")).encode()
        payloads.append((text + b" " * size)[:size] if len(text) < size else text[:size])
    return payloads


PAYLOADS: dict[str, Callable[[int], list[bytes]]] = {"letters": letter_payloads, "events": event_payloads}


@dataclass
class Case:
    data: str
    record_size: int
    records: int
    startup_cpu: float = 0.0
    #: Codec -> its runs, in round order; and the target's bytes on disk per run.
    runs: dict[str, list[Measured]] = field(default_factory=dict)
    disk_bytes: dict[str, list[int]] = field(default_factory=dict)

    @property
    def backup_id(self) -> str:
        return f"{self.data}-{self.record_size}-{self.records}"

    def cpu(self, codec: str) -> Spread:
        return spread([m.cpu_per_million for m in self.runs[codec]])

    def rate(self, codec: str) -> Spread:
        return spread([m.records_per_second for m in self.runs[codec]])

    def disk(self, codec: str) -> float:
        return statistics.median(self.disk_bytes[codec])


def build(root: Path, scratch: Path, case: Case) -> None:
    payloads = PAYLOADS[case.data](case.record_size)
    now = int(time.time() * 1000)

    def generate(partition: int) -> Iterator[GeneratedRecord]:
        count = case.records // PARTITIONS + (1 if partition < case.records % PARTITIONS else 0)
        for i in range(count):
            yield i, now - 60_000 + i // 100, payloads[(i * PARTITIONS + partition) % len(payloads)]

    write_synthetic_backup(
        LocalStorage(root), case.backup_id, topic="bench", partitions=PARTITIONS, records_of=generate,
        source_cluster="bench-source", scratch_dir=scratch,
    )  # fmt: skip


def topic_disk_bytes(cluster: LocalKafkaCluster, topic: str) -> int:
    """Bytes of the topic's log segments on the broker (what the producer sent, as batches)."""
    return sum(
        path.stat().st_size
        for partition in range(PARTITIONS)
        for path in (cluster.data_dir / f"{topic}-{partition}").glob("*.log")
    )


def codec_config(work: Path, codec: str) -> Path:
    """A config file setting ``restore.compression``: the rest comes from the command's flags."""
    path = work / f"compression-{codec}.yaml"
    path.write_text(f"restore:\n  compression: {codec}\n")
    return path


def run_round(case: Case, cluster: LocalKafkaCluster, root: Path, round_: int) -> None:
    bootstrap = cluster.bootstrap_servers
    for codec in rotated(list(CODECS), round_):
        target = f"c-{case.backup_id}-{codec}-{round_}-{int(time.time())}"
        measured = restore_cli(
            root, case.backup_id, bootstrap, topic="bench", target_topic=target, exactly_once=True,
            record_size=case.record_size, workers=1, startup_cpu=case.startup_cpu,
            extra=["-c", str(codec_config(root.parent, codec))],
        )  # fmt: skip
        if measured.records != case.records or log_end_offsets(bootstrap, target) <= case.records:
            raise RuntimeError(f"{codec}: {measured.records:,} records restored of {case.records:,}")
        disk = topic_disk_bytes(cluster, target)
        delete_topic(bootstrap, target)
        case.runs.setdefault(codec, []).append(measured)
        case.disk_bytes.setdefault(codec, []).append(disk)
        print(
            f"  {case.backup_id:>22} round {round_}: {codec:5} {measured.records_per_second:>10,.0f} rec/s "
            f"{measured.cpu_per_million:6.2f} CPU s/M  {disk / case.records:7.1f} B/record on disk",
            flush=True,
        )


def report(cases: list[Case], rounds: int, seconds: float, argv: str) -> str:
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m bench.bench_compression{argv}` on "
        f"{os.cpu_count()} CPU(s) ({platform.machine()}, {platform.system()}), one local broker, "
        f"{PARTITIONS} partitions, an exactly-once restore on one worker per codec, {rounds} round(s) "
        f"after a warm-up, the codecs' order rotating; {seconds / 60:.0f} min in all. CPU: seconds per "
        "million records, the whole restore less its start-up and planning; the median of the rounds "
        "(their range). On disk: the target topic's log segments per record (the batches as the "
        "producer sent them, five origin headers of about 150 bytes in every record); records/s: the "
        "restore's own run time.",
        "",
        "| data | record size | records | "
        + " | ".join(f"{codec} CPU s/M | {codec} rec/s | {codec} B/record on disk" for codec in CODECS)
        + " |",
        "|---|---:|---:|" + "---:|---:|---:|" * len(CODECS),
    ]
    for case in cases:
        cells = []
        for codec in CODECS:
            cells += [
                case.cpu(codec).format(digits=2),
                f"{case.rate(codec).median:,.0f}",
                f"{case.disk(codec) / case.records:,.0f}",
            ]
        lines.append(f"| {case.data} | {case.record_size} B | {case.records:,} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3; --quick: 1)")
    parser.add_argument("--records", type=int, default=None, help="records of 100 B (1 KiB: a quarter)")
    parser.add_argument("--quick", action="store_true", help="a tenth of the records, one round")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    rounds = args.rounds or (1 if args.quick else 3)
    small = args.records or (100_000 if args.quick else 1_000_000)
    argv = "".join(f" {arg}" for arg in sys.argv[1:] if arg != "--write-docs")
    cases = [
        Case(data, size, small if size == 100 else small // 4) for data in PAYLOADS for size in (100, 1024)
    ]
    work = Path(tempfile.mkdtemp(prefix="kbackup-bench-compression-"))
    started = time.monotonic()
    try:
        root, scratch = work / "store", work / "scratch"
        scratch.mkdir(parents=True)
        for case in cases:
            build(root, scratch, case)
        with local_clusters(["bench-compression"], work / "kafka") as (cluster,):
            bootstrap = cluster.bootstrap_servers
            warm = cases[0]
            restore_cli(
                root, warm.backup_id, bootstrap, topic="bench", target_topic="warm", exactly_once=True,
                record_size=warm.record_size, workers=1,
            )  # fmt: skip
            for case in cases:
                case.startup_cpu = statistics.median(
                    restore_startup_cpu(root, case.backup_id, bootstrap, topic="bench") for _ in range(3)
                )
                for round_ in range(rounds):
                    run_round(case, cluster, root, round_)
        text = report(cases, rounds, time.monotonic() - started, argv)
        print("\n" + text)
        if args.write_docs:
            replace_section(DOCS, START, END, f"## Restore compression\n\n{text}")
            print(f"\nwritten to {DOCS}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
