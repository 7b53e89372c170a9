"""Realistic data for the local drill: the shapes of topic and consumer group that break naive tools.

- ``orders``: keyed JSON records with headers, 3 partitions.
- ``clicks``: unkeyed records, 2 partitions.
- ``customers``: a compacted topic with updates and tombstones, after the log cleaner has run.
- ``payments``: written by a transactional producer, with committed and aborted transactions.

Consumer groups at different lags: one fully caught up, one far behind, one
committed inside compaction holes and on transaction markers, one that
committed on only some partitions (the others "never committed"), and one
that never committed anything.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from dataclasses import dataclass, field

from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import KafkaClients, PartitionReader, TopicSpec, open_admin
from kbackup.core.logs import get_logger
from kbackup.core.retry import call_with_retries
from kbackup.core.types import TopicPartitionKey

log = get_logger("drill.data")


@dataclass
class DrillData:
    """What was written and committed on the source."""

    topics: dict[str, int] = field(default_factory=dict)
    #: group -> {(topic, partition): committed offset}
    groups: dict[str, dict[TopicPartitionKey, int]] = field(default_factory=dict)
    #: Groups that exist on the source but never committed an offset.
    never_committed: list[str] = field(default_factory=list)
    #: The log cleaner compacted the compacted topic before the groups committed (holes to commit in).
    compaction_holes: bool = False
    records_written: int = 0


def _visible_offsets(connection: KafkaConnection, topic: str, partition: int) -> list[int]:
    """Offsets of the records a read_committed consumer sees (holes are markers, aborted or compacted)."""
    clients = KafkaClients(connection, client_id="kafka-backup-drill-data")
    with PartitionReader(clients) as reader:
        return [
            offset
            for batch in reader.batches(topic, partition, 0, timeout_secs=60)
            for offset in (message.offset() for message in batch)
            if offset is not None
        ]


def _commit(connection: KafkaConnection, group: str, offsets: dict[TopicPartitionKey, int]) -> None:
    open_admin(connection, client_id=f"drill-{group}").alter_offsets(group, offsets)


def _holes(offsets: list[int]) -> list[int]:
    return [missing for a, b in itertools.pairwise(offsets) for missing in range(a + 1, b)]


def fill_source(
    connection: KafkaConnection, *, records_per_partition: int = 2_000, seed: int = 7, prefix: str = ""
) -> DrillData:
    """Create the drill topics on ``connection``, fill them and commit the groups' offsets."""
    rng = random.Random(seed)
    admin = open_admin(connection)
    topics = {f"{prefix}orders": 3, f"{prefix}clicks": 2, f"{prefix}customers": 1, f"{prefix}payments": 2}
    compacted = f"{prefix}customers"
    compaction = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    }
    specs = [
        TopicSpec(name, count, configs=compaction if name == compacted else {})
        for name, count in topics.items()
    ]
    for refused in admin.create_topics(specs).values():
        if refused is not None:
            raise refused.error
    data = DrillData(topics=topics)
    base = KafkaClients(connection, client_id="kafka-backup-drill-data").producer(**{"linger.ms": 20})
    started = int(time.time() * 1000) - 3_600_000  # recent: real clusters' retention must not delete them
    for partition in range(3):
        for index in range(records_per_partition):
            body = {"order": index, "amount": rng.randint(1, 500), "partition": partition}
            base.produce(
                f"{prefix}orders",
                key=f"customer-{rng.randint(0, 99)}".encode(),
                value=json.dumps(body).encode(),
                partition=partition,
                timestamp=started + index * 3 + partition,
                headers=[("source", b"shop"), ("trace", f"{partition}-{index}".encode())],
            )
            base.poll(0)
    for partition in range(2):
        for index in range(records_per_partition):
            base.produce(
                f"{prefix}clicks",
                value=f"click {index}".encode(),
                partition=partition,
                timestamp=started + index,
            )
            base.poll(0)
    # Compacted topic: 50 keys updated many times, some deleted; several batches so segments roll.
    keys = [f"customer-{k}".encode() for k in range(50)]
    for batch in range(6):
        for key in keys:
            # The last batch deletes some keys: their tombstones outlive compaction (delete.retention.ms).
            value = None if (batch == 5 and key.endswith(b"7")) else json.dumps({"version": batch}).encode()
            base.produce(compacted, key=key, value=value, partition=0)
        base.flush(30)
        time.sleep(0.2)
    base.flush(60)
    data.records_written += records_per_partition * 5 + 300

    transactional = KafkaClients(connection, client_id="kafka-backup-drill-txn").producer(
        **{"transactional.id": f"{prefix}drill-payments", "linger.ms": 5}
    )
    transactional.init_transactions(30)
    for batch in range(20):
        transactional.begin_transaction()
        for index in range(rng.randint(5, 30)):
            transactional.produce(
                f"{prefix}payments",
                key=f"payment-{batch}-{index}".encode(),
                value=json.dumps({"batch": batch, "index": index}).encode(),
                partition=index % 2,
            )
        if batch % 5 == 3:
            transactional.flush(30)
            transactional.abort_transaction(30)
        else:
            transactional.commit_transaction(30)

    data.compaction_holes = _wait_for_compaction(connection, compacted)
    _commit_groups(connection, data, prefix, rng)
    return data


