"""Topic names at Kafka's length limit (249 characters) survive backup, validate and restore on real clusters.

The name becomes a folder below the backup (an object key segment), so it must
fit a file name on a local folder (255 bytes) and come back unchanged.
"""

from __future__ import annotations

import json
from pathlib import Path

from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.cli_run import RunCli
from tests.support.kafka_io import Record, admin, consume_all, create_topic, produce

KAFKA_TOPIC_NAME_LIMIT = 249


def test_topic_name_of_249_characters_round_trips(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    cli: RunCli,
) -> None:
    # Every character class Kafka allows in a name: letters, digits, '.', '_' and '-'.
    stem = f"Long.Name_{unique_name}-"
    topic = (stem + "x" * KAFKA_TOPIC_NAME_LIMIT)[:KAFKA_TOPIC_NAME_LIMIT]
    assert len(topic) == KAFKA_TOPIC_NAME_LIMIT
    create_topic(source_cluster, topic, partitions=2)
    sent = [Record(key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2) for i in range(30)]
    produce(source_cluster, topic, sent)

    store = tmp_path / "store"
    code, out, err = cli(
        "backup", "-b", source_cluster.bootstrap_servers, "--include", topic,
        "--path", str(store), "--backup-id", "long", "--json",
    )  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)
    assert summary["records"] == 30
    assert (store / "long" / "data" / topic).is_dir()

    code, out, err = cli("validate", "--deep", "--path", str(store), "--backup-id", "long", "--json")
    assert code == 0, err

    code, out, err = cli(
        "restore", "-b", target_cluster.bootstrap_servers, "--path", str(store),
        "--backup-id", "long", "--json",
    )  # fmt: skip
    assert code == 0, err
    restored = consume_all(target_cluster, topic, (0, 1))
    assert sorted((r.partition, r.key, r.value) for r in restored) == sorted(
        (s.partition, s.key, s.value) for s in sent
    )
    origin_topics = {dict(r.headers)["x-kafka-backup-topic"] for r in restored}
    assert origin_topics == {topic.encode()}


def test_renaming_to_a_name_over_the_limit_is_refused_before_the_target_changes(
    target_cluster: LocalKafkaCluster, tmp_path: Path, cli: RunCli
) -> None:
    too_long = "y" * (KAFKA_TOPIC_NAME_LIMIT + 1)
    code, _, err = cli(
        "restore", "-b", target_cluster.bootstrap_servers, "--path", str(tmp_path),
        "--backup-id", "any", "--topic-mapping", f"orders={too_long}",
    )  # fmt: skip
    assert code == 3, err
    assert "is not a valid Kafka topic name" in err

    assert too_long not in admin(target_cluster).list_topics(timeout=10).topics
