"""The three-phase restore, uninterrupted and killed (SIGKILL) inside each phase, then run again.

Every run must end in the same state as an uninterrupted one: every backed-up
record on the target exactly once and in order, and every group at the
reference position (0 skipped, 0 re-read with the default partition mapping).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from confluent_kafka import Consumer, TopicPartition

from kbackup.core.errors import AuditDisagreementError, RecoveryGapError, UnverifiedError, VerificationError
from kbackup.core.kafka import open_admin
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.config_files import config_file, write_three_phase_config
from tests.support.kafka_io import Record, consume_all, create_topic, end_offsets, group_position, produce
from tests.support.three_phase_runs import (
    GROUPS,
    check_final_state,
    fill_and_back_up,
    kill_before_the_audit,
    phases_of,
    produced_value,
    run_cli,
)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("crash_at", "build_mapping"),
    [
        # Without a kill, the mapping built always: as in-mapping's second run; audit-uninterrupted
        # is the run without a kill.
        ("restore:after-transaction", "when-needed"),
        ("three-phase:mapping-scanned", "always"),
        ("reset:after-first-group", "when-needed"),
        ("three-phase:verified", "when-needed"),
        (None, "audit"),
        ("reset:after-first-group", "audit"),
        ("three-phase:before-audit", "audit"),
        ("three-phase:mapping-scanned", "audit"),
    ],
    ids=[
        "in-restore",
        "in-mapping",
        "in-reset",
        "in-verify",
        "audit-uninterrupted",
        "audit-in-reset",
        "audit-before-it",
        "audit-in-its-mapping",
    ],
)
def test_three_phase_restore_resumes_after_a_kill(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    crash_at: str | None,
    build_mapping: str,
) -> None:
    topic = f"{unique_name}-orders"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store)
    config = write_three_phase_config(tmp_path / "restore.yaml", target_cluster, store, topic, build_mapping)
    if crash_at is not None:
        killed = run_cli(config, crash_at)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    finished = run_cli(config)
    assert finished.returncode == 0, finished.stderr[-3000:]
    summary = json.loads(finished.stdout)
    if crash_at in (
        "three-phase:mapping-scanned",
        "reset:after-first-group",
        "three-phase:verified",
        "three-phase:before-audit",
    ):
        assert "restore" in summary["resumed_phases"]  # finished phases were not redone
    assert summary["phases"]["reset"]["records_reread"] == 0
    if build_mapping == "audit":
        # The groups moved before the mapping was built; the mapping then audited every position.
        audited = summary["phases"]["audit"]["audited_positions"]
        assert audited == summary["phases"]["verify"]["positions_checked"] >= 5
        assert summary["phases"]["audit"]["disagreements"] == []
        if crash_at is None:
            assert list(summary["phases"]) == ["restore", "reset", "verify", "mapping", "audit"]
            assert 0 < summary["recovery_seconds"] < summary["total_seconds"]
    check_final_state(target_cluster, topic, tmp_path / "state", build_mapping)
    # A third run finds everything done and changes nothing.
    again = run_cli(config)
    assert again.returncode == 0
    assert set(json.loads(again.stdout)["resumed_phases"]) == phases_of(build_mapping)


#: An hour ago: inside the target's retention, and not "now" (a timestamp of 0 means "now" to librdkafka).
FIRST_TIMESTAMP = int(time.time() * 1000) - 3_600_000


def first_at_or_after(records: list[Record], timestamp: int, end: int) -> int:
    """The offset of the first record, in offset order, stamped at or after ``timestamp``; else ``end``."""
    return next(
        (r.consumed_offset for r in records if r.timestamp is not None and r.timestamp >= timestamp), end
    )


#: A restore without transactions, so without commit markers on the target.
IDEMPOTENT = {"exactly_once": False}


@pytest.mark.parametrize(
    ("reset", "restore"),
    [
        pytest.param({"strategy": "offset", "offset": 100}, {}, id="fixed-offset"),
        pytest.param({"strategy": "timestamp"}, IDEMPOTENT, id="committed-record-timestamps"),
        pytest.param(
            {"strategy": "timestamp", "timestamp": FIRST_TIMESTAMP + 66}, IDEMPOTENT, id="fixed-timestamp"
        ),
        # Commit markers, stamped when the restore committed, lie among the older records: ListOffsets
        # answers with the first of them, the planner goes on to the first record stamped so.
        pytest.param({"strategy": "timestamp"}, {}, id="committed-record-timestamps-exactly-once"),
    ],
)
def test_three_phase_restore_moves_groups_as_the_offset_reset_section_says(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    reset: dict[str, Any],
    restore: dict[str, Any],
) -> None:
    """``offset_reset.strategy: offset`` with ``offset``, and ``strategy: timestamp`` with the
    committed records' timestamps (read from the backup) or a fixed ``timestamp``. Positions are
    checked against the records read back from both clusters, not against the tool's plan."""
    topic = f"{unique_name}-orders"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store, first_timestamp=FIRST_TIMESTAMP)
    config = write_three_phase_config(tmp_path / "restore.yaml", target_cluster, store, topic, "when-needed")
    document = yaml.safe_load(config.read_text())
    document["offset_reset"].update(reset)
    document["restore"].update(restore)
    config_file(config, **document)
    finished = run_cli(config)
    assert finished.returncode == 0, finished.stderr[-3000:]
    restored = f"{topic}-restored"
    ends = end_offsets(target_cluster, restored, [0, 1])
    positions = {}
    for partition in (0, 1):
        source = consume_all(source_cluster, topic, [partition])
        copies = consume_all(target_cluster, restored, [partition])
        for group, offsets in GROUPS.items():
            if reset["strategy"] == "offset":
                expected = reset["offset"]
                assert 0 <= expected <= ends[partition]
            else:
                # A partition the group never committed on starts from its first record.
                committed = offsets.get(partition, 0)
                record = next((r for r in source if r.consumed_offset >= committed), None)
                timestamp = reset.get("timestamp", record.timestamp if record is not None else None)
                expected = (
                    ends[partition]
                    if timestamp is None
                    else first_at_or_after(copies, timestamp, ends[partition])
                )
            position = group_position(target_cluster, f"moved-{topic}-{group}", restored, partition)
            positions[(group, partition)] = position
            assert position == expected, (group, partition)
    if reset == {"strategy": "timestamp"}:
        assert len(set(positions.values())) > 2, positions  # each group at its own records, not one point


