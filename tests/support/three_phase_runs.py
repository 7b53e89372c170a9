"""A backup with consumer groups to move, three-phase restores run as the CLI, and the oracle of their
final state.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.kafka_io import Record, consume_all, create_topic, produce

GROUPS = {"reader-a": {0: 40, 1: 0}, "reader-b": {0: 120, 1: 77}, "reader-c": {1: 150}}


def fill_and_back_up(
    source: LocalKafkaCluster, topic: str, store: Path, first_timestamp: int | None = None
) -> str:
    """300 records over 2 partitions, the groups of GROUPS committed, one backup. With ``first_timestamp``,
    record i is stamped ``first_timestamp + i // 3``: timestamps rise, and some records share one."""
    create_topic(source, topic, partitions=2)
    produce(
        source,
        topic,
        [
            Record(
                key=f"k{i}".encode(),
                value=f"v{i}".encode(),
                partition=i % 2,
                timestamp=None if first_timestamp is None else first_timestamp + i // 3,
            )
            for i in range(300)
        ],
    )
    for group, offsets in GROUPS.items():
        consumer = Consumer({"bootstrap.servers": source.bootstrap_servers, "group.id": f"{topic}-{group}"})
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
        consumer.close()
    summary = take_backup(source, store, "nightly", [topic])
    return summary.source_cluster_id


def run_cli(config: Path, crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "KBACKUP_CRASH_AT"}
    if crash_at:
        env["KBACKUP_CRASH_AT"] = crash_at
    return subprocess.run(
        [sys.executable, "-m", "kbackup", "three-phase-restore", "-c", str(config), "--json"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip


def produced_value(partition: int, source_offset: int) -> bytes:
    """What fill_and_back_up wrote at ``source_offset`` of ``partition``: record i went to i % 2."""
    return f"v{2 * source_offset + partition}".encode()


def phases_of(build_mapping: str) -> set[str]:
    """The phases a finished run records: the audit only with ``build_mapping: audit``."""
    return {"restore", "mapping", "reset", "verify"} | ({"audit"} if build_mapping == "audit" else set())


def check_final_state(
    target: LocalKafkaCluster, topic: str, state_dir: Path, build_mapping: str = "always"
) -> None:
    """Against an oracle built from the data this test produced, not from the headers the product
    parses: the source partitions have no holes, so a group committed at C must resume at the
    restored record whose value is the C-th value produced into its partition (or after the last)."""
    restored = f"{topic}-restored"
    for partition in (0, 1):
        records = consume_all(target, restored, [partition])
        assert [r.value for r in records] == [produced_value(partition, o) for o in range(150)], (
            "each record exactly once, in order"
        )
        for group, offsets in GROUPS.items():
            committed = offsets.get(partition, 0)
            expected = (
                records[committed].consumed_offset if committed < 150 else records[-1].consumed_offset + 1
            )
            consumer = Consumer(
                {"bootstrap.servers": target.bootstrap_servers, "group.id": f"moved-{topic}-{group}"}
            )
            position = consumer.committed([TopicPartition(restored, partition)], timeout=10)[0].offset
            consumer.close()
            assert position == expected, (group, partition)
    states = list(state_dir.glob("*.json"))
    recorded = [json.loads(p.read_text()) for p in states if "phases" in p.read_text()]
    assert len(recorded) == 1
    assert set(recorded[0]["phases"]) == phases_of(build_mapping)


def kill_before_the_audit(config: Path) -> None:
    """A run killed once its groups are committed and verified, before the mapping audits them."""
    killed = run_cli(config, "three-phase:before-audit")
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
