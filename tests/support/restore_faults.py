"""Restores run as a user runs them while a test takes nodes of the three-node target down: the
command in the background with its output in files (read while it runs), the transactional id a
restore will use, and a backup of several small topics for topic creation under a fault."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer

from kbackup.core.config import StorageSettings
from kbackup.restore import service
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage
from tests.support.crash_restores import NOW
from tests.support.restore_checks import REPO, restore_command


@dataclass
class BackgroundRestore:
    """``kafka-backup restore`` running in the background, its stderr in a file read while it runs."""

    process: subprocess.Popen[str]
    stderr_file: Path

    @classmethod
    def start(cls, folder: Path, *args: str) -> BackgroundRestore:
        folder.mkdir(parents=True, exist_ok=True)
        stderr_file = folder / "stderr.log"
        with (folder / "stdout.log").open("w") as out, stderr_file.open("w") as err:
            process = subprocess.Popen(
                restore_command("restore", *args),
                cwd=REPO,
                stdout=out,
                stderr=err,
                text=True,
                env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
            )
        return cls(process, stderr_file)

    def running(self) -> bool:
        return self.process.poll() is None

    def stderr(self) -> str:
        return self.stderr_file.read_text()

    def finish(self, timeout: float = 300) -> int:
        """Its exit code, once it ended (killed when it outlives ``timeout``)."""
        try:
            return self.process.wait(timeout)
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


def restore_transactional_id(cluster: LocalKafkaCluster, store: Path, backup_id: str) -> str:
    """The transactional id ``restore --exactly-once`` of ``backup_id`` into ``cluster`` uses, as the
    restore plans it (it is derived from the backup, the selection and the target's cluster id)."""
    job = service.prepare(
        backup_id=backup_id,
        storage=StorageSettings(url=str(store)),
        target=cluster.connection(),
        settings=RestoreSettings(exactly_once=True),
    )
    return job.plan.transactional_id


def make_transaction_state_topic(cluster: LocalKafkaCluster) -> None:
    """Kafka creates ``__transaction_state`` for the first transactional producer: before it, no
    transactional id has a coordinator to find."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "transactional.id": "make-tx-state"})
    producer.init_transactions(60)


def several_topics_backup(
    root: Path, scratch: Path, backup_id: str, partitions: dict[str, int], records_per_partition: int
) -> dict[tuple[str, int], list[BackupRecord]]:
    """A backup of ``partitions`` (topic name: partition count), a few records in each partition;
    the records written, by (topic, partition)."""
    builder = BackupBuilder(
        LocalStorage(root), backup_id, source_cluster=f"{backup_id}-src", scratch_dir=scratch
    )
    written: dict[tuple[str, int], list[BackupRecord]] = {}
    for topic, count in partitions.items():
        builder.topic(topic, count)
        for partition in range(count):
            records = [
                BackupRecord(
                    offset=i,
                    key=b"%s-%d-%d" % (topic.encode(), partition, i),
                    value=b"v%d" % i,
                    headers=(("n", b"%d" % i),),
                    timestamp=NOW - 60_000 + i,
                )
                for i in range(records_per_partition)
            ]
            builder.partition(topic, partition, records)
            written[(topic, partition)] = records
    builder.commit()
    return written
