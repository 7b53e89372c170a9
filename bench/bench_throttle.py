"""How closely the rate limits hold: a backup and a restore, each limited so that it runs for at
least 20 s, and the rate each achieved against its setting.

    .venv/bin/python -m bench.bench_throttle [--rate 1MiB] [--seconds 25] [--record-size 1024]
                                             [--quick] [--write-docs]

Starts one local single-node cluster and fills a topic of 4 partitions with ``rate * seconds``
bytes of records (an 8-byte key and a value that make ``--record-size`` bytes of key and value,
what both limits count). Then, in this process, a backup of the topic with
``backup.max_bytes_per_second: RATE``, and a restore of that backup into a new topic with
``restore.max_bytes_per_second: RATE``.

The achieved rate is read from the run's own metrics, sampled every 0.5 s: the backup's
``kafka_backup_records_total`` times the record's key and value bytes, the restore's
``kafka_backup_restore_bytes_total``. It is given two ways: over the stretch where records move
(the first sample above zero to the first at the total: the limit's own accuracy) and over the
whole run (what the run's summary gives, its checks and commits included). Reported, not
asserted: ``within 10 %`` says whether the stretch's rate is within 10 % of the setting. Run it on
a quiet machine: a run slower than its limit (a loaded host) shows as below it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import Producer

from bench._perf import create_topic, refuse_smoke_figures_in_docs, replace_section
from kbackup.backup import BackupJob, run_backup
from kbackup.backup.metrics import BackupMetrics
from kbackup.backup.settings import BackupSettings, SourceSettings
from kbackup.core.config import KafkaConnection, StorageSettings
from kbackup.core.sizes import parse_size
from kbackup.restore import service
from kbackup.restore.metrics import RestoreMetrics
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.kafka import local_clusters

TOPIC = "throttled"
PARTITIONS = 4
KEY_BYTES = 8
SAMPLE_SECS = 0.5
DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


@dataclass
class Measured:
    what: str
    setting: float
    total_bytes: int
    run_secs: float
    #: (seconds since the run started, bytes moved so far), every SAMPLE_SECS.
    samples: list[tuple[float, float]]
    waited_secs: float

    def stretch_rate(self) -> float:
        """Bytes a second from the first sample above zero to the first at the total."""
        moving = [sample for sample in self.samples if sample[1] > 0]
        done = next((s for s in moving if s[1] >= self.total_bytes), moving[-1] if moving else (0.0, 0.0))
        first = moving[0] if moving else (0.0, 0.0)
        seconds = done[0] - first[0]
        return (done[1] - first[1]) / seconds if seconds > 0 else 0.0

    def lines(self) -> list[str]:
        stretch, whole = self.stretch_rate(), self.total_bytes / self.run_secs
        off = (stretch - self.setting) / self.setting
        verdict = "yes" if abs(off) <= 0.10 else "NO"
        return [
            f"{self.what}: limit {self.setting / 2**20:.2f} MiB/s, {self.total_bytes / 2**20:.1f} MiB in "
            f"{self.run_secs:.1f}s (waited {self.waited_secs:.1f}s on the limit)",
            f"  while records moved: {stretch / 2**20:.3f} MiB/s ({off:+.1%} of the limit; within 10 %: "
            f"{verdict})",
            f"  whole run: {whole / 2**20:.3f} MiB/s ({(whole - self.setting) / self.setting:+.1%})",
        ]


def sampled(run: Callable[[], float], moved: Callable[[], float]) -> tuple[float, list[tuple[float, float]]]:
    """``run()`` (returning the seconds it waited on its limit) with ``moved()`` sampled every
    SAMPLE_SECS beside it; the run's wall seconds and the samples."""
    samples: list[tuple[float, float]] = []
    finished = threading.Event()
    started = time.monotonic()

    def sample() -> None:
        while not finished.wait(SAMPLE_SECS):
            samples.append((time.monotonic() - started, moved()))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        run()
    finally:
        finished.set()
        sampler.join()
    seconds = time.monotonic() - started
    samples.append((seconds, moved()))
    return seconds, samples


