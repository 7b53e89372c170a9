"""The reset commands end to end through the CLI, with a backup's group snapshot as the source of offsets."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from kbackup.cli.main import run
from kbackup.core.errors import (
    BackupIntegrityError,
    ConfigError,
    NotFoundError,
    PreconditionError,
    UsageError,
)
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.kafka_io import group_position as committed
from tests.support.reset_cli_setup import setup as setup  # the fixture


def test_plan_execute_rollback_through_the_cli(
    setup: dict[str, object],
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, topic, groups = setup["config"], str(setup["topic"]), setup["groups"]
    assert isinstance(groups, dict)
    plan_file = tmp_path / "plan.json"
    assert run(["offset-reset", "plan", "-c", str(config), "--output", str(plan_file)]) == 0
    table = capsys.readouterr().out
    assert "binary-search" in table
    assert "0 record(s) to re-read" in table
    plan = json.loads(plan_file.read_text())
    assert plan["source"]["kind"] == "backup"
    new_offsets = {g["group_id"]: g["partitions"][0]["new_offset"] for g in plan["groups"]}
    assert new_offsets == {name: c - 100 for name, c in groups.items()}  # origin 100 is at target offset 0

    assert run(["offset-reset", "execute", "--plan", str(plan_file), "-b", target_cluster.bootstrap_servers,
                "-c", str(config), "--dry-run"]) == 0  # fmt: skip
    assert "would change" in capsys.readouterr().out
    assert all(committed(target_cluster, g, topic, 0) is None for g in groups)

    assert run(["offset-reset", "execute", "--plan", str(plan_file), "-c", str(config), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert len(result["changes"]) == 2
    for group, offset in new_offsets.items():
        assert committed(target_cluster, group, topic, 0) == offset

    assert run(["offset-rollback", "-c", str(config), "--list"]) == 0
    assert result["snapshot_id"] in capsys.readouterr().out
    assert run(["offset-rollback", "-c", str(config), "--snapshot", result["snapshot_id"]]) == 0
    assert all(committed(target_cluster, g, topic, 0) is None for g in groups)


def test_bulk_with_groups_file(
    setup: dict[str, object], target_cluster: LocalKafkaCluster, tmp_path: Path
) -> None:
    config, topic, groups = setup["config"], str(setup["topic"]), setup["groups"]
    assert isinstance(groups, dict)
    groups_file = tmp_path / "groups.txt"
    groups_file.write_text("# groups to move\n" + "\n".join(groups) + "\n")
    assert (
        run(["offset-reset-bulk", "-c", str(config), "--groups-file", str(groups_file), "--parallelism", "4"])
        == 0
    )
    assert {g: committed(target_cluster, g, topic, 0) for g in groups} == {
        g: c - 100 for g, c in groups.items()
    }


def test_bad_inputs_change_nothing(
    setup: dict[str, object],
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, topic = setup["config"], str(setup["topic"])
    assert (
        run(["offset-reset", "plan", "-c", str(config), "--groups", "no-such-group"])
        == NotFoundError.exit_code
    )
    assert "no-such-group" in capsys.readouterr().err

    truncated = tmp_path / "truncated.json"
    truncated.write_text('{"format": "kafka-backup-reset-plan", "format_ver')
    assert (
        run(["offset-reset", "execute", "--plan", str(truncated), "-c", str(config)]) == ConfigError.exit_code
    )
    assert "not a readable JSON document" in capsys.readouterr().err

    plan_file = tmp_path / "plan.json"
    assert run(["offset-reset", "plan", "-c", str(config), "--output", str(plan_file)]) == 0
    plan = json.loads(plan_file.read_text())
    plan["target"]["cluster_id"] = "some-other-cluster"
    plan_file.write_text(json.dumps(plan))
    capsys.readouterr()
    assert (
        run(["offset-reset", "execute", "--plan", str(plan_file), "-c", str(config)])
        == PreconditionError.exit_code
    )
    assert "the plan was made for cluster some-other-cluster" in capsys.readouterr().err
    groups = setup["groups"]
    assert isinstance(groups, dict)
    assert all(committed(target_cluster, g, topic, 0) is None for g in groups)


def test_more_bad_inputs_change_nothing(
    setup: dict[str, object],
    target_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config, topic, groups = Path(str(setup["config"])), str(setup["topic"]), setup["groups"]
    assert isinstance(groups, dict)
    base = config.read_text()

    def variant(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    def nothing_changed() -> None:
        assert all(committed(target_cluster, g, topic, 0) is None for g in groups)
        assert not (tmp_path / "snapshots").exists()

    # A topic the target does not have.
    unknown_topic = variant("unknown-topic.yaml", base.replace(f"orders: {topic}", "orders: no-such-topic"))
    assert run(["offset-reset", "plan", "-c", unknown_topic]) == NotFoundError.exit_code
    assert "no-such-topic" in capsys.readouterr().err

    # A mapping file that is not one.
    broken = tmp_path / "mapping.json"
    broken.write_text('{"format": "kafka-backup-offset-mapping", "ranges": [')
    with_mapping = variant("mapping.yaml", base + f"  mapping_file: {broken}\n  scan_all_partitions: true\n")
    assert run(["offset-reset", "plan", "-c", with_mapping]) == BackupIntegrityError.exit_code
    assert str(broken) in capsys.readouterr().err

    # A fixed offset outside the partition (50 records and a commit marker: 0..51).
    out_of_range = variant("offset.yaml", base + "  strategy: offset\n  offset: 500\n")
    assert run(["offset-reset", "plan", "-c", out_of_range]) == PreconditionError.exit_code
    assert "offset 500 is outside" in capsys.readouterr().err

    # A plan edited to an offset outside the partition.
    plan_file = tmp_path / "plan.json"
    assert run(["offset-reset", "plan", "-c", str(config), "--output", str(plan_file)]) == 0
    reviewed = plan_file.read_text()
    edited = json.loads(reviewed)
    edited["groups"][0]["partitions"][0]["new_offset"] = 500
    plan_file.write_text(json.dumps(edited))
    capsys.readouterr()
    assert run(["offset-reset", "execute", "--plan", str(plan_file), "-c", str(config)]) == (
        PreconditionError.exit_code
    )
    assert "new offset 500" in capsys.readouterr().err
    nothing_changed()

    # The target moved on after planning: its log start advanced past what the plan saw.
    plan_file.write_text(reviewed)
    client = AdminClient({"bootstrap.servers": target_cluster.bootstrap_servers})
    for future in client.delete_records([TopicPartition(topic, 0, 10)]).values():
        future.result(30)
    assert run(["offset-reset", "execute", "--plan", str(plan_file), "-c", str(config)]) == (
        PreconditionError.exit_code
    )
    error = capsys.readouterr().err
    assert f"{topic}/0 was 0..51 when planned, now 10..51" in error
    nothing_changed()


def test_the_printed_next_step_executes_the_plan_as_written(
    setup: dict[str, object], target_cluster: LocalKafkaCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    """``offset-reset plan --output`` ends with the command that applies the plan: run as printed (from
    the same folder), it connects to the target as the config says and moves the groups."""
    config, topic, groups = setup["config"], str(setup["topic"]), setup["groups"]
    assert isinstance(config, Path)
    assert isinstance(groups, dict)
    plan_file = config.parent / "reviewed-plan.json"
    assert run(["offset-reset", "plan", "-c", str(config), "--output", str(plan_file)]) == 0
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    printed = shlex.split(last_line.partition("then: ")[2])
    assert printed[0] == "kafka-backup"
    # Without the config the command names, execute says where the plan points and what to give.
    assert run(["offset-reset", "execute", "--plan", str(plan_file)]) == UsageError.exit_code
    error = capsys.readouterr().err
    assert f"for cluster {target_cluster.cluster_id} at {target_cluster.bootstrap_servers}" in error
    assert "give -c with the config the plan was made from" in error
    assert run(printed[1:]) == 0, capsys.readouterr().err
    assert {g: committed(target_cluster, g, topic, 0) for g in groups} == {
        g: c - 100 for g, c in groups.items()
    }
