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
        f"kafka-backup: error: no broker of 127.0.0.1:{port} answered within 3s "
        "while trying to read cluster metadata"
    )
    assert err[1].startswith("kafka-backup: next step: check the bootstrap servers")


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
    assert report["source"]["cluster_id"] == source_cluster.cluster_id
    assert report["target"]["cluster_id"] == target_cluster.cluster_id
    assert report["storage"]["objects"] == 0


@pytest.mark.parametrize(
    "command", [["check"], ["show-offset-mapping", "--source-cluster", "prod", "--topic", "orders"]]
)
def test_a_bootstrap_server_without_a_port_is_one_line_naming_the_flag(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``check -b localhost`` used to end in pydantic's traceback summary and exit 1."""
    code = run([*command, "-b", "localhost"])
    captured = capsys.readouterr()
    assert code == ConfigError.exit_code
    assert captured.err.splitlines() == [
        "kafka-backup: error: --bootstrap-servers: bootstrap_servers: expected host:port, got 'localhost'"
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
