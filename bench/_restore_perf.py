"""Helpers of the restore benchmark: build backups, run ProducerPerformance and the restore, measure.

Peak RSS of a child process comes from ``os.wait4`` (the kernel's own
``ru_maxrss`` of that process), so it is exact and costs nothing while it runs.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from bench._floor_span import joined, run_together
from bench._perf import vmhwm_bytes
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.writer import producer_tuning
from kbackup.sandbox.jars import classpath, kafka_libs
from kbackup.sandbox.synthetic_backup import GeneratedRecord, write_synthetic_backup
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
    #: Transactions the restore committed (its summary's count; 0 for the others).
    transactions: int = 0
    #: The restore's mode as its summary says (``exactly-once`` or ``idempotent``).
    mode: str = ""
    #: CPU seconds (user + system, every thread and worker process) of the measured span: the
    #: restore's with its start-up and planning subtracted (a ``--dry-run`` of the same restore),
    #: the client loop's own span, ProducerPerformance's whole JVM (start-up and JIT included).
    cpu_seconds: float = 0.0

    @property
    def cpu_per_million(self) -> float:
        """CPU seconds per million records (steadier than rates on shared cores)."""
        return self.cpu_seconds / self.records * 1e6 if self.records else 0.0

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0

    @property
    def mib_per_second(self) -> float:
        """Payload (record size x records) in MiB (2^20 bytes) per second, the unit of Kafka's perf
        tools' ``MB/sec``."""
        return self.records * self.record_size / self.seconds / 2**20 if self.seconds else 0.0


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
    """A backup of ``records`` null-key records of ``record_size`` bytes (the first partitions take
    one more when they do not divide evenly: every one of ``records`` is in it); its size on storage."""
    storage = LocalStorage(root)
    payloads = letter_payloads(record_size)
    now = int(time.time() * 1000)

    def generate(partition: int) -> Iterator[GeneratedRecord]:
        for i in range(records // partitions + (1 if partition < records % partitions else 0)):
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


def delete_topic(bootstrap: str, topic: str) -> None:
    """Delete a measured topic, so that rounds of large runs do not fill the disk."""
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive its futures
    for future in admin.delete_topics([topic]).values():
        future.result(60)


def log_end_offsets(bootstrap: str, topic: str) -> int:
    """The sum of the topic's partitions' log end offsets (records, and any transaction markers)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-restore-count"})
    try:
        metadata = consumer.list_topics(topic, timeout=30).topics[topic]
        total = 0
        for partition in metadata.partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
            if low != 0:
                raise RuntimeError(f"{topic}/{partition} starts at {low}, not 0")
            total += high
        return total
    finally:
        consumer.close()


#: The restore producer's librdkafka settings (``PRODUCER_TUNING``) that the Java producer has,
#: under the Java producer's names.
_JAVA_NAMES = {
    "linger.ms": "linger.ms",
    "batch.size": "batch.size",
    "compression.type": "compression.type",
    "max.in.flight.requests.per.connection": "max.in.flight.requests.per.connection",
    "message.max.bytes": "max.request.size",
}


def restore_producer_props(tuning: dict[str, object] | None = None) -> tuple[list[str], list[str]]:
    """The restore's producer settings as ProducerPerformance's ``--producer-props``, and the
    librdkafka settings that have no Java equivalent (left out).

    Read from the restore's own ``producer_tuning()`` (``kbackup.restore.writer``), plus what every
    producer of the restore gets from ``KafkaClients.producer``: ``acks=all`` and idempotence.
    ``queue.buffering.max.kbytes`` becomes ``buffer.memory`` in bytes.
    """
    props = ["acks=all", "enable.idempotence=true"]
    left_out = []
    for key, value in (producer_tuning() if tuning is None else tuning).items():
        if key in _JAVA_NAMES:
            props.append(f"{_JAVA_NAMES[key]}={value}")
        elif key == "queue.buffering.max.kbytes":
            props.append(f"buffer.memory={int(str(value)) * 1024}")
        else:
            left_out.append(f"{key}={value}")
    return props, left_out


#: The exactly-once restore commits a transaction after this long (or after
#: ``transaction_max_records``, which ProducerPerformance has no setting for).
TRANSACTION_MS = RestoreSettings().transaction_max_ms


@dataclass(frozen=True)
class ProcessMeasure:
    """What one child process did: its output, wall time, peak RSS and CPU."""

    out: str
    err: str
    seconds: float
    peak_rss_bytes: int
    #: User and system CPU seconds of the child and every process it waited for (a restore's
    #: workers), all threads: ``RUSAGE_CHILDREN`` before and after (one child runs at a time).
    cpu_seconds: float


def _run_measured(command: list[str], cwd: Path | None = None) -> tuple[str, str, float, int]:
    """Run a command; (stdout, stderr, wall seconds, peak RSS bytes of the process)."""
    done = run_measured(command, cwd)
    return done.out, done.err, done.seconds, done.peak_rss_bytes


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_measured(command: list[str], cwd: Path | None = None) -> ProcessMeasure:
    """Run a command; its output, wall seconds, peak RSS bytes and CPU seconds.

    The peak is the kernel's VmHWM of the process, sampled every 20 ms until it
    exits (``ru_maxrss`` would count the benchmark's own memory, which the child
    shares between fork and exec). VmHWM only grows, so the last sample is the
    peak up to 20 ms before the end.
    """
    started, cpu_started = time.monotonic(), _children_cpu()
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
            sample = vmhwm_bytes(process.pid)
            if sample is not None and process.returncode is None:
                peak = max(peak, sample)
            reader.join(0.02)
        seconds = time.monotonic() - started
    cpu = _children_cpu() - cpu_started
    out, err = output.get("out", b"").decode(), output.get("err", b"").decode()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[:4])}... exited {process.returncode}:\n{err[-3000:]}")
    return ProcessMeasure(out, err, seconds, peak, cpu)


_PP_SUMMARY = re.compile(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)")


def producer_performance(
    bootstrap: str,
    topic: str,
    *,
    records: int,
    record_size: int,
    extra_props: list[str] | None = None,
    transaction_ms: int | None = None,
    name: str | None = None,
) -> Measured:
    """Kafka's own ProducerPerformance (acks=all, no throttle, random letters) into an existing topic;
    with ``transaction_ms``, in transactions of that many milliseconds. It must send ``records``."""
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
    if transaction_ms is not None:
        command += [
            "--transactional-id", f"bench-pp-{topic}", "--transaction-duration-ms", str(transaction_ms),
        ]  # fmt: skip
    done = run_measured(command)
    out, _wall, rss = done.out, done.seconds, done.peak_rss_bytes
    final = [m for m in _PP_SUMMARY.finditer(out)][-1]
    sent, rate = int(final.group(1)), float(final.group(2))
    if sent != records:
        raise RuntimeError(f"ProducerPerformance sent {sent} records of {records} into {topic}")
    # ProducerPerformance's own rate covers its send loop and final flush, not the JVM start.
    label = name or "ProducerPerformance" + (" " + " ".join(extra_props) if extra_props else "")
    return Measured(
        label, sent, record_size, sent / rate, rss, wall_seconds=_wall, cpu_seconds=done.cpu_seconds
    )


def restore_cli(
    storage_root: Path | str,
    backup_id: str,
    bootstrap: str,
    *,
    topic: str,
    target_topic: str,
    exactly_once: bool,
    record_size: int,
    extra: list[str] | None = None,
    workers: int | None = None,
    startup_cpu: float = 0.0,
) -> Measured:
    """``kafka-backup restore`` as a subprocess; its own run time and peak RSS, and its CPU less
    ``startup_cpu`` (see :func:`restore_startup_cpu`). ``workers`` None: the default (``auto``)."""
    command = _restore_command(storage_root, backup_id, bootstrap, topic, target_topic, exactly_once)
    command += [*(["--workers", str(workers)] if workers is not None else []), *(extra or [])]
    done = run_measured(command, cwd=REPO)
    summary = json.loads(done.out)
    return Measured(
        "restore (exactly-once)" if exactly_once else "restore (idempotent)",
        int(summary["records"]),
        record_size,
        float(summary["seconds"]),
        done.peak_rss_bytes,
        wall_seconds=done.seconds,
        transactions=int(summary.get("transactions", 0)),
        mode=str(summary.get("mode", "")),
        cpu_seconds=max(0.0, done.cpu_seconds - startup_cpu),
    )


def restore_startup_cpu(storage_root: Path | str, backup_id: str, bootstrap: str, *, topic: str) -> float:
    """CPU seconds of a restore's start-up and planning: ``restore --dry-run`` of the same backup
    (Python's start, imports, reading the manifests, the plan; no worker starts, no record)."""
    command = _restore_command(storage_root, backup_id, bootstrap, topic, f"{topic}-dry-run", True)
    return run_measured([*command, "--dry-run"], cwd=REPO).cpu_seconds


def _restore_command(
    storage_root: Path | str,
    backup_id: str,
    bootstrap: str,
    topic: str,
    target_topic: str,
    exactly_once: bool,
) -> list[str]:
    return [
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
    ]


def joined_floor_result(
    name: str, record_size: int, results: Sequence[dict[str, Any]], *, wall_seconds: float
) -> Measured:
    """Several client-loop processes' lines as one run (:func:`bench._floor_span.joined`)."""
    run = joined(results)
    return Measured(
        name,
        run["records"],
        record_size,
        run["seconds"],
        run["peak_rss_bytes"],
        wall_seconds=wall_seconds,
        cpu_seconds=run["cpu_seconds"],
    )


def client_floor(
    bootstrap: str,
    topic: str,
    *,
    records: int,
    record_size: int,
    partitions: int,
    transaction_ms: int | None,
    name: str,
    headers: bool = True,
    groups: Sequence[Sequence[int]] | None = None,
) -> Measured:
    """The bare confluent-kafka loop of :mod:`bench._client_floor` into an existing topic. With
    ``groups``: one process per group of partitions, their spans started together
    (:func:`bench._floor_span.run_together`), what a second process gives the client itself on
    this machine, beside what a second restore worker gives."""
    command = [
        sys.executable, "-m", "bench._client_floor", "--bootstrap", bootstrap, "--topic", topic,
        "--records", str(records), "--record-size", str(record_size), "--partitions", str(partitions),
        "--headers", "5" if headers else "0", "--transaction-ms", str(transaction_ms or 0),
    ]  # fmt: skip
    if groups:
        started = time.monotonic()
        results = run_together(command, groups, REPO)
        return joined_floor_result(name, record_size, results, wall_seconds=time.monotonic() - started)
    done = run_measured(command, cwd=REPO)
    result = json.loads(done.out)
    return Measured(
        name,
        int(result["records"]),
        record_size,
        float(result["seconds"]),
        done.peak_rss_bytes,
        wall_seconds=done.seconds,
        cpu_seconds=float(result["cpu_seconds"]),
    )
