"""The restore's bars (issue 18, item 13): the segment check and each topic's restore get a bar
that counts its own unit, shows a rate (records/s and MiB/s for records) and stops when its phase
ends, so a finished phase's clock does not run on through the next one."""

from __future__ import annotations

from pathlib import Path

from kbackup.core.config import StorageSettings
from kbackup.core.progress import Progress
from kbackup.restore import service
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import LocalStorage
from tests.support.backup_builder import backup_from_cluster
from tests.support.kafka_io import Record, create_topic, produce


def test_each_phase_of_a_restore_closes_its_bar_with_a_rate(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    create_topic(source_cluster, unique_name, 2)
    produce(
        source_cluster,
        unique_name,
        [Record(key=b"k%d" % i, value=b"v" * 100, partition=i % 2) for i in range(300)],
    )
    backup_from_cluster(source_cluster, [unique_name], LocalStorage(tmp_path / "store"), "b")
    job = service.prepare(
        backup_id="b",
        storage=StorageSettings(url=str(tmp_path / "store")),
        target=target_cluster.connection(),
        settings=RestoreSettings(topic_mapping={unique_name: f"{unique_name}-restored"}),
    )
    progress = Progress(enabled=True)
    with progress:
        summary = service.run(job, progress=progress)
        bars = {task.description: task for task in progress.bars.tasks}
        assert summary.records == 300
        check = bars["check backup segments"]
        restored = bars[f"restore {unique_name} -> {unique_name}-restored"]
        assert (check.fields["unit"], check.completed, check.total) == ("segments", check.total, check.total)
        assert (restored.fields["unit"], restored.completed, restored.total) == ("records", 300, 300)
        assert restored.fields["data_bytes"] >= 300 * 100
        # Both closed: each bar's clock stopped when its phase ended, the check's before the restore's.
        assert check.stop_time is not None
        assert restored.stop_time is not None
        assert restored.start_time is not None
        assert check.stop_time <= restored.start_time
