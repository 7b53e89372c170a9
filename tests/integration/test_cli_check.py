"""``kafka-backup check`` against real clusters, and against one that is not there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import ConfigError, KafkaUnreachableError
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port


def test_unreachable_bootstrap_server_is_a_clear_bounded_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()  # nothing listens here
    config = tmp_path / "c.yaml"
    config.write_text(f"source:\n  bootstrap_servers: 127.0.0.1:{port}\n  connect_timeout_secs: 3\n")
    code = run(["check", "--config", str(config)])
    err = capsys.readouterr().err.splitlines()
    assert code == KafkaUnreachableError.exit_code == 5
    assert err[0] == (
        f"kafka-backup: error: source: no broker of 127.0.0.1:{port} answered within 3s "
        f"while trying to read cluster metadata: nothing listens at 127.0.0.1:{port} (connection refused)"
    )
    assert err[1].startswith("kafka-backup: next step: check the ports in source.bootstrap_servers")


def test_check_reaches_both_clusters_and_storage(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        f"source:\n  bootstrap_servers: {source_cluster.bootstrap_servers}\n"
        f"target:\n  bootstrap_servers: {target_cluster.bootstrap_servers}\n"
        f"storage:\n  url: {tmp_path / 'store'}\n"
    )
    assert run(["check", "-c", str(config), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    assert report["source"]["cluster_id"] == source_cluster.cluster_id
    assert report["target"]["cluster_id"] == target_cluster.cluster_id
    assert report["storage"]["objects"] == 0
    assert [part["role"] for part in report["parts"]] == ["source", "target", "storage"]

    assert run(["check", "-c", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"source   {source_cluster.bootstrap_servers}: cluster id {source_cluster.cluster_id}, 1 broker(s), "
        + out[0].rsplit(", ", 1)[1]
    )
    assert out[1].startswith(
        f"target   {target_cluster.bootstrap_servers}: cluster id {target_cluster.cluster_id}, "
    )


def test_a_reachable_source_does_not_hide_an_unreachable_target(
    source_cluster: LocalKafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check`` went on to the target and the storage only when the source answered; a broken
    target and storage after a good source are each named, the code is the first failure's."""
    port = free_port()
    config = tmp_path / "c.yaml"
    config.write_text(
        f"source:\n  bootstrap_servers: {source_cluster.bootstrap_servers}\n"
        f"target:\n  bootstrap_servers: 127.0.0.1:{port}\n  connect_timeout_secs: 2\n"
        "storage:\n  url: /x\n  encryption: {key_env: KBACKUP_TEST_NO_SUCH_VARIABLE}\n"
    )
    code = run(["check", "-c", str(config)])
    captured = capsys.readouterr()
    out, err = captured.out.splitlines(), captured.err.splitlines()
    assert code == KafkaUnreachableError.exit_code
    assert out[0].startswith(
        f"source   {source_cluster.bootstrap_servers}: cluster id {source_cluster.cluster_id}"
    )
    assert out[1] == (
        f"target   127.0.0.1:{port}: failed (exit 5): no broker of 127.0.0.1:{port} answered within 2s while "
        f"trying to read cluster metadata: nothing listens at 127.0.0.1:{port} (connection refused)"
    )
    assert out[2] == (
        "storage  /x: failed (exit 18): the environment variable KBACKUP_TEST_NO_SUCH_VARIABLE is not set "
        "(storage.encryption.key_env names it)"
    )
    assert err[0].startswith(f"kafka-backup: error: target: no broker of 127.0.0.1:{port} answered")


@pytest.mark.parametrize(
    "command", [["check"], ["show-offset-mapping", "--source-cluster", "prod", "--topic", "orders"]]
)
def test_a_bootstrap_server_without_a_port_is_one_line_naming_the_flag(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``check -b localhost`` used to end in pydantic's traceback summary and exit 1; the line says
    what -b means here (OSO kafka-backup's -b is a backup id), and neither command has --backup-id
    to point to."""
    code = run([*command, "-b", "localhost"])
    captured = capsys.readouterr()
    assert code == ConfigError.exit_code
    assert captured.err.splitlines() == [
        "kafka-backup: error: --bootstrap-servers 'localhost': expected host:port; -b here is the cluster's "
        "bootstrap servers (Kafka's --bootstrap-server), not a backup id as in OSO kafka-backup",
        "kafka-backup: next step: give host:port, e.g. kafka:9092",
    ]
    assert captured.out == ""


def test_check_says_a_storage_folder_does_not_exist_yet(
    source_cluster: LocalKafkaCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "not-yet"
    config = tmp_path / "c.yaml"
    config.write_text(
        f"source:\n  bootstrap_servers: {source_cluster.bootstrap_servers}\nstorage:\n  url: {store}\n"
    )
    assert run(["check", "-c", str(config)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == f"storage  {store}: no such folder yet (a backup creates it), 0 object(s)"
    assert not store.exists()
