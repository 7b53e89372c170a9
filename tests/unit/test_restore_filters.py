"""restore.filters without Kafka: the rules' settings, their masks over Arrow batches, the batch path
(records dropped or made tombstones, progress moved past dropped ones), the plan's counts and text,
the flags and the config file's folder, and the drill report's digest that hides the keys."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from kbackup.app.config import KBackupConfig, anchored_paths
from kbackup.app.drill_report import config_digest
from kbackup.app.overrides import RestoreFlags, restore_inputs
from kbackup.app.preflight import cross_section_problems
from kbackup.core.config import KafkaConnection, StorageSettings
from kbackup.core.errors import ConfigError
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.origin import parse_origin
from kbackup.format.segments import SegmentLimits, iter_segment_batches
from kbackup.restore.batches import batch_records
from kbackup.restore.integrity import remaining_segments, verify_work
from kbackup.restore.metrics import RestoreMetrics
from kbackup.restore.plan import RestorePlan, TargetState, build_plan, restore_identity
from kbackup.restore.plan_text import plan_lines
from kbackup.restore.resume import PartitionState
from kbackup.restore.settings import RestoreSettings
from kbackup.restore.summary import RestoreSummary, TopicTotals
from kbackup.restore.units import UnitTask, unit_plan
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage

#: Source offsets are 0, 2, 4, ... (holes between, as compaction leaves them); key u<i % 5>.
COUNT = 60
T0 = 1_700_000_000_000


def source_records() -> list[BackupRecord]:
    return [
        BackupRecord(
            offset=2 * i,
            key=None if i % 10 == 9 else b"u%d" % (i % 5),
            value=b"v%d" % i,
            headers=(("tenant", b"acme" if i % 3 == 0 else b"other"), ("trace", b"%d" % i)),
            timestamp=T0 + i * 1000,
        )
        for i in range(COUNT)
    ]


@pytest.fixture
def storage(tmp_path: Path) -> LocalStorage:
    return LocalStorage(tmp_path / "store")


@pytest.fixture
def backup(tmp_path: Path, storage: LocalStorage) -> Backup:
    builder = BackupBuilder(
        storage, "b1", source_cluster="prod", scratch_dir=tmp_path, limits=SegmentLimits(max_records=25)
    )
    builder.topic("orders", 1)
    builder.topic("payments", 1)
    builder.partition("orders", 0, source_records())
    builder.partition("payments", 0, source_records())
    builder.commit()
    return BackupCatalog(storage).load("b1")


def plan_of(backup: Backup, **settings: Any) -> RestorePlan:
    state = TargetState(description="t", cluster_id="c", broker_count=1, topics={})
    return build_plan(backup, RestoreSettings.model_validate(settings), state, storage_url="s", now_ms=T0)


def restored(
    storage: LocalStorage, plan: RestorePlan, topic: str = "orders", *, next_offset: int = 0
) -> tuple[list[tuple[int, bytes | None, bytes | None, list[Any]]], int, int, PartitionState]:
    """Every (source offset, key, value, headers) the batch path gives for ``topic``, the dropped
    and tombstoned counts, and the partition's state after it (batches of 7 records)."""
    partition = next(p for p in plan.partitions if p.source_topic == topic)
    state = PartitionState(partition, next_offset=next_offset, restored_records=0)
    out: list[tuple[int, bytes | None, bytes | None, list[Any]]] = []
    dropped = tombstoned = 0
    for segment in partition.segments:
        for batch in iter_segment_batches(storage, "b1", segment, batch_size=7):
            records = batch_records(state, batch, source_cluster="prod", stamp=True)
            if records is None:
                continue
            dropped += records.dropped
            tombstoned += records.tombstoned
            assert records.headers is not None or not records.offsets
            out += zip(records.offsets, records.keys, records.values, records.headers or [], strict=True)
    return out, dropped, tombstoned, state


def expected(keep: Any, tombstone: Any = lambda _r: False) -> list[tuple[int, bytes | None, bytes | None]]:
    """The oracle, from the records the test made: (offset, key, value) of the kept ones."""
    return [(r.offset, r.key, None if tombstone(r) else r.value) for r in source_records() if keep(r)]


def triples(out: list[tuple[int, bytes | None, bytes | None, list[Any]]]) -> list[tuple[Any, ...]]:
    return [(offset, key, value) for offset, key, value, _ in out]


