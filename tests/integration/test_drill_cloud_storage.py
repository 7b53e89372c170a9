"""``kafka-backup drill`` with its backup on moto's S3, fake-gcs-server and Azurite: each passes, and
each group lands on the target where the reference formula puts it (the drill's own verdict is not
trusted). ``check`` on the same config first reaches the store and leaves nothing in it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, commit_group, create_topic, group_position, produce
from tests.support.oracles import reference_position
from tests.support.restored_topics import restored_records
from tests.support.storage_backends import CLOUD_BACKENDS, storage_backend


@pytest.mark.parametrize("backend", CLOUD_BACKENDS)
def test_a_drill_on_cloud_storage_passes_and_moves_every_group_to_the_reference_position(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
    backend: str,
) -> None:
    topic = f"{unique_name}-orders"
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v%d" % i, partition=i % 2) for i in range(60)])
    group = f"{unique_name}-app"
    committed = {(topic, 0): 12, (topic, 1): 30}  # partition 1: everything read
    commit_group(source_cluster, group, committed)
    location = storage_backend(backend, request, tmp_path, f"drill-{unique_name}")
    config = config_file(
        tmp_path / "drill.yaml",
        backup_id="drill",
        source={"bootstrap_servers": [source_cluster.bootstrap_servers], "topics": {"include": [topic]}},
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage=location.section,
        three_phase={"build_mapping": "when-needed", "state_dir": str(tmp_path / "state")},
        offset_reset={"groups": [group]},
    )
    # The preflight an operator runs first reaches the store and writes nothing there.
    assert run(["check", "-c", str(config)]) == 0, capsys.readouterr().err
    assert location.objects() == {}
    report = tmp_path / "report.json"
    code = run(["drill", "-c", str(config), "--report", str(report)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert json.loads(report.read_text())["passed"] is True
    # The drill's backup is in the bucket: the backup it proved is the one on this backend.
    assert BackupCatalog(location.storage()).load("drill").manifests
    assert any(name.endswith(".parquet") for name in location.objects())
    drill_topic = f"drill.{topic}"
    for p in (0, 1):
        records = restored_records(target_cluster, drill_topic, p, source_cluster.cluster_id)
        assert len(records) == 30
        expected = reference_position(records, {(topic, p): committed[(topic, p)]})
        assert group_position(target_cluster, f"drill.{group}", drill_topic, p) == expected, p
    written = [out, err, report.read_text(), report.with_suffix(".html").read_text()]
    assert not [secret for secret in location.secrets if any(secret in text for text in written)]
