"""Damaged mapping files, or ones of another cluster, fed to ``offset-reset plan``: refused, nothing moved."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import BackupIntegrityError, NotFoundError, PreconditionError
from kbackup.format.mapping_file import OffsetMapping, ScannedPartition, write_mapping
from kbackup.offsets.ranges import OffsetRange
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import admin
from tests.support.kafka_io import group_position as committed
from tests.support.reset_cli_setup import SOURCE
from tests.support.reset_cli_setup import setup as setup  # the fixture


def mapping_for(topic: str, *, source_cluster: str, target_cluster_id: str | None) -> OffsetMapping:
    return OffsetMapping(
        source_cluster=source_cluster,
        ranges=[OffsetRange("orders", 0, topic, 0, 100, 149, 0, 49)],
        scanned=[ScannedPartition(topic, 0, 0, 50)],
        created_at=datetime.now(UTC),
        target_cluster_id=target_cluster_id,
    )


def plan_with_mapping(config: Path, mapping_file: Path, tmp_path: Path) -> list[str]:
    edited = tmp_path / "with-mapping.yaml"
    edited.write_text(
        config.read_text() + f"  strategy: from-mapping\n  mapping_file: {mapping_file}\n"
        f"  source_cluster: {SOURCE}\n"
    )
    return ["offset-reset", "plan", "-c", str(edited), "--output", str(tmp_path / "plan.json")]


def test_mapping_files_of_other_clusters_or_damaged_are_refused(
    setup: dict[str, object],
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, topic, groups = setup["config"], str(setup["topic"]), setup["groups"]
    assert isinstance(config, Path)
    assert isinstance(groups, dict)
    target_id = admin(target_cluster).list_topics(timeout=10).cluster_id
    good = tmp_path / "good.json"
    write_mapping(mapping_for(topic, source_cluster=SOURCE, target_cluster_id=target_id), good, "json")
    # The control: the same command with a matching mapping plans.
    assert run(plan_with_mapping(config, good, tmp_path)) == 0, capsys.readouterr().err
    (tmp_path / "plan.json").unlink()
    capsys.readouterr()

    other_target = tmp_path / "other-target.json"
    write_mapping(
        mapping_for(topic, source_cluster=SOURCE, target_cluster_id="AnotherCluster0000000"),
        other_target,
        "json",
    )
    other_source = tmp_path / "other-source.json"
    write_mapping(
        mapping_for(topic, source_cluster="someone-else", target_cluster_id=target_id), other_source, "json"
    )
    truncated = tmp_path / "truncated.json"
    truncated.write_text(good.read_text()[: len(good.read_text()) // 2])
    parquet = tmp_path / "m.parquet"
    write_mapping(mapping_for(topic, source_cluster=SOURCE, target_cluster_id=target_id), parquet, "parquet")
    truncated_parquet = tmp_path / "truncated.parquet"
    truncated_parquet.write_bytes(parquet.read_bytes()[:-20])
    negative = tmp_path / "negative.json"
    document = json.loads(good.read_text())
    document["topics"][0]["mappings"][0]["target_range"] = {"start": -50, "end": -1}
    negative.write_text(json.dumps(document))

    cases = [
        (other_target, PreconditionError.exit_code, "was scanned on cluster AnotherCluster0000000"),
        (other_source, PreconditionError.exit_code, "someone-else"),
        (truncated, BackupIntegrityError.exit_code, "not JSON (truncated?)"),
        (truncated_parquet, BackupIntegrityError.exit_code, "not a readable Parquet file"),
        (negative, BackupIntegrityError.exit_code, "target_range.start"),
        (tmp_path / "missing.json", NotFoundError.exit_code, "not found"),
    ]
    for mapping_file, expected, message in cases:
        code = run(plan_with_mapping(config, mapping_file, tmp_path))
        err = capsys.readouterr().err
        assert code == expected, (mapping_file.name, err)
        assert message in err.splitlines()[0], (mapping_file.name, err)
        assert not (tmp_path / "plan.json").exists()
    assert all(committed(target_cluster, g, topic, 0) is None for g in groups)