def test_the_verify_phase_judges_positions_from_the_target(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """Verify reads the records around each committed position, not the plan's answer: a position
    moved by hand after the reset is caught (exit 11), a group whose offsets were deleted cannot be
    verified (exit 13), and a re-run verifies again (the phase is recorded only once it passed)."""
    topic = f"{unique_name}-orders"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store)
    config = write_three_phase_config(tmp_path / "restore.yaml", target_cluster, store, topic, "when-needed")
    killed = run_cli(config, "three-phase:verified")  # every group moved, verify not recorded
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    restored, group = f"{topic}-restored", f"moved-{topic}-reader-b"
    admin = open_admin(target_cluster.connection())
    position = admin.committed_offsets(group)[(restored, 0)]
    admin.alter_offsets(group, {(restored, 0): position + 1})  # one record the group had not processed
    wrong = run_cli(config)
    assert wrong.returncode == VerificationError.exit_code, wrong.stderr[-2000:]
    assert f"{group} {restored}/0: the record before {position + 1}" in wrong.stderr
    assert "it would be skipped" in wrong.stderr

    admin.delete_group(group)
    unverified = run_cli(config)
    assert unverified.returncode == UnverifiedError.exit_code, unverified.stderr[-2000:]
    assert f"{group} {restored}/0: no committed offset" in unverified.stderr


def test_a_recovery_gap_fails_the_run_unless_accepted(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """A group committed beyond what the backup holds (it had processed records that were never backed
    up): the groups are moved, and the run exits 12 naming the gap, or 0 with --accept-gap."""
    topic = f"{unique_name}-orders"
    store = tmp_path / "store"
    create_topic(source_cluster, topic, partitions=1)
    produce(source_cluster, topic, [Record(key=b"k", value=b"v%d" % i) for i in range(10)])
    ahead = f"{topic}-ahead"
    consumer = Consumer({"bootstrap.servers": source_cluster.bootstrap_servers, "group.id": ahead})
    consumer.commit(offsets=[TopicPartition(topic, 0, 15)], asynchronous=False)  # 5 past the end
    consumer.close()
    take_backup(source_cluster, store, "nightly", [topic])
    config = write_three_phase_config(tmp_path / "restore.yaml", target_cluster, store, topic, "when-needed")
    gap = run_cli(config)
    assert gap.returncode == RecoveryGapError.exit_code, gap.stderr[-2000:]
    assert f"committed {topic}/0@15 on the source, the backup holds up to 10" in gap.stderr
    accepted = subprocess.run(
        [sys.executable, "-m", "kbackup", "three-phase-restore", "-c", str(config), "--json", "--accept-gap"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    assert len(json.loads(accepted.stdout)["phases"]["verify"]["recovery_gaps"]) == 1


def test_the_audit_fails_the_run_when_records_change_under_the_moved_groups(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """Between the move and the audit, another producer writes copies of already processed records
    (with their origin headers, as a second restore would) after reader-b's position on partition 0,
    and DeleteRecords moves partition 1's start past reader-a's position there. The audit, which
    reads every restored record, names both rows and fails the run (exit 15); the groups stay
    committed for the operator to roll back."""
    topic = f"{unique_name}-orders"
    store = tmp_path / "store"
    fill_and_back_up(source_cluster, topic, store)
    config = write_three_phase_config(tmp_path / "restore.yaml", target_cluster, store, topic, "audit")
    kill_before_the_audit(config)
    restored = f"{topic}-restored"
    partition0 = consume_all(target_cluster, restored, [0])
    # Copies of source offsets 100..109 of partition 0: reader-b (committed 120) had processed them.
    copies = [r for r in partition0 if r.value in {produced_value(0, o) for o in range(100, 110)}]
    assert len(copies) == 10
    produce(
        target_cluster,
        restored,
        [Record(key=r.key, value=r.value, headers=r.headers, partition=0) for r in copies],
    )
    # reader-a committed 0 on partition 1: its position is the start of the partition.
    admin = open_admin(target_cluster.connection())
    [deleted] = admin.client.delete_records([TopicPartition(restored, 1, 10)]).values()
    deleted.result(30)

    audited = run_cli(config)
    assert audited.returncode == AuditDisagreementError.exit_code, audited.stderr[-3000:]
    message = next(line for line in audited.stderr.splitlines() if line.startswith("kafka-backup: error:"))
    assert message.startswith("kafka-backup: error: the audit (the full offset mapping) disagrees with ")
    [reader_b] = [line for line in audited.stderr.splitlines() if f"group moved-{topic}-reader-b " in line]
    assert reader_b.strip().startswith(f"group moved-{topic}-reader-b on {restored}/0 at ")
    assert reader_b.endswith(": the group reads 10 record(s) again, the plan said 0")
    assert f"group moved-{topic}-reader-a on {restored}/1 at 0: below the partition's log start 10" in (
        audited.stderr
    )
    assert "offset-rollback" in audited.stderr
    # Not recorded as done: a re-run audits again, and disagrees again.
    again = run_cli(config)
    assert again.returncode == AuditDisagreementError.exit_code