def test_drop_by_inline_key_and_a_sha256_entry_moves_progress_past_the_dropped_records(
    storage: LocalStorage, backup: Backup
) -> None:
    digest = hashlib.sha256(b"u3").hexdigest()
    plan = plan_of(
        backup, filters=[{"action": "drop", "topics": ["ord.*"], "keys": ["u1", f"sha256:{digest}"]}]
    )
    out, dropped, tombstoned, state = restored(storage, plan)
    assert triples(out) == expected(lambda r: r.key not in (b"u1", b"u3"))
    assert (dropped, tombstoned) == (sum(r.key in (b"u1", b"u3") for r in source_records()), 0)
    # The last record (offset 118, key u4... or dropped) does not hold progress back.
    assert state.next_offset == 2 * (COUNT - 1) + 1
    # The rule names its topics: payments is restored whole.
    assert triples(restored(storage, plan, "payments")[0]) == expected(lambda r: True)


def test_tombstones_keep_key_own_headers_and_origin_headers(storage: LocalStorage, backup: Backup) -> None:
    plan = plan_of(backup, filters=[{"action": "tombstone", "keys": ["u2"]}])
    out, dropped, tombstoned, _ = restored(storage, plan)
    assert triples(out) == expected(lambda r: True, lambda r: r.key == b"u2")
    assert (dropped, tombstoned) == (0, sum(r.key == b"u2" for r in source_records()))
    for offset, key, value, headers in out:
        if key == b"u2":
            assert value is None
            assert headers[:2] == [
                ("tenant", b"acme" if offset // 2 % 3 == 0 else b"other"),
                ("trace", b"%d" % (offset // 2)),
            ]
            origin = parse_origin(headers)
            assert origin is not None
            assert (origin.topic, origin.offset) == ("orders", offset)


def test_header_rule_window_rule_and_drop_winning_over_tombstone(
    storage: LocalStorage, backup: Backup
) -> None:
    start, end = T0 + 10_000, T0 + 20_000
    plan = plan_of(
        backup,
        filters=[
            {"action": "tombstone", "headers": {"tenant": ["acme"]}},
            {"action": "drop", "keys": ["u0"], "time_window_start": start, "time_window_end": end},
            {"action": "drop", "time_window_start": T0 + 50_000},
        ],
    )
    out, dropped, tombstoned, _ = restored(storage, plan)

    def drop(r: BackupRecord) -> bool:
        return (r.key == b"u0" and start <= r.timestamp < end) or r.timestamp >= T0 + 50_000

    def acme(r: BackupRecord) -> bool:
        return (b"tenant", b"acme") in {(n.encode(), v) for n, v in r.headers}

    assert triples(out) == expected(lambda r: not drop(r), acme)
    assert dropped == sum(drop(r) for r in source_records())
    assert tombstoned == sum(acme(r) and not drop(r) for r in source_records())


def test_null_keys_never_match_and_a_resumed_run_starts_at_its_progress(
    storage: LocalStorage, backup: Backup
) -> None:
    plan = plan_of(backup, filters=[{"action": "drop", "keys": ["u4"]}])
    out, _, _, _ = restored(storage, plan, next_offset=61)
    assert triples(out) == expected(lambda r: r.offset >= 61 and r.key != b"u4")
    assert any(key is None for _, key, _, _ in out)


def test_counts_before_the_run_leave_out_dropped_records_only(storage: LocalStorage, backup: Backup) -> None:
    plan = plan_of(
        backup,
        filters=[{"action": "drop", "keys": ["u1"]}, {"action": "tombstone", "keys": ["u2"]}],
        time_window_end=T0 + 40_000,
    )
    orders = next(p for p in plan.partitions if p.source_topic == "orders")
    assert orders.expected_records is None  # no longer exact from the manifests
    counts = verify_work(storage, "b1", remaining_segments(orders, 0), checksums=True)
    assert sum(counts.values()) == sum(r.key != b"u1" and r.timestamp < T0 + 40_000 for r in source_records())
    # A tombstone rule alone keeps the manifests' counts exact.
    only_tombstones = plan_of(backup, filters=[{"action": "tombstone", "keys": ["u2"]}])
    assert only_tombstones.expected_records == 2 * COUNT


def test_a_rule_whose_window_misses_a_segment_keeps_its_manifest_count(backup: Backup) -> None:
    plan = plan_of(backup, filters=[{"action": "drop", "time_window_start": T0 + 55_000}])
    orders = next(p for p in plan.partitions if p.source_topic == "orders")
    assert len(orders.segments) == 3
    assert orders.partial_segments == [orders.segments[-1].key]


def test_dry_run_text_names_rules_and_topics_with_counts_never_the_keys(
    tmp_path: Path, backup: Backup
) -> None:
    listed = tmp_path / "erase.txt"
    listed.write_text("# request 4711\nsecret-person-1\n\nhex:736563726574\n")
    plan = plan_of(
        backup,
        filters=[
            {"action": "drop", "keys_file": str(listed), "topics": ["orders"]},
            {"action": "tombstone", "headers": {"tenant": ["acme-private"]}},
            {"action": "drop", "keys": ["x"], "topics": ["nothing.*"]},
        ],
    )
    text = "\n".join(plan_lines(plan)) + str(plan.to_dict())
    for secret in ("secret-person-1", "736563726574", "acme-private"):
        assert secret not in text
    lines = [line for line in plan_lines(plan) if "filter rule" in line]
    assert len(lines) == 3
    assert "2 key" in lines[0]
    assert lines[0].endswith("on orders")
    assert lines[1].endswith("on orders, payments")
    assert lines[2].endswith("on no topic")
    assert any("rule 3" in warning for warning in plan.warnings)
    assert [rule["source_topics"] for rule in plan.to_dict()["filters"]] == [
        ["orders"],
        ["orders", "payments"],
        [],
    ]


def test_a_missing_keys_file_is_a_config_error_naming_it(tmp_path: Path, backup: Backup) -> None:
    with pytest.raises(ConfigError, match=r"gone\.txt"):
        plan_of(backup, filters=[{"action": "drop", "keys_file": str(tmp_path / "gone.txt")}])


def test_rule_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="needs keys, keys_file, headers or a time window"):
        RestoreSettings.model_validate({"filters": [{"action": "drop", "topics": ["a"]}]})
    with pytest.raises(ValueError, match="must be after"):
        RestoreSettings.model_validate(
            {"filters": [{"action": "drop", "time_window_start": 10, "time_window_end": 5}]}
        )
    with pytest.raises(ValueError, match="invalid regular expression"):
        RestoreSettings.model_validate({"filters": [{"action": "drop", "keys": ["a"], "topics": ["("]}]})
    with pytest.raises(ValueError, match="action"):
        RestoreSettings.model_validate({"filters": [{"action": "keep", "keys": ["a"]}]})
    parsed = RestoreSettings.model_validate(
        {"filters": [{"action": "drop", "time_window_start": "2026-11-22T03:15:00Z"}]}
    )
    assert parsed.filters[0].time_window_start == 1_795_317_300_000


def test_identity_changes_with_the_rules_not_with_the_keys_files_contents(
    tmp_path: Path, backup: Backup
) -> None:
    listed = tmp_path / "keys.txt"
    listed.write_text("a\n")
    plain = restore_identity(backup, RestoreSettings(), "c")
    rule = {"action": "drop", "keys_file": str(listed)}
    with_file = restore_identity(backup, RestoreSettings.model_validate({"filters": [rule]}), "c")
    listed.write_text("a\nb\n")
    assert restore_identity(backup, RestoreSettings.model_validate({"filters": [rule]}), "c") == with_file
    assert with_file != plain
    # Existing restores keep their ids: no filters, no new key in the identity.
    assert plain == restore_identity(backup, RestoreSettings.model_validate({"filters": []}), "c")


def test_keys_files_are_the_config_files_and_flags_the_current_folders(tmp_path: Path) -> None:
    config = KBackupConfig.model_validate(
        {"restore": {"filters": [{"action": "drop", "keys_file": "erase/keys.txt"}]}}
    )
    anchored = anchored_paths(config, tmp_path)
    assert anchored.restore.filters[0].keys_file == tmp_path / "erase" / "keys.txt"
    inputs = restore_inputs(
        anchored, flags=RestoreFlags(drop_keys_file="more.txt", tombstone_keys_file="/abs/t.txt")
    )
    rules = [(rule.action, rule.keys_file, rule.topics) for rule in inputs.settings.filters]
    assert rules == [
        ("drop", tmp_path / "erase" / "keys.txt", []),
        ("drop", Path.cwd() / "more.txt", []),
        ("tombstone", Path("/abs/t.txt"), []),
    ]


def test_the_drill_digest_hides_filter_keys_and_header_values() -> None:
    def config(key: str, value: str) -> KBackupConfig:
        rule = {"action": "drop", "keys": [key], "headers": {"user": [value]}}
        return KBackupConfig.model_validate({"restore": {"filters": [rule]}})

    assert config_digest(config("alice", "a1")) == config_digest(config("bob", "b2"))
    two_keys = KBackupConfig.model_validate(
        {"restore": {"filters": [{"action": "drop", "keys": ["a", "b"]}]}}
    )
    assert config_digest(two_keys) != config_digest(config("alice", "a1"))


def test_filtered_records_are_counted_per_topic_and_action() -> None:
    metrics = RestoreMetrics("b1")
    metrics.records_filtered("orders", dropped=3, tombstoned=0)
    metrics.records_filtered("orders", dropped=2, tombstoned=4)
    sample = metrics.registry.get_sample_value
    labels = {"backup_id": "b1", "topic": "orders"}
    assert sample("kafka_backup_restore_filtered_records_total", {**labels, "action": "drop"}) == 5
    assert sample("kafka_backup_restore_filtered_records_total", {**labels, "action": "tombstone"}) == 4


def test_a_spark_unit_carries_the_rules_and_filters_as_the_local_engine(
    tmp_path: Path, storage: LocalStorage, backup: Backup
) -> None:
    """A Spark task gets its unit pickled (cloudpickle, as Spark ships it): the compiled rules travel
    inside the plan, so a worker needs no keys file and drops and tombstones the same records."""
    from pyspark import cloudpickle

    listed = tmp_path / "keys.txt"
    listed.write_text("u1\n")
    plan = plan_of(
        backup,
        filters=[
            {"action": "drop", "keys_file": str(listed)},
            {"action": "tombstone", "headers": {"tenant": ["acme"]}},
        ],
    )
    local = restored(storage, plan)
    for partition in plan.partitions:
        task = UnitTask(
            unit_plan(plan, partition, topics_created=True),
            StorageSettings(url=str(tmp_path / "store")),
            KafkaConnection(bootstrap_servers=["127.0.0.1:1"]),
            RestoreSettings(),
        )
        listed.unlink(missing_ok=True)  # the worker cannot read it
        shipped: UnitTask = cloudpickle.loads(cloudpickle.dumps(task))  # type: ignore[no-untyped-call]
        assert shipped.plan.partitions[0].rules
        unit = restored(storage, shipped.plan, partition.source_topic)
        assert unit[:3] == restored(storage, plan, partition.source_topic)[:3]
    assert local[1] == sum(r.key == b"u1" for r in source_records())
    assert local[2] > 0


def test_check_offline_reads_the_keys_files(tmp_path: Path) -> None:
    (tmp_path / "good.txt").write_text("# ok\nuser-1\n")
    (tmp_path / "bad.txt").write_text("user-1\nsha256:abc\n")
    rules = [{"action": "drop", "keys_file": name} for name in ("good.txt", "bad.txt", "missing.txt")]
    config = anchored_paths(KBackupConfig.model_validate({"restore": {"filters": rules}}), tmp_path)
    problems = [str(error) for section, error in cross_section_problems(config) if section == "restore"]
    assert len(problems) == 2
    assert "bad.txt, line 2" in problems[0]
    assert "user-1" not in problems[0]
    assert "missing.txt" in problems[1]


def test_filters_act_on_the_offset_range_and_window_selected_only(
    storage: LocalStorage, backup: Backup
) -> None:
    plan = plan_of(
        backup,
        offset_ranges={"orders": {0: {"start": 20, "end": 90}}},
        time_window_start=T0 + 15_000,
        filters=[{"action": "drop", "keys": ["u0"]}, {"action": "drop", "time_window_end": T0 + 30_000}],
    )
    out, dropped, _, state = restored(storage, plan)

    def selected(r: BackupRecord) -> bool:
        return 20 <= r.offset < 90 and r.timestamp >= T0 + 15_000

    def kept(r: BackupRecord) -> bool:
        return selected(r) and r.key != b"u0" and r.timestamp >= T0 + 30_000

    assert triples(out) == expected(kept)
    # Only records of the selection count as dropped.
    assert dropped == sum(selected(r) and not kept(r) for r in source_records())
    assert state.next_offset == 90


def test_the_summary_says_what_the_filters_did_per_topic() -> None:
    totals = [
        TopicTotals("orders", "orders-r", records=8, dropped=3, tombstoned=2),
        TopicTotals("payments", "payments", records=5),
    ]
    summary = RestoreSummary("r", "b1", "exactly-once", "t", totals, [], 1, 1.0, False, 0, 0)
    lines = summary.lines()
    assert (
        "  orders -> orders-r: 8 record(s), 3 dropped by restore.filters, 2 tombstoned by restore.filters"
        in lines
    )
    assert "  payments -> payments: 5 record(s)" in lines
    [orders, _] = summary.to_dict()["topics"]
    assert (orders["dropped_by_filters"], orders["tombstoned_by_filters"]) == (3, 2)
