"""``show-offset-mapping`` as an operator runs it: a mistyped origin cluster (issue 18, item 11) and
what a run leaves in the folder it runs in (item 8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import NotFoundError
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import create_topic, produce
from tests.support.mapping_restores import OTHER_CLUSTER, foreign, restored

ORIGIN = "prod-eu"


@pytest.fixture
def restored_topic(target_cluster: LocalKafkaCluster, unique_name: str) -> str:
    """Five records restored from ORIGIN, one from another cluster, one written by someone else."""
    create_topic(target_cluster, unique_name)
    records = [restored(ORIGIN, unique_name, 0, offset) for offset in range(5)]
    produce(
        target_cluster,
        unique_name,
        [*records, restored(OTHER_CLUSTER, "x", 0, 100), foreign(0, "no headers")],
    )
    return unique_name


def test_a_mistyped_source_cluster_fails_naming_the_clusters_the_headers_carry(
    spark: Any, target_cluster: LocalKafkaCluster, restored_topic: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """It used to exit 0 with an empty mapping, and a reset from it moved no group."""
    args = ["show-offset-mapping", "-b", target_cluster.bootstrap_servers, "--topic", restored_topic]
    code = run([*args, "--source-cluster", "prod-ue"])
    captured = capsys.readouterr()
    assert code == NotFoundError.exit_code, captured.err
    assert captured.err.splitlines() == [
        "kafka-backup: error: no restored record of source cluster 'prod-ue' in the 1 partition(s) scanned; "
        f"their x-kafka-backup-cluster headers name '{ORIGIN}' (5 record(s)), "
        f"'{OTHER_CLUSTER}' (1 record(s))",
        "kafka-backup: next step: give --source-cluster (or offset_reset.source_cluster) as one of those",
    ]
    # The right name maps its records; the other cluster's record is a hole, not an error.
    assert run([*args, "--source-cluster", ORIGIN, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    [mapping] = [m for entry in document["topics"] for m in entry["mappings"]]
    assert (mapping["target_range"]["start"], mapping["target_range"]["end"]) == (0, 4)


@pytest.mark.slow
def test_a_mapping_run_leaves_nothing_in_the_current_folder_but_its_output(
    target_cluster: LocalKafkaCluster, restored_topic: str, tmp_path: Path
) -> None:
    """Spark 4.0 created an empty artifacts/ folder in the folder the command ran in. A process
    of its own, since the folder is made when Spark's JVM starts."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kbackup",
            "show-offset-mapping",
            "-b",
            target_cluster.bootstrap_servers,
            "--topic",
            restored_topic,
            "--source-cluster",
            ORIGIN,
            "--output",
            "mapping.json",
        ],
        cwd=tmp_path,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mapping.json"]
