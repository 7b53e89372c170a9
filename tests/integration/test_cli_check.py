"""``kafka-backup check`` against real clusters, and against one that is not there."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import KafkaUnreachableError
from kbackup.sandbox.kafka import LocalKafkaCluster, free_port


def test_unreachable_bootstrap_server_is_a_clear_bounded_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()  # nothing listens here
    config = tmp_path / "c.yaml"
    config.write_text(f"source:\n  bootstrap_servers: 127.0.0.1:{port}\n  connect_timeout_secs: 3\n")
    started = time.monotonic()
    code = run(["check", "--config", str(config)])
    elapsed = time.monotonic() - started
    err = capsys.readouterr().err.splitlines()
    assert code == KafkaUnreachableError.exit_code == 5
    assert err[0] == (
        f"kafka-backup: error: no broker of 127.0.0.1:{port} answered within 3s "
        "while trying to read cluster metadata"
    )
    assert err[1].startswith("kafka-backup: next step: check the bootstrap servers")
    assert elapsed < 15


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
