"""A restore in one process fences the transactional ids its units have on worker processes.

A run on worker processes (``restore.workers``) writes each source partition under the unit's own
transactional id. If its parent is SIGKILLed, the orphaned workers go on until they notice (within
a second or two), then commit what they produced: an open transaction of theirs can commit after a
rerun read the progress. A rerun on workers or Spark fences each unit's id as it starts it; a rerun
in one process writes under the restore's own id, which fences none of them. So before it reads
the progress it starts a transactional producer for each unit's id: that aborts an orphan's open
transaction and makes its next commit fail (docs/restore.md, "Workers").
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from kbackup.core.kafka import KafkaClients, KafkaException, translate_kafka_error
from kbackup.core.logs import get_logger
from kbackup.restore.plan import RestorePlan
from kbackup.restore.settings import RestoreSettings

log = get_logger("restore.fence")

#: Units fenced at once: each is a round trip to its transaction coordinator, mostly waiting.
FENCE_CONCURRENCY = 16


def may_follow_a_run_in_units(plan: RestorePlan) -> bool:
    """Whether an earlier run of ``plan`` on workers may have written: it creates the topics before
    any worker produces, so a plan that creates every topic it writes follows none that wrote."""
    return plan.unit is None and any(not topic.create for topic in plan.topics)


def fence_units(plan: RestorePlan, clients: KafkaClients, settings: RestoreSettings) -> int:
    """Start (and drop) a transactional producer for each unit's transactional id of ``plan``: each
    unit's earlier producer is fenced and its open transaction aborted. How many were fenced."""
    ids = plan.unit_transactional_ids()

    def fence(transactional_id: str) -> None:
        producer = clients.producer(
            **{"transactional.id": transactional_id, "transaction.timeout.ms": 60_000}
        )
        producer.init_transactions(settings.timeout_secs)

    try:
        with ThreadPoolExecutor(max_workers=min(FENCE_CONCURRENCY, len(ids)) or 1) as pool:
            list(pool.map(fence, ids))
    except KafkaException as exc:
        raise translate_kafka_error(
            exc,
            action="fence the transactional ids of an earlier run on workers",
            connection=clients.connection,
        ) from None
    log.info(
        "fenced the transactional ids of %d unit(s) an earlier run on workers may have left producing",
        len(ids),
        extra={"backup_id": plan.backup_id, "restore_id": plan.restore_id},
    )
    return len(ids)
