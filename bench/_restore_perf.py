"""Helpers of the restore benchmark: build backups, run ProducerPerformance and the restore, measure.

Peak RSS of a child process comes from ``os.wait4`` (the kernel's own
``ru_maxrss`` of that process), so it is exact and costs nothing while it runs.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from bench._synthetic_backup import GeneratedRecord, write_synthetic_backup
from kbackup.sandbox.jars import classpath, kafka_libs
from kbackup.storage import LocalStorage

REPO = Path(__file__).resolve().parents[1]
#: ProducerPerformance's payload alphabet (random upper-case letters).
_LETTERS = bytes(range(65, 91))


@dataclass
class Measured:
    """One timed run of a producer (ProducerPerformance or the restore)."""

    name: str
    records: int
    record_size: int
    seconds: float
    peak_rss_bytes: int
    #: Wall time of the whole process (start-up and planning included).
    wall_seconds: float | None = None

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mb_per_second(self) -> float:
        return self.records * self.record_size / self.seconds / 1e6 if self.seconds else 0.0


def letter_payloads(size: int, distinct: int = 65_536, seed: int = 7) -> list[bytes]:
    """Distinct payloads of random upper-case letters (ProducerPerformance's alphabet).

    Records cycle through them; they share no bytes, and 65,536 of them span more
    than any compressor's window, so neither Parquet nor the producer's
    compression gets more out of them than the letters' entropy allows.
    """
    import random

    chooser = random.Random(seed)
    blob = bytes(chooser.choices(_LETTERS, k=size * distinct))
    return [blob[i * size : (i + 1) * size] for i in range(distinct)]


def build_backup(
    root: Path,
    backup_id: str,
    *,
    record_size: int,
    records: int,
    partitions: int,
    topic: str,
    scratch: Path,
) -> int:
    """A backup of ``records`` null-key records of ``record_size`` bytes; its size on storage."""
    storage = LocalStorage(root)
    payloads = letter_payloads(record_size)
    now = int(time.time() * 1000)
    per_partition = records // partitions

    def generate(partition: int) -> Iterator[GeneratedRecord]:
        for i in range(per_partition):
            yield i, now - 60_000 + i // 100, payloads[(i * partitions + partition) % len(payloads)]

    write_synthetic_backup(
        storage,
        backup_id,
        topic=topic,
        partitions=partitions,
        records_of=generate,
        source_cluster="bench-source",
        scratch_dir=scratch,
    )
    return sum(info.size for info in storage.list(f"{backup_id}/"))


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(60)


def _peak_rss(pid: int) -> int | None:
    """The process's resident-set high-water mark (VmHWM), in bytes; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return None
    return None


def _run_measured(command: list[str], cwd: Path | None = None) -> tuple[str, str, float, int]:
    """Run a command; (stdout, stderr, wall seconds, peak RSS bytes of the process).

    The peak is the kernel's VmHWM of the process, sampled every 20 ms until it
    exits (``ru_maxrss`` would count the benchmark's own memory, which the child
    shares between fork and exec). VmHWM only grows, so the last sample is the
    peak up to 20 ms before the end.
    """
    started = time.monotonic()
    with subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
    ) as process:
        peak = 0
        output: dict[str, bytes] = {}

        def drain() -> None:
            out, err = process.communicate()
            output["out"], output["err"] = out, err

        reader = threading.Thread(target=drain)
        reader.start()
        while reader.is_alive():
            sample = _peak_rss(process.pid)
            if sample is not None and process.returncode is None:
                peak = max(peak, sample)
            reader.join(0.02)
        seconds = time.monotonic() - started
    out, err = output.get("out", b"").decode(), output.get("err", b"").decode()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])}... exited {process.returncode}:\n{err[-3000:]}")
    return out, err, seconds, peak


_PP_SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def producer_performance(
    bootstrap: str, topic: str, *, records: int, record_size: int, extra_props: list[str] | None = None
) -> Measured:
    """Kafka's own ProducerPerformance (acks=all, no throttle, random letters) into an existing topic."""
    command = [
        "java",
        "-Xmx1g",
        "-cp",
        classpath(kafka_libs()),
        "org.apache.kafka.tools.ProducerPerformance",
        "--topic",
        topic,
        "--num-records",
        str(records),
        "--record-size",
        str(record_size),
        "--throughput",
        "-1",
        "--producer-props",
        f"bootstrap.servers={bootstrap}",
        "acks=all",
        *(extra_props or []),
    ]
    out, _err, _wall, rss = _run_measured(command)
    final = [m for m in _PP_SUMMARY.finditer(out)][-1]
    sent, rate = int(final.group(1)), float(final.group(2))
    # ProducerPerformance's own rate covers its send loop and final flush, not the JVM start.
    name = "ProducerPerformance" + (" " + " ".join(extra_props) if extra_props else "")
    return Measured(name, sent, record_size, sent / rate, rss, wall_seconds=_wall)


def restore_cli(
    storage_root: Path,
    backup_id: str,
    bootstrap: str,
    *,
    topic: str,
    target_topic: str,
    exactly_once: bool,
    record_size: int,
    extra: list[str] | None = None,
) -> Measured:
    """``kafka-backup restore`` as a subprocess; its own run time and peak RSS."""
    command = [
        sys.executable,
        "-m",
        "kbackup",
        "restore",
        "-p",
        str(storage_root),
        "--backup-id",
        backup_id,
        "-b",
        bootstrap,
        "--topic-mapping",
        f"{topic}={target_topic}",
        "--exactly-once" if exactly_once else "--idempotent",
        "--json",
        *(extra or []),
    ]
    out, _err, wall, rss = _run_measured(command, cwd=REPO)
    summary = json.loads(out)
    return Measured(
        "restore (exactly-once)" if exactly_once else "restore (idempotent)",
        int(summary["records"]),
        record_size,
        float(summary["seconds"]),
        rss,
        wall_seconds=wall,
    )
