"""Relative paths in a config file are relative to the file's folder (issue 18, item 8).

They were relative to the folder the command ran in: a re-run of ``three-phase-restore -c
/etc/kbackup/dr.yaml`` from another folder did not find its backup, nor its earlier state.
Command-line flags stay relative to the current folder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import NotFoundError
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, commit_group, create_topic, produce


def three_phase(config: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = run(["three-phase-restore", "-c", str(config), "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    result: dict[str, Any] = json.loads(captured.out)
    return result


def test_a_three_phase_restore_run_again_from_another_folder_finds_its_backup_and_state(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    create_topic(source_cluster, unique_name, partitions=2)
    produce(
        source_cluster, unique_name, [Record(key=b"k%d" % i, value=b"v", partition=i % 2) for i in range(40)]
    )
    commit_group(source_cluster, f"{unique_name}-g", {(unique_name, 0): 7, (unique_name, 1): 20})
    etc, first, second = tmp_path / "etc", tmp_path / "first", tmp_path / "second"
    for folder in (etc, first, second):
        folder.mkdir()
    config = config_file(
        etc / "dr.yaml",
        backup_id="nightly",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [unique_name]},
        },
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage={"url": "./kafka-backups"},
        restore={"topic_mapping": {unique_name: f"{unique_name}-restored"}},
        offset_reset={"groups": [f"{unique_name}-g"]},
        # three_phase.state_dir and offset_reset.snapshot_dir keep their defaults
        three_phase={"build_mapping": "when-needed", "group_prefix": "moved-"},
    )

    monkeypatch.chdir(first)
    assert run(["backup", "-c", str(config)]) == 0, capsys.readouterr().err
    capsys.readouterr()
    first_run = three_phase(config, capsys)
    assert first_run["resumed_phases"] == []

    monkeypatch.chdir(second)
    second_run = three_phase(config, capsys)
    assert second_run["resumed_phases"] == ["restore", "mapping", "reset", "verify"]
    assert second_run["state_file"] == first_run["state_file"]
    assert Path(second_run["state_file"]).parent == etc / "three-phase-state"

    assert sorted(path.name for path in etc.iterdir()) == [
        "dr.yaml",
        "kafka-backups",
        "offset-snapshots",
        "three-phase-state",
    ]
    assert (etc / "kafka-backups" / "nightly" / "manifests").is_dir()
    assert list((etc / "offset-snapshots").glob("*.json"))
    assert list(first.iterdir()) == list(second.iterdir()) == []

    # A flag stays relative to the current folder: --path kafka-backups is second/kafka-backups.
    assert run(["list", "-c", str(config)]) == 0
    assert "nightly" in capsys.readouterr().out
    assert run(["list", "-c", str(config), "--path", "kafka-backups"]) == NotFoundError.exit_code
    assert capsys.readouterr().err.startswith(
        f"kafka-backup: error: there is no folder {second / 'kafka-backups'}\n"
    )
