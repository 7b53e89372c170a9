"""Consumer-group safety around rollback, beyond tests/integration/test_reset_stage.py.

test_reset_stage already shows: execute refuses an active group, a stale plan
and another cluster; a plan applied twice is a no-op; rollback restores
"no offset" and a rewound offset. Here: rollback puts back offsets the plan
never touched (another topic of the same group, which the delete-and-recommit
path must not lose), refuses while the group has a live member, and a second
rollback changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from kbackup.core.errors import PreconditionError
from kbackup.format.rollback_snapshot import list_snapshots
from kbackup.reset.executor import execute_plan, rollback
from kbackup.reset.planner import PlanRequest, plan_offset_reset
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.identity_restore import fill_identity_restore, source_offsets
from tests.support.kafka_io import Record, create_topic, group_position, produce


def test_rollback_restores_every_previous_offset_refuses_live_members_and_is_idempotent(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = f"{unique_name}-orders"
    other = f"{unique_name}-audit"
    fill_identity_restore(target_cluster, topic)
    create_topic(target_cluster, other, partitions=2)
    produce(target_cluster, other, [Record(key=None, value=b"a", partition=i % 2) for i in range(20)])
    group = f"{unique_name}-app"
    # Before: partition 0 of the restored topic and both partitions of another topic; partition 1 none.
    before = {(topic, 0): 2, (other, 0): 7, (other, 1): 9}
    committer = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": group})
    committer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in before.items()], asynchronous=False)
    committer.close()

    plan = plan_offset_reset(
        PlanRequest(
            target=target_cluster.connection(),
            source=source_offsets({group: {0: 16, 1: 5}}),
            topic_mapping={"orders": topic},
        )
    )
    result = execute_plan(plan, target_cluster.connection(), snapshot_dir=tmp_path)
    assert {(c.topic, c.partition): c.before for c in result.changes} == {(topic, 0): 2, (topic, 1): None}
    assert group_position(target_cluster, group, topic, 1) is not None
    [snapshot] = list_snapshots(tmp_path)

    # A live member: rollback refuses and changes nothing.
    member = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": group,
            "client.id": "still-running",
        }
    )
    member.subscribe([other])
    try:
        for _ in range(40):
            member.poll(0.25)
        after_execute = {key: group_position(target_cluster, group, *key) for key in [*before, (topic, 1)]}
        with pytest.raises(PreconditionError, match=f"{group} .*still-running"):
            rollback(snapshot, target_cluster.connection())
        assert {key: group_position(target_cluster, group, *key) for key in after_execute} == after_execute
    finally:
        member.close()

    changes = rollback(snapshot, target_cluster.connection())
    assert {(c.topic, c.partition) for c in changes} == {(topic, 0), (topic, 1)}
    # Exactly the previous state, including the other topic the plan never named.
    for (t, p), offset in before.items():
        assert group_position(target_cluster, group, t, p) == offset, (t, p)
    assert group_position(target_cluster, group, topic, 1) is None

    assert rollback(snapshot, target_cluster.connection()) == []  # a second rollback is a no-op
    for (t, p), offset in before.items():
        assert group_position(target_cluster, group, t, p) == offset, (t, p)
