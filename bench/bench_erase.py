"""What erasing 1 % of the keys of a backup costs, against what writing the backup cost.

    .venv/bin/python -m bench.bench_erase [--records N] [--keys K] [--fraction F] [--partitions P]
                                          [--quick] [--write-docs]

No cluster: one synthetic backup in a local folder, written through the format's own segment
writer (kbackup.sandbox.synthetic_backup, as a backup run writes: zstd level 1 segments of at
most ``--segment-records`` records, checksummed, then the manifest), of ``--records`` records
(2,000,000 by default) over ``--partitions`` partitions, record ``n`` in partition ``n mod
partitions`` with key ``user-<n mod keys>`` (each key in one partition, its records spread over
the whole of it, as a customer's over years of a topic), a 100-byte value and one header.
Writing it is timed: the backup's own time to write what it holds (without reading a source
cluster).

Then ``--fraction`` of the keys (1 % by default; a fixed pseudo-random choice) are erased with the functions
``kafka-backup erase --execute`` calls (``plan_erase``, then ``execute_erase``), each phase
timed: the plan scans the key and header columns of every segment; the execution rewrites each
segment that holds a match, commits the revisions and the erasure record, and deletes the old
segments. The result is checked: the records left are the records written less those of the
erased keys (counted from the manifests), and ``verify_key_erased`` finds the first erased key in
no segment.

The table gives the times, the erase's time against the backup's write time, and the bytes
rewritten against the bytes stored (with keys spread this way, nearly every segment holds one of
1 % of the keys, so nearly every byte is rewritten: the worst case, and the common one).
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
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from bench._perf import refuse_smoke_figures_in_docs, replace_section
from kbackup.core.config import StorageSettings
from kbackup.erase import execute_erase, plan_erase, verify_key_erased
from kbackup.format.catalog import BackupCatalog
from kbackup.format.record_match import RecordMatcher, RecordMatchSettings
from kbackup.format.segments import SegmentLimits
from kbackup.sandbox.synthetic_backup import BackupBuilder, SegmentRow
from kbackup.storage import open_storage

START_MARKER = "<!-- erase:start -->"
END_MARKER = "<!-- erase:end -->"
REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "benchmarks.md"
BACKUP_ID = "bench-erase"
TOPIC = "bench-erase"
VALUE = b"v" * 100
FIRST_TIME_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z


def key_of(number: int) -> bytes:
    return b"user-%07d" % number


def erased_key(number: int, fraction: float) -> bool:
    """A fixed pseudo-random ``fraction`` of the keys (Knuth's multiplicative hash), spread over
    every partition (every 100th key would all fall in one partition of four)."""
    return (number * 2_654_435_761) % 2**32 < fraction * 2**32


def rows(partition: int, partitions: int, records: int, keys: int) -> Iterator[SegmentRow]:
    """The partition's share of records ``n`` (``n mod partitions == partition``), offsets from 0."""
    for offset, number in enumerate(range(partition, records, partitions)):
        yield (offset, FIRST_TIME_MS + number, 0, key_of(number % keys), VALUE, [("trace", b"%d" % number)])


def write_backup(root: Path, args: argparse.Namespace) -> float:
    storage = open_storage(StorageSettings(url=str(root)))
    started = time.perf_counter()
    builder = BackupBuilder(
        storage,
        BACKUP_ID,
        scratch_dir=root.parent,
        limits=SegmentLimits(max_records=args.segment_records, compression_level=1),
    )
    builder.topic(TOPIC, args.partitions)
    for partition in range(args.partitions):
        builder.partition_rows(TOPIC, partition, rows(partition, args.partitions, args.records, args.keys))
    builder.commit(tool_version="bench-erase")
    return time.perf_counter() - started


def measure(args: argparse.Namespace, work: Path) -> dict[str, float | int]:
    root = work / "store"
    root.mkdir()
    write_secs = write_backup(root, args)
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
            f"{result['records']:,} records) from one synthetic backup of {result['segments']:,} segments "
            f"(`python -m bench.bench_erase`, {datetime.now(UTC):%Y-%m-%d}, {os.cpu_count()} CPU(s), "
            f"{platform.machine()}).",
            "",
            "| what | seconds | against the backup's write |",
            "|---|---:|---:|",
            f"| writing the backup (segments and manifest) | {write_secs:.1f} | 1.00 |",
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
