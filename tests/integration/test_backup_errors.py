"""Bad input gets a clear error naming the problem, within a bounded time, and loses nothing."""

from __future__ import annotations

import time
from pathlib import Path

from confluent_kafka.admin import AdminClient

from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.emulators import S3Server
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port
from kbackup.storage import open_storage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import read_backup, take_backup
from tests.support.cli_run import RunCli
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, consume_all, create_topic, produce


def test_unreachable_cluster_is_named_within_the_timeout(tmp_path: Path, cli: RunCli) -> None:
    servers = f"127.0.0.1:{free_port()}"
    config = str(
        config_file(
            tmp_path / "c.yaml",
            backup_id="b",
            source={"bootstrap_servers": [servers], "connect_timeout_secs": 2},
        )
    )
    code, _, err = cli("backup", "-c", config, "--path", str(tmp_path / "store"))
    assert code == 5
    assert servers in err
    # The configured deadline is the one the client was given (the message says which it waited).
    assert "within 2s" in err
    assert not BackupCatalog(open_storage(str(tmp_path / "store"))).exists("b")


def test_unknown_topic_fails_or_is_skipped_with_a_warning(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, cli: RunCli
) -> None:
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v")])
    missing = f"{unique_name}-missing"
    base = ["backup", "-b", source_cluster.bootstrap_servers, "--path", str(tmp_path), "--backup-id", "t"]
    code, _, err = cli(*base, "--include", unique_name, "--include", missing)
    assert code == 9
    assert missing in err
    assert "on_missing_topic" in err
    assert not BackupCatalog(open_storage(str(tmp_path))).exists("t")

    config = str(config_file(tmp_path / "warn.yaml", backup={"on_missing_topic": "warn"}))
    code, out, err = cli(*base, "-c", config, "--include", unique_name, "--include", missing)
    assert code == 0, err
    assert f"topic(s) {missing} do not exist" in err
    assert read_backup(tmp_path, "t") == consume_all(source_cluster, unique_name)
    assert "1 topic(s)" in out


def test_unwritable_folder_fails_before_reading(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, cli: RunCli
) -> None:
    create_topic(source_cluster, unique_name)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, _, err = cli(
        "backup",
        "-b",
        source_cluster.bootstrap_servers,
        "--include",
        unique_name,
        "--path",
        str(blocker / "store"),
        "--backup-id",
        "w",
    )
    assert code == 7
    assert str(blocker) in err


def test_missing_bucket_fails_before_reading(
    source_cluster: LocalKafkaCluster,
    s3_server: S3Server,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    create_topic(source_cluster, unique_name)
    config = str(
        config_file(
            tmp_path / "s3.yaml",
            backup_id="s",
            source={
                "bootstrap_servers": [source_cluster.bootstrap_servers],
                "topics": {"include": [unique_name]},
            },
            storage=s3_server.storage_settings("no-such-bucket", "x"),
        )
    )
    code, _, err = cli("backup", "-c", config)
    assert code == 7
    assert "bucket no-such-bucket does not exist" in err
    # The secret key is never printed.
    assert s3_server.storage_settings(TEST_BUCKET)["secret_access_key"] not in err


def test_backup_id_of_another_source_cluster_is_refused(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    create_topic(source_cluster, unique_name)
    create_topic(target_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v")])
    take_backup(source_cluster, tmp_path, "shared", [unique_name], source_cluster_id="east")
    before = sorted(info.key for info in open_storage(str(tmp_path)).list())

    base = ["backup", "--include", unique_name, "--path", str(tmp_path), "--backup-id", "shared"]
    code, _, err = cli(*base, "-b", source_cluster.bootstrap_servers, "--source-cluster-id", "west")
    assert code == 10
    assert "holds source cluster 'east'" in err
    assert "'west'" in err
    # Same label, but another Kafka cluster behind it.
    code, _, err = cli(*base, "-b", target_cluster.bootstrap_servers, "--source-cluster-id", "east")
    assert code == 10
    assert source_cluster.cluster_id in err
    assert target_cluster.cluster_id in err
    assert sorted(info.key for info in open_storage(str(tmp_path)).list()) == before


def test_recreated_topic_is_refused(
    source_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, cli: RunCli
) -> None:
    create_topic(source_cluster, unique_name)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"v")] * 3)
    take_backup(source_cluster, tmp_path, "re", [unique_name])
    admin = AdminClient({"bootstrap.servers": source_cluster.bootstrap_servers})
    admin.delete_topics([unique_name])[unique_name].result(30)
    deadline = time.monotonic() + 30
    while True:
        try:
            create_topic(source_cluster, unique_name)
            break
        except Exception:
            assert time.monotonic() < deadline
            time.sleep(0.5)
    produce(source_cluster, unique_name, [Record(key=b"k", value=b"new")] * 5)
    code, _, err = cli(
        "backup",
        "-b",
        source_cluster.bootstrap_servers,
        "--include",
        unique_name,
        "--path",
        str(tmp_path),
        "--backup-id",
        "re",
    )
    assert code == 10
    assert "re-created" in err
    assert len(BackupCatalog(open_storage(str(tmp_path))).load("re").manifests) == 1
