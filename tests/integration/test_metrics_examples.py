"""Every metric examples/prometheus-alerts.yaml and examples/grafana-dashboard.json use is exported
by a real run: a small backup and a restore of it, each writing its textfile, read with
prometheus-client's own parser."""

from __future__ import annotations

from pathlib import Path

from kbackup.cli.main import run
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import Record, create_topic, produce
from tests.support.metrics_text import example_metric_names, exported_names, parse, total


def test_every_metric_the_examples_use_is_exported_by_a_backup_or_a_restore(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = unique_name
    create_topic(source_cluster, topic, partitions=2)
    produce(source_cluster, topic, [Record(key=b"k%d" % i, value=b"v", partition=i % 2) for i in range(40)])
    store, backup_file, restore_file = tmp_path / "store", tmp_path / "backup.prom", tmp_path / "restore.prom"
    backup = ["backup", "-b", source_cluster.bootstrap_servers, "--include", topic, "--path", str(store)]
    assert run([*backup, "--backup-id", "nightly", "--metrics-textfile", str(backup_file)]) == 0
    restore = [
        "restore",
        "-b",
        target_cluster.bootstrap_servers,
        "--path",
        str(store),
        "--backup-id",
        "nightly",
    ]
    restore += ["--topic-mapping", f"{topic}={topic}-restored", "--metrics-textfile", str(restore_file)]
    assert run(restore) == 0
    backup_text, restore_text = backup_file.read_text(), restore_file.read_text()
    # Real runs, not empty registries.
    assert total(parse(backup_text), "kafka_backup_records_total") == 40
    assert total(parse(restore_text), "kafka_backup_restore_records_total") == 40

    exported = exported_names(backup_text) | exported_names(restore_text)
    for example, used in example_metric_names().items():
        assert used, f"{example} uses no kafka_backup_ metric"
        assert not used - exported, f"{example} uses metrics no run exports: {sorted(used - exported)}"
