"""The accuracy study's MirrorMaker 2 runner on two real clusters of its own, with the real MirrorMaker 2.

Checks what the study's MirrorMaker 2 columns rest on: the driver copies and
translates, each copied record's source offset is found through the ledger,
every offset sync read back is the (source offset, target offset) of a copied
record, and the group's translated positions skip nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from confluent_kafka import TopicPartition

from bench.accuracy.data import SourceLedger
from bench.accuracy.mirror_maker import OFFSET_LAG_MAX, MirrorMaker2, read_mirrored, read_offset_syncs
from kbackup.core.kafka import KafkaClients, open_admin
from kbackup.sandbox.kafka import local_clusters
from tests.support.kafka_io import create_topic

TOPIC, GROUP, RECORDS = "mm-study", "mm-group", 1_000
#: Records deleted from the source's start before the copy: source and target offsets then differ by this.
SHIFT = 37


@pytest.mark.slow
def test_the_real_mirror_maker_copies_translates_and_its_syncs_are_copied_records(tmp_path: Path) -> None:
    with local_clusters(["mm-source", "mm-target"], tmp_path / "kafka") as (source_cluster, target_cluster):
        source, target = source_cluster.connection(), target_cluster.connection()
        admin = open_admin(source)
        create_topic(source_cluster, TOPIC, partitions=2)
        ledger = SourceLedger()
        producer = KafkaClients(source).producer(**{"linger.ms": 5})
        for index in range((SHIFT + RECORDS) * 2):
            partition = index % 2
            producer.produce(
                TOPIC,
                value=ledger.value(TOPIC, partition, b"v"),
                partition=partition,
                on_delivery=ledger.on_delivery,
            )
        assert producer.flush(60) == 0
        source_offsets = ledger.offsets()
        deleted = admin.client.delete_records([TopicPartition(TOPIC, p, SHIFT) for p in (0, 1)])
        for future in deleted.values():
            future.result(60)
        # Partition 0 half read (a lag of 500, beyond offset.lag.max), partition 1 at the head.
        committed = {(TOPIC, 0): SHIFT + 500, (TOPIC, 1): SHIFT + RECORDS}
        admin.alter_offsets(GROUP, committed)

        mirror = MirrorMaker2("study", source, target, [TOPIC], tmp_path / "mm2", groups="mm-.*")
        mirror.start()
        try:
            mirror.wait_replicated({(TOPIC, 0): RECORDS, (TOPIC, 1): RECORDS}, quiet_secs=5)
            positions = mirror.translated_positions({GROUP: sorted(committed)})
        finally:
            mirror.stop()
        copied = read_mirrored(
            target, {(mirror.mirrored(TOPIC), p): (TOPIC, p) for p in (0, 1)}, source_offsets
        )
        syncs = read_offset_syncs(source, mirror.offset_syncs_topic)

    for (topic, partition), offset in committed.items():
        records = copied[(mirror.mirrored(topic), partition)]
        assert records.source_offsets.tolist() == list(range(SHIFT, SHIFT + RECORDS))
        assert records.target_offsets.tolist() == list(range(RECORDS))
        position = positions[(GROUP, mirror.mirrored(topic), partition)]
        assert position is not None, f"MirrorMaker 2 translated nothing for {topic}/{partition}"
        skipped, reread = records.judge({partition: offset}, position)
        assert skipped == 0
        assert reread <= OFFSET_LAG_MAX
        emitted = syncs[(topic, partition)]
        assert emitted, f"no offset sync read back for {topic}/{partition}"
        pairs = set(zip(records.source_offsets.tolist(), records.target_offsets.tolist(), strict=True))
        assert set(emitted) <= pairs
