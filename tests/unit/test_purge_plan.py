"""restore.purge_target's plan without a cluster: which topics it purges, its dry-run lines, the state a
``topics`` purge plans against, and the flags over the config."""

from __future__ import annotations

import pytest

from kbackup.app.config import KBackupConfig
from kbackup.app.overrides import RestoreFlags, backup_job, restore_inputs
from kbackup.core.errors import ConfigError
from kbackup.restore.plan import TargetState
from kbackup.restore.plan_text import purge_lines
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.target import PurgePlan, PurgeStep, purgeable_topics, without_topics


def test_only_existing_target_topics_are_purged_never_internal_ones_nor_the_progress_topic() -> None:
    progress = "kafka-backup.restore-progress"
    existing = {"orders", "payments", "__consumer_offsets", progress}
    targets = ["payments", "orders", "missing", "__consumer_offsets", progress, "orders"]
    assert purgeable_topics(targets, existing, progress_topic=progress) == [
        "orders",
        "payments",
    ]


def test_a_records_step_names_the_end_offsets_it_deletes_below() -> None:
    step = PurgeStep("orders", "records", {1: (5, 20), 0: (0, 10)})
    assert step.records == 25
    assert step.describe() == (
        "topic orders: delete its records below the end offsets (partition:offset) 0:10, 1:20 (25 record(s))"
    )


def test_a_topics_step_says_how_the_topic_is_created_again() -> None:
    step = PurgeStep("orders", "topics", {0: (0, 3), 1: (0, 4)}, partitions_after=6, configs_after={"a": "b"})
    assert step.describe() == (
        "topic orders: delete it (2 partition(s), 7 record(s)) and create it again with 6 partition(s), "
        "configs {'a': 'b'}"
    )


def purge(**fields: object) -> PurgePlan:
    return PurgePlan(original=None, **fields)  # type: ignore[arg-type]


def test_the_dry_run_has_one_line_per_purged_topic_or_says_why_none() -> None:
    steps = [PurgeStep("a", "records", {0: (0, 1)}), PurgeStep("b", "records", {0: (0, 2)})]
    lines = purge_lines(purge(how="records", steps=steps))
    assert [line.split(": topic ")[1].split(":")[0] for line in lines] == ["a", "b"]
    assert all(line.startswith("  purge (restore.purge_target: records): ") for line in lines)
    assert purge_lines(purge(how="topics", steps=[])) == [
        "  purge (restore.purge_target: topics): no existing target topic to purge"
    ]
    (skipped,) = purge_lines(purge(how="records", steps=[], skipped=True))
    assert "skipped, an earlier run of this restore already restored into the target" in skipped


def test_a_topics_purge_plans_against_the_target_without_the_purged_topics() -> None:
    state = TargetState(
        description="t",
        cluster_id="c",
        broker_count=1,
        topics={"orders": 2, "kept": 1},
        timestamp_types={"orders": "CreateTime", "kept": "CreateTime"},
        cleanup_policies={"orders": "delete"},
        retention_ms={"orders": 1},
        topic_configs={"orders": {"retention.ms": "1"}, "kept": {}},
        replication_factors={"orders": 1, "kept": 1},
    )
    after = without_topics(state, ["orders"])
    assert after.topics == {"kept": 1}
    for values in (after.timestamp_types, after.cleanup_policies, after.retention_ms, after.topic_configs):
        assert "orders" not in values
    assert after.replication_factors == {"kept": 1}
    assert state.topics == {"orders": 2, "kept": 1}  # the state read from the target is left as it was


def test_the_flags_go_over_the_restore_and_backup_sections() -> None:
    config = KBackupConfig.model_validate(
        {
            "backup_id": "b",
            "storage": {"url": "/tmp/x"},
            "target": {"bootstrap_servers": ["localhost:9092"]},
            "source": {"bootstrap_servers": ["localhost:9092"]},
            "restore": {"purge_target": "records", "max_records_per_second": 10},
        }
    )
    settings = restore_inputs(
        config,
        flags=RestoreFlags(max_bytes_per_second="1MiB", purge_target="topics", force_purge=True),
    ).settings
    assert (settings.purge_target, settings.force_purge) == ("topics", True)
    assert (settings.max_bytes_per_second, settings.max_records_per_second) == (2**20, 10)
    assert restore_inputs(config).settings.purge_target == "records"
    job = backup_job(config, max_bytes_per_second="50MB")
    assert job.settings.max_bytes_per_second == 50_000_000
    with pytest.raises(ConfigError, match="--purge-target everything"):
        restore_inputs(config, flags=RestoreFlags(purge_target="everything"))
    with pytest.raises(ConfigError, match="--max-bytes-per-second fast"):
        restore_inputs(config, flags=RestoreFlags(max_bytes_per_second="fast"))


def test_purge_settings_default_to_nothing() -> None:
    settings = RestoreSettings()
    assert (settings.purge_target, settings.force_purge) == ("none", False)
    assert (settings.max_bytes_per_second, settings.max_records_per_second) == (None, None)
