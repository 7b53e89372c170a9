"""The group coordinator's node killed during `offset-reset plan` and during `offset-reset execute`,
on a three-node target.

One three-node cluster for the module; every node is brought back after each test. Each test
restores its own topic (records written as a restore writes them, origin headers and transaction
markers included), commits every group a previous position on the target, and takes its groups'
source positions from a backup's group snapshot. The groups are named so that Kafka's hash puts
the first group's coordinator on one node and the next groups' on the node the test kills.

The oracle is the reference position over the records the test wrote, read back from the target
(tests/support/oracles.py), for the source offsets the test committed: never the plan's numbers.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kbackup.cli.main import run
from kbackup.core.kafka.admin import Admin
from kbackup.sandbox.kafka import (
    GROUP_OFFSETS_TOPIC,
    LocalKafkaCluster,
    coordinator_partition,
    local_clusters,
)
from tests.support.cli_process import wait_for
from tests.support.cluster_nodes import (
    create_replicated_topic,
    named_led_by,
    offsets_topic_leaders,
    start_stopped_nodes,
)
from tests.support.kafka_io import commit_group, group_positions
from tests.support.oracles import reference_position
from tests.support.reset_cli_setup import backup_with_groups
from tests.support.restored_topics import Restored, restored_records, write_restored

pytestmark = pytest.mark.slow

SOURCE = "nodes-reset-source"
SOURCE_TOPIC = "orders"
PARTITIONS = 2
FIRST_OFFSET, END_OFFSET = 100, 140
#: The target offset every group is at before the reset (what a rollback must bring back).
PREVIOUS = 0
UNMOVED: dict[int, int | None] = dict.fromkeys(range(PARTITIONS), PREVIOUS)
#: Exit codes that docs/exit-codes.md calls retryable for a cluster that did not answer in time.
RETRYABLE_EXITS = (5, 6)
#: Each group's committed source offset per source partition, by the node that coordinates it:
#: "first" (the group execute moves alone first), "killed" (two groups on the node killed),
#: "other" (the third node). 140 is the end: every record processed.
POSITIONS: dict[str, dict[int, int]] = {
    "a-first": {0: 105, 1: 120},
    "b-killed": {0: 120, 1: 139},
    "c-killed": {0: 140, 1: 101},
    "d-other": {0: 130, 1: 110},
}


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalKafkaCluster]:
    folder = tmp_path_factory.mktemp("kafka-reset-nodes")
    with local_clusters(["reset-target"], folder, nodes=3) as (cluster,):
        yield cluster


@pytest.fixture(autouse=True)
def every_node_back(three_nodes: LocalKafkaCluster) -> Iterator[None]:
    """A test that failed with a node down leaves the next one three nodes, not two."""
    yield
    start_stopped_nodes(three_nodes)


@dataclass
class ResetSetup:
    topic: str
    config: Path
    #: Target group name -> its committed source offset per source partition.
    groups: dict[str, dict[int, int]]
    #: The node the test kills: it coordinates the groups after the first.
    killed: int
    #: The reference position of each group on each target partition.
    expected: dict[str, dict[int, int | None]]


def restored_topic(cluster: LocalKafkaCluster, topic: str) -> None:
    """Source offsets 100..139 of each partition, as a restore that retried an aborted transaction
    writes them: 100..119 committed, 120..124 aborted, 120..139 committed."""

    def rows(first: int, end: int) -> list[Restored]:
        return [Restored(p, p, offset) for p in range(PARTITIONS) for offset in range(first, end)]

    create_replicated_topic(cluster, topic, PARTITIONS)
    write_restored(
        cluster, topic, SOURCE_TOPIC, SOURCE,
        [(rows(FIRST_OFFSET, 120), True), (rows(120, 125), False), (rows(120, END_OFFSET), True)],
        transactional_id=f"t-{topic}",
    )  # fmt: skip


def set_up(cluster: LocalKafkaCluster, unique_name: str, folder: Path) -> ResetSetup:
    topic = f"{unique_name}-restored"
    restored_topic(cluster, topic)
    leaders = offsets_topic_leaders(cluster)
    # A node killed by an earlier test leads nothing after its restart (no preferred-leader election
    # within a test's time): the roles go to the nodes that lead a partition of the offsets topic now.
    leading = sorted({node for node in leaders.values() if node is not None})
    assert len(leading) >= 2, f"{GROUP_OFFSETS_TOPIC} is led by {leading} only: no node to kill"
    first_node, killed = leading[0], leading[1]
    other = leading[2] if len(leading) > 2 else first_node
    node_of = {"first": first_node, "killed": killed, "other": other}
    # Names sort as the POSITIONS keys do: execute moves the groups in that order.
    groups = {
        named_led_by(
            cluster, f"{unique_name}-{label}", GROUP_OFFSETS_TOPIC, node_of[label.split("-")[1]]
        ): positions
        for label, positions in POSITIONS.items()
    }
    for group in groups:
        commit_group(cluster, group, {(topic, p): PREVIOUS for p in range(PARTITIONS)})
    expected = {}
    restored = {p: restored_records(cluster, topic, p, SOURCE) for p in range(PARTITIONS)}
    for p, records in restored.items():
        # The records the test wrote, each once: the oracle stands on them.
        assert sorted(r.source_offset for r in records) == list(range(FIRST_OFFSET, END_OFFSET)), p
    for group, positions in groups.items():
        expected[group] = {
            p: reference_position(restored[p], {(SOURCE_TOPIC, p): positions[p]}) for p in range(PARTITIONS)
        }
        assert all(position not in (None, PREVIOUS) for position in expected[group].values())
    store = folder / "store"
    backup_with_groups(
        store,
        SOURCE,
        SOURCE_TOPIC,
        range(FIRST_OFFSET, END_OFFSET),
        {g: {(SOURCE_TOPIC, p): o for p, o in at.items()} for g, at in groups.items()},
        partitions=PARTITIONS,
    )
    config = folder / "reset.yaml"
    config.write_text(
        f"backup_id: nightly\ntarget:\n  bootstrap_servers: {cluster.bootstrap_servers}\n"
        f"storage:\n  url: {store}\nrestore:\n  topic_mapping:\n    {SOURCE_TOPIC}: {topic}\n"
        f"offset_reset:\n  snapshot_dir: {folder / 'snapshots'}\n"
    )
    return ResetSetup(topic, config, groups, killed, expected)


def positions_of(cluster: LocalKafkaCluster, group: str, topic: str) -> dict[int, int | None]:
    return group_positions(cluster, group, topic, list(range(PARTITIONS)))


def coordinator_of(cluster: LocalKafkaCluster, group: str) -> int | None:
    """The node leading the group's partition of the offsets topic (Kafka's hash), by the metadata."""
    leaders = {p: replicas.leader for p, replicas in cluster.partitions_of(GROUP_OFFSETS_TOPIC).items()}
    return leaders[coordinator_partition(group, len(leaders))]


def say(capsys: pytest.CaptureFixture[str], text: str) -> None:
    """A figure for the report, printed past the capture the CLI runs under."""
    with capsys.disabled():
        print(text)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str, float]:
    started = time.monotonic()
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err, time.monotonic() - started


def finishes_or_fails_retryably(
    outcome: tuple[int, str, str, float],
    setup: ResetSetup,
    again: Callable[[], tuple[int, str, str, float]],
    capsys: pytest.CaptureFixture[str],
) -> tuple[int, str, str, float]:
    """A run under the fault either finished, or failed with a retryable exit and a line naming a
    group and the next step; then the same command again finishes."""
    code, _out, err, _seconds = outcome
    if code == 0:
        return outcome
    assert code in RETRYABLE_EXITS, f"exit {code}: {err}"
    assert any(group in err for group in setup.groups), err
    assert "running the same command again may succeed" in err, err
    say(capsys, f"exit {code}: {err.strip()}")
    rerun = again()
    say(capsys, f"rerun: exit {rerun[0]} after {rerun[3]:.1f}s")
    assert rerun[0] == 0, f"the rerun failed: exit {rerun[0]}: {rerun[2]}"
    return rerun


def ends_exact_and_rolls_back(
    cluster: LocalKafkaCluster, setup: ResetSetup, capsys: pytest.CaptureFixture[str], snapshot_id: str
) -> None:
    for group, expected in setup.expected.items():
        assert positions_of(cluster, group, setup.topic) == expected, group
    code, _out, err, _s = cli(capsys, "offset-rollback", "-c", str(setup.config), "--snapshot", snapshot_id)
    assert code == 0, err
    for group in setup.groups:
        assert positions_of(cluster, group, setup.topic) == UNMOVED, group


def test_coordinator_killed_while_the_plan_reads_committed_offsets(
    three_nodes: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup = set_up(three_nodes, unique_name, tmp_path)
    killed_groups = [g for g in setup.groups if coordinator_of(three_nodes, g) == setup.killed]
    assert len(killed_groups) == 2, "two groups are coordinated by the node killed"
    reads = Admin.committed_offsets_of

    def kill_then_read(admin: Admin, group_ids: Any) -> dict[Any, Any]:
        # The plan's read of the target's committed offsets is the moment the node dies.
        if three_nodes.node_alive(setup.killed):
            three_nodes.kill_node(setup.killed)
        return reads(admin, group_ids)

    monkeypatch.setattr(Admin, "committed_offsets_of", kill_then_read)
    plan_file = tmp_path / "plan.json"
    plan_args = ("offset-reset", "plan", "-c", str(setup.config), "--output", str(plan_file))
    planned = finishes_or_fails_retryably(
        cli(capsys, *plan_args), setup, lambda: cli(capsys, *plan_args), capsys
    )
    monkeypatch.undo()
    assert not three_nodes.node_alive(setup.killed), "the node was not killed during the plan"
    say(capsys, f"plan with node {setup.killed} killed: exit {planned[0]} after {planned[3]:.1f}s")
    plan = json.loads(plan_file.read_text())
    for group in plan["groups"]:
        rows = {row["target_partition"]: row for row in group["partitions"]}
        # Read from the coordinator that took over: the previous position, not "no commit".
        assert {p: row["target_committed"] for p, row in rows.items()} == UNMOVED
        assert {p: row["new_offset"] for p, row in rows.items()} == setup.expected[group["group_id"]]

    code, out, err, seconds = cli(capsys, "offset-reset", "execute", "--plan", str(plan_file), "-c",
                                  str(setup.config), "--json")  # fmt: skip
    assert code == 0, err
    say(capsys, f"execute on two nodes: {seconds:.1f}s")
    ends_exact_and_rolls_back(three_nodes, setup, capsys, json.loads(out)["snapshot_id"])


def test_coordinator_killed_after_execute_moved_its_first_group(
    three_nodes: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup = set_up(three_nodes, unique_name, tmp_path)
    plan_file = tmp_path / "plan.json"
    code, _out, err, _s = cli(
        capsys, "offset-reset", "plan", "-c", str(setup.config), "--output", str(plan_file)
    )
    assert code == 0, err
    first, following = sorted(setup.groups)[0], sorted(setup.groups)[1]
    assert coordinator_of(three_nodes, first) != setup.killed
    assert coordinator_of(three_nodes, following) == setup.killed
    killed_at: list[float] = []
    untouched: list[str] = []

    def kill_the_next_coordinator(name: str, count: int = 1) -> None:
        # execute's own fault point between its first group and the rest: a node dies, not the run.
        if name != "reset:after-first-group":
            return
        wait_for(lambda: positions_of(three_nodes, first, setup.topic) == setup.expected[first],
                 "the first group's offsets to change", timeout=30)  # fmt: skip
        untouched[:] = [
            g for g in sorted(setup.groups) if positions_of(three_nodes, g, setup.topic) == UNMOVED
        ]
        three_nodes.kill_node(setup.killed)  # leads the next group's coordinator partition (asserted)
        killed_at.append(time.monotonic())

    monkeypatch.setattr("kbackup.reset.executor.crash_point", kill_the_next_coordinator)
    execute_args = ("offset-reset", "execute", "--plan", str(plan_file), "-c", str(setup.config), "--json")
    outcome = cli(capsys, *execute_args)
    assert killed_at, "the node was not killed during execute"
    assert untouched == sorted(setup.groups)[1:], "the other groups moved before the kill"
    say(capsys, f"execute with node {setup.killed} killed after the first group: exit {outcome[0]} after "
          f"{time.monotonic() - killed_at[0]:.1f}s from the kill")  # fmt: skip
    # The snapshot written before the first commit names every group: after a failure, the rollback
    # says which groups the run was moving, moved or not.
    snapshots = list((tmp_path / "snapshots").glob("*.json"))
    assert len(snapshots) == 1
    snapshot = json.loads(snapshots[0].read_text())
    assert sorted(group["group_id"] for group in snapshot["groups"]) == sorted(setup.groups)
    finishes_or_fails_retryably(outcome, setup, lambda: cli(capsys, *execute_args), capsys)
    ends_exact_and_rolls_back(three_nodes, setup, capsys, snapshot["snapshot_id"])


def test_a_process_reading_groups_across_their_coordinators_loss_lives_on(
    three_nodes: LocalKafkaCluster, unique_name: str
) -> None:
    """librdkafka aborts the process (not an exception: the whole run, and an xdist worker with
    it) when a request to a group's coordinator times out inside the library while that node is
    down, once the library finds the coordinator again. The reads here time out after 1 s and the
    coordinator moves only after the broker session timeout, so every read that waits out the loss
    would trip it; the process must live on and read the offsets the groups committed, the last
    of them just before the kill."""
    topic = f"{unique_name}-committed"
    create_replicated_topic(three_nodes, topic, PARTITIONS)
    leading = sorted({n for n in offsets_topic_leaders(three_nodes).values() if n is not None})
    killed = leading[-1]
    groups = [named_led_by(three_nodes, f"{unique_name}-{i}", GROUP_OFFSETS_TOPIC, killed) for i in range(2)]
    committed = {
        group: {(topic, p): 10 * (i + 1) + p for p in range(PARTITIONS)} for i, group in enumerate(groups)
    }
    for group, offsets in committed.items():
        commit_group(three_nodes, group, offsets)
    program = [sys.executable, "-m", "tests.support.coordinator_reads", three_nodes.bootstrap_servers]
    reader = subprocess.Popen(
        [*program, "1", *groups],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert reader.stdout is not None
        assert reader.stdin is not None
        assert reader.stdout.readline().strip() == "ready", reader.stderr.read() if reader.stderr else ""
        # Commits a moment before the kill: the surviving nodes' high watermarks may not cover
        # them yet when one of them takes over (the new coordinator read them as no offsets
        # at all before the reads asked for stable offsets).
        committed = {group: {tp: offset + 5 for tp, offset in at.items()} for group, at in committed.items()}
        for group, offsets in committed.items():
            commit_group(three_nodes, group, offsets)
        three_nodes.kill_node(killed)
        reader.stdin.write("go\n")
        reader.stdin.flush()
        out, err = reader.communicate(timeout=120)
    finally:
        if reader.poll() is None:
            reader.kill()
    assert reader.returncode == 0, f"the reader exited {reader.returncode} (-6: librdkafka aborted): {err}"
    read = json.loads(out.strip().splitlines()[-1])
    assert read == {g: {f"{t}/{p}": o for (t, p), o in at.items()} for g, at in committed.items()}