def _wait_for_compaction(connection: KafkaConnection, topic: str, timeout: float = 60.0) -> bool:
    """Roll the compacted topic's segment until the log cleaner has made holes in it (True), for at most
    ``timeout`` seconds (False: the data set then has no compaction holes, and the report says so)."""
    producer = KafkaClients(connection, client_id="kafka-backup-drill-data").producer(**{"linger.ms": 0})

    def roll_and_look() -> bool:
        producer.produce(topic, key=b"roll", value=b"segment roll", partition=0)  # rolls the active segment
        producer.flush(10)
        return bool(_holes(_visible_offsets(connection, topic, 0)))

    if call_with_retries(roll_and_look, within_secs=timeout, delay_secs=1.0, retry_errors=False, until=bool):
        return True
    log.warning(
        "the log cleaner did not compact %s within %.0fs: the drill runs without compaction holes",
        topic,
        timeout,
    )
    return False


def _commit_groups(connection: KafkaConnection, data: DrillData, prefix: str, rng: random.Random) -> None:
    admin = open_admin(connection)
    ends = admin.partition_ranges((t, p) for t, n in data.topics.items() for p in range(n))
    orders, clicks, customers, payments = (
        f"{prefix}{name}" for name in ("orders", "clicks", "customers", "payments")
    )
    plans: dict[str, dict[TopicPartitionKey, int]] = {
        # Fully caught up on everything it reads.
        f"{prefix}analytics": {
            (t, p): ends[(t, p)].log_end for t in (orders, clicks) for p in range(data.topics[t])
        },
        # Far behind on orders, a little behind on clicks.
        f"{prefix}billing": {
            **{(orders, p): ends[(orders, p)].log_end // 4 for p in range(3)},
            **{(clicks, p): max(0, ends[(clicks, p)].log_end - 37) for p in range(2)},
        },
        # Never committed on clicks partition 1: that partition counts as "nothing processed".
        f"{prefix}audit": {(clicks, 0): ends[(clicks, 0)].log_end // 2},
    }
    # Committed inside holes: compaction holes on customers, markers/aborted records on payments.
    customer_holes = _holes(_visible_offsets(connection, customers, 0))
    payment_holes = {p: _holes(_visible_offsets(connection, payments, p)) for p in range(2)}
    plans[f"{prefix}crm"] = {
        (customers, 0): rng.choice(customer_holes) if customer_holes else ends[(customers, 0)].log_end // 2
    }
    plans[f"{prefix}payouts"] = {
        (payments, p): rng.choice(holes) if holes else ends[(payments, p)].log_end // 2
        for p, holes in payment_holes.items()
    }
    plans[f"{prefix}ledger"] = {
        (payments, p): ends[(payments, p)].log_end for p in range(2)
    }  # on the end marker
    for group, offsets in plans.items():
        _commit(connection, group, offsets)
        data.groups[group] = offsets
    # A group that joined but never committed: it exists, with nothing to move.
    idle = f"{prefix}never-committed"
    consumer = KafkaClients(connection, client_id="drill-idle").consumer(
        group_id=idle, properties={"session.timeout.ms": 6000}
    )
    consumer.subscribe([clicks])
    consumer.poll(2.0)
    consumer.close()
    data.never_committed.append(idle)
