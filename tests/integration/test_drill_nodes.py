"""``kafka-backup drill --local --nodes 3``: the drill on two three-node clusters (issue 38).

Six JVMs (three per cluster) and little data. While both clusters still run, right after the drill,
an admin client of the test's own reads every backed-up topic on the source and every restored copy
on the target: each partition on three nodes, all in sync. The report is read back: it passed, every
group exact (no record skipped, none re-read), and it names three brokers on each side.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

import kbackup.app.drill
from kbackup.app.config import KBackupConfig
from kbackup.app.drill_report import DrillReport
from tests.support.cli_run import RunCli

pytestmark = pytest.mark.slow

NODES = 3


def replicas_of(bootstrap_servers: list[str], topics: list[str]) -> dict[tuple[str, int], tuple[int, int]]:
    """(replicas, in-sync replicas) of each partition of ``topics``, as the cluster's metadata says."""
    metadata = AdminClient({"bootstrap.servers": ",".join(bootstrap_servers)}).list_topics(timeout=30)
    return {
        (topic, partition.id): (len(partition.replicas), len(partition.isrs))
        for topic in topics
        for partition in metadata.topics[topic].partitions.values()
    }


def test_a_local_drill_on_three_node_clusters_is_exact_and_replicated(
    cli: RunCli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spark: Any
) -> None:
    # ``spark``: the suite's session, which the drill's audit mapping reuses instead of starting one.
    seen: dict[str, dict[tuple[str, int], tuple[int, int]]] = {}
    drill = kbackup.app.drill.run_drill

    def drill_then_look(config: KBackupConfig, **kwargs: Any) -> DrillReport:
        report = drill(config, **kwargs)
        assert config.source is not None
        assert config.target is not None
        sources = sorted(report.topic_copies)
        copies = [report.topic_copies[topic] for topic in sources]
        seen["source"] = replicas_of(config.source.bootstrap_servers, sources)
        seen["target"] = replicas_of(config.target.bootstrap_servers, copies)
        return report

    monkeypatch.setattr(kbackup.app.drill, "run_drill", drill_then_look)
    report = tmp_path / "drill.json"

    drill_args = ("drill", "--local", "--nodes", str(NODES), "--records", "30", "--report", str(report))
    code, out, err = cli(*drill_args)

    assert code == 0, out + err
    for side in ("source", "target"):
        assert seen[side], f"no topic on the {side}"
        assert set(seen[side].values()) == {(NODES, NODES)}, (side, seen[side])
    document = json.loads(report.read_text())
    assert document["passed"] is True
    assert document["unproven"] is None
    assert (document["records_skipped"], document["records_reprocessed"]) == (0, 0)
    assert document["groups"], "the drill judged no group"
    for group, totals in document["groups"].items():
        assert (totals["skipped"], totals["reprocessed"]) == (0, 0), group
    assert document["records_read_back"] > 0
    assert {side: document["clusters"][side]["brokers"] for side in ("source", "target")} == {
        "source": NODES,
        "target": NODES,
    }
    assert f"clusters: source {NODES} broker(s), target {NODES} broker(s)" in out