def fill(bootstrap: str, records: int, record_size: int) -> None:
    create_topic(bootstrap, TOPIC, PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1"})
    value = b"v" * (record_size - KEY_BYTES)
    for i in range(records):
        producer.produce(TOPIC, key=b"%08d" % i, value=value, partition=i % PARTITIONS)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0


def measure_backup(bootstrap: str, store: Path, rate: int, total: int, record_size: int) -> Measured:
    job = BackupJob(
        backup_id="throttled",
        source=SourceSettings(bootstrap_servers=[bootstrap], topics={"include": [TOPIC]}),  # type: ignore[arg-type]
        storage=StorageSettings(url=str(store)),
        settings=BackupSettings(max_bytes_per_second=rate),
    )
    metrics = BackupMetrics("throttled", mode="snapshot")
    labels = {"backup_id": "throttled", "topic": TOPIC}
    waited: list[float] = []

    def run() -> float:
        waited.append(run_backup(job, metrics=metrics).throttled_secs)
        return waited[0]

    def moved() -> float:
        return (metrics.registry.get_sample_value("kafka_backup_records_total", labels) or 0) * record_size

    seconds, samples = sampled(run, moved)
    return Measured("backup", rate, total, seconds, samples, waited[0])


def measure_restore(bootstrap: str, store: Path, rate: int, total: int) -> Measured:
    metrics = RestoreMetrics("throttled")
    settings = RestoreSettings(topic_mapping={TOPIC: f"{TOPIC}-restored"}, max_bytes_per_second=rate)
    job = service.prepare(
        backup_id="throttled",
        storage=StorageSettings(url=str(store)),
        target=KafkaConnection(bootstrap_servers=[bootstrap]),
        settings=settings,
        metrics=metrics,
    )
    labels = {"backup_id": "throttled", "topic": f"{TOPIC}-restored"}
    waited: list[float] = []

    def run() -> float:
        waited.append(service.run(job, metrics=metrics).throttled_secs)
        return waited[0]

    def moved() -> float:
        return metrics.registry.get_sample_value("kafka_backup_restore_bytes_total", labels) or 0.0

    seconds, samples = sampled(run, moved)
    return Measured("restore", rate, total, seconds, samples, waited[0])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", default="1MiB", help="the limit of both runs (a size a second)")
    parser.add_argument(
        "--seconds", type=float, default=25.0, help="how long each run should take at the limit"
    )
    parser.add_argument("--record-size", type=int, default=1024, help="key and value bytes of each record")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3 s a run (not 20 s or more)")
    parser.add_argument("--write-docs", action="store_true", help="write the result into docs/benchmarks.md")
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    seconds = 3.0 if args.quick else args.seconds
    rate = parse_size(args.rate)
    records = int(rate * seconds / args.record_size)
    total = records * args.record_size
    with (
        tempfile.TemporaryDirectory(prefix="bench-throttle-") as work,
        local_clusters(["bench-throttle"]) as clusters,
    ):
        bootstrap = clusters[0].bootstrap_servers
        fill(bootstrap, records, args.record_size)
        store = Path(work) / "store"
        results = [
            measure_backup(bootstrap, store, rate, total, args.record_size),
            measure_restore(bootstrap, store, rate, total),
        ]
    lines = [
        f"{records:,} records of {args.record_size} bytes (key and value), {PARTITIONS} partitions, one node"
    ]
    for result in results:
        lines.extend(result.lines())
    print("\n".join(lines))
    if args.write_docs:
        body = (
            f"Measured {datetime.now(UTC):%Y-%m-%d} with `.venv/bin/python -m bench.bench_throttle --rate "
            f"{args.rate} --seconds {seconds:g}` on {os.cpu_count()} cores, one local single-node "
            "broker, a local folder as storage:\n\n```\n" + "\n".join(lines) + "\n```"
        )
        replace_section(DOCS, "<!-- throttle:start -->", "<!-- throttle:end -->", body)


if __name__ == "__main__":
    main()
