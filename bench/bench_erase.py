"""What erasing 1 % of the keys of a backup costs, against what taking the backup cost.

    .venv/bin/python -m bench.bench_erase [--records N] [--keys K] [--fraction F] [--partitions P]
                                          [--quick] [--write-docs]

One local single-node Kafka broker (kbackup.sandbox) and one topic of ``--partitions``
partitions, filled with ``--records`` records (2,000,000 by default): record ``n`` in partition
``n mod partitions`` with key ``user-<n mod keys>`` (each key in one partition, its records spread
over the whole of it, as a customer's over years of a topic), a 100-byte random value (incompressible,
as most payloads are after their producer's compression) and one header.
Then a real ``kafka-backup backup`` (a child process, its segments of at most
``--segment-records`` records, zstd level 1, into a local folder) copies the topic, timed by the
run's own summary: the backup's own time.

Then ``--fraction`` of the keys (1 % by default; a fixed pseudo-random choice) are erased with the functions
``kafka-backup erase --execute`` calls (``plan_erase``, then ``execute_erase``), each phase
timed: the plan scans the key and header columns of every segment; the execution rewrites each
segment that holds a match, commits the revisions and the erasure record, and deletes the old
segments. The result is checked: the records left are the records backed up less those of the
erased keys (counted from the manifests), and ``verify_key_erased`` finds the first erased key in
no segment.

The table gives the times, the erase's time against the backup's, and the bytes rewritten
against the bytes stored (with keys spread this way, nearly every segment holds one of 1 % of
the keys, so nearly every byte is rewritten: the worst case, and the common one).
``--write-docs`` replaces the section between ``<!-- erase:start -->`` and ``<!-- erase:end -->``
of docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Producer

from bench._perf import create_topic, measured_backup, refuse_smoke_figures_in_docs, replace_section
from kbackup.core.config import StorageSettings
from kbackup.erase import execute_erase, plan_erase, verify_key_erased
from kbackup.format.catalog import BackupCatalog
from kbackup.format.record_match import RecordMatcher, RecordMatchSettings
from kbackup.sandbox.jars import KAFKA_VERSION
from kbackup.sandbox.kafka import local_clusters
from kbackup.storage import open_storage

START_MARKER = "<!-- erase:start -->"
END_MARKER = "<!-- erase:end -->"
REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
BACKUP_ID = "bench-erase"
TOPIC = "bench-erase"
VALUE_BYTES = 100


def key_of(number: int) -> bytes:
    return b"user-%07d" % number


def erased_key(number: int, fraction: float) -> bool:
    """A fixed pseudo-random ``fraction`` of the keys (Knuth's multiplicative hash), spread over
    every partition (every 100th key would all fall in one partition of four)."""
    return (number * 2_654_435_761) % 2**32 < fraction * 2**32


def fill(bootstrap: str, args: argparse.Namespace) -> None:
    """The topic: record ``n`` in partition ``n mod partitions`` with key ``user-<n mod keys>``."""
    create_topic(bootstrap, TOPIC, args.partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1"})
    for number in range(args.records):
        while True:
            try:
                producer.produce(
                    TOPIC,
                    key=key_of(number % args.keys),
                    value=os.urandom(VALUE_BYTES),
                    headers=[("trace", b"%d" % number)],
                    partition=number % args.partitions,
                )
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
        if number % 10_000 == 0:
            producer.poll(0)
    if producer.flush(300) != 0:
        raise SystemExit("records were not delivered to the bench topic")


def measure(args: argparse.Namespace, work: Path) -> dict[str, float | int]:
    root = work / "store"
    with local_clusters(["bench-erase"]) as clusters:
        bootstrap = clusters[0].bootstrap_servers
        fill(bootstrap, args)
        backed_up = measured_backup(
            bootstrap,
            TOPIC,
            root,
            BACKUP_ID,
            segment_max_records=args.segment_records,
            compression_level=1,
        )
    if backed_up.records != args.records:
        raise SystemExit(f"the backup copied {backed_up.records} records of {args.records}")
    write_secs = backed_up.seconds
    storage = open_storage(StorageSettings(url=str(root)))
    stored_bytes = BackupCatalog(storage).load(BACKUP_ID).total_bytes()
    erased = [key_of(number) for number in range(args.keys) if erased_key(number, args.fraction)]
    matcher = RecordMatcher.from_settings(RecordMatchSettings(keys=[key.decode() for key in erased]))
    started = time.perf_counter()
    plan = plan_erase(storage, matcher, [BACKUP_ID], request_id="bench", scratch_dir=work)
    planned = time.perf_counter()
    execute_erase(storage, plan, matcher, scratch_dir=work)
    done = time.perf_counter()
    expected = sum(1 for number in range(args.records) if erased_key(number % args.keys, args.fraction))
    left = BackupCatalog(storage).load(BACKUP_ID).total_records()
    if plan.records_matched != expected or left != args.records - expected:
        raise SystemExit(f"erased {plan.records_matched} records, expected {expected}; {left} left")
    if not verify_key_erased(storage, [BACKUP_ID], erased[0], scratch_dir=work)[0].gone:
        raise SystemExit("an erased key is still in the backup")
    return {
        "records": args.records,
        "keys": args.keys,
        "erased_keys": len(erased),
        "erased_records": expected,
        "write_secs": write_secs,
        "plan_secs": planned - started,
        "execute_secs": done - planned,
        "stored_bytes": stored_bytes,
        "rewritten_bytes": plan.bytes_to_rewrite,
        "segments": plan.backups[0].segments_scanned,
        "segments_rewritten": len(plan.backups[0].matches),
    }


def table(result: dict[str, float | int]) -> str:
    erase_secs = float(result["plan_secs"]) + float(result["execute_secs"])
    write_secs = float(result["write_secs"])
    return "\n".join(
        [
            f"Erasing {result['erased_keys']:,} of {result['keys']:,} keys ({result['erased_records']:,} of "
            f"{result['records']:,} records, 100-byte values) from a backup of {result['segments']:,} "
            "segments "
            f"that `kafka-backup backup` took of one local Kafka {KAFKA_VERSION} broker into a local folder "
            f"(`python -m bench.bench_erase`, {datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} CPU(s), "
            f"{platform.machine()}).",
            "",
            "| what | seconds | against the backup |",
            "|---|---:|---:|",
            f"| the backup run (its own summary's seconds) | {write_secs:.1f} | 1.00 |",
            f"| erase: plan (scan keys and headers) | {float(result['plan_secs']):.1f} | "
            f"{float(result['plan_secs']) / write_secs:.2f} |",
            f"| erase: execute (rewrite, revisions, record, deletes) | {float(result['execute_secs']):.1f} | "
            f"{float(result['execute_secs']) / write_secs:.2f} |",
            f"| erase: plan and execute | {erase_secs:.1f} | {erase_secs / write_secs:.2f} |",
            "",
            f"Bytes rewritten: {int(result['rewritten_bytes']):,} of {int(result['stored_bytes']):,} stored "
            f"({int(result['rewritten_bytes']) / int(result['stored_bytes']):.0%}), "
            f"{result['segments_rewritten']:,} of {result['segments']:,} segments.",
        ]
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--segment-records", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="Smoke sizes: 50,000 records, 5,000 keys.")
    parser.add_argument("--write-docs", action="store_true")
    args = parser.parse_args(argv)
    refuse_smoke_figures_in_docs(args)
    if args.keys % args.partitions:
        parser.error("--keys must be a multiple of --partitions (each key in one partition)")
    if args.quick:
        args.records, args.keys, args.segment_records = 50_000, 5_000, 10_000
    work = Path(tempfile.mkdtemp(prefix="bench-erase-"))
    try:
        result = measure(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = table(result)
    print(text)
    if args.write_docs:
        replace_section(DOC, START_MARKER, END_MARKER, "## Erase\n\n" + text)


if __name__ == "__main__":
    main()
