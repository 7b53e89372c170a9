"""``three-phase-restore`` through the CLI: the runbook's verify step after a repartitioned run (issue 18,
item 5)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.integration.test_three_phase import GROUPS, fill_and_back_up


@pytest.mark.slow
def test_the_verify_step_after_a_repartitioned_three_phase_restore_plans_from_its_mapping(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """The runbook's verify step, ``offset-reset plan -c recover.yaml``, after ``three-phase-restore -c
    recover.yaml`` restored a topic into more partitions: it plans from the mapping the run wrote and
    finds every group where the run put it."""
    topic = f"{unique_name}-orders"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store)
    config = tmp_path / "recover.yaml"
    config.write_text(yaml.safe_dump({
        "backup_id": "nightly",
        "target": {"bootstrap_servers": [target_cluster.bootstrap_servers]},
        "storage": {"url": str(store)},
        "restore": {"topic_mapping": {topic: f"{topic}-restored"}, "repartition": True,
                    "target_partitions": {topic: 3}},
        "offset_reset": {"snapshot_dir": str(tmp_path / "snapshots")},
        "three_phase": {"state_dir": str(tmp_path / "state"), "build_mapping": "when-needed"},
    }))  # fmt: skip
    restored = subprocess.run(
        [sys.executable, "-m", "kbackup", "three-phase-restore", "-c", str(config)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert "built True" in restored.stdout
    after = tmp_path / "after.json"
    verify = subprocess.run(
        [sys.executable, "-m", "kbackup", "offset-reset", "plan", "-c", str(config), "--output", str(after)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert verify.returncode == 0, verify.stderr[-3000:]
    assert f"{len(GROUPS)} group(s), 9 partition(s), 0 change(s)" in verify.stdout
    rows = [row for group in json.loads(after.read_text())["groups"] for row in group["partitions"]]
    assert {row["method"] for row in rows} == {"mapping"}
    assert all(row["new_offset"] == row["target_committed"] for row in rows)

    # Settings changed since the run (another run key): the plan names the mapping the run wrote.
    document = yaml.safe_load(config.read_text())
    document["offset_reset"]["timeout_secs"] = 600
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(document))
    mapping = next((tmp_path / "state").glob("*-mapping.json"))
    refused = subprocess.run(
        [sys.executable, "-m", "kbackup", "offset-reset", "plan", "-c", str(changed)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert refused.returncode == 3, refused.stderr[-3000:]
    assert f"set offset_reset.mapping_file: {mapping}" in refused.stderr
