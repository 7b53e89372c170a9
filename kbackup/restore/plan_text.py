"""The restore plan as text for people: the ``--dry-run`` output.

Kept apart from :mod:`kbackup.restore.plan` (what a restore will do) because it is presentation;
it stays in the stage because the three-phase dry run (``kbackup.app``) prints it too, and the
application layer may not import the CLI.
"""

from __future__ import annotations

from kbackup.restore.plan import RestorePlan, TopicPlan, format_time
from kbackup.restore.target import PurgePlan


def plan_lines(plan: RestorePlan) -> list[str]:
    """The plan as lines of text (the --dry-run output)."""
    expected = plan.expected_records
    records = f"{expected:,}" if expected is not None else f"at most {plan.records_upper_bound:,}"
    lines = [
        f"restore of backup {plan.backup_id} ({plan.storage_url}), source cluster {plan.source_cluster}",
        f"  into {plan.target} (cluster id {plan.target_cluster_id or 'unknown'})",
        f"  restore id {plan.restore_id}; mode {plan.mode} ({plan.mode_reason})",
        f"  origin headers: {'x-kafka-backup-* on every record' if plan.origin_headers else 'off'} "
        f"({plan.origin_headers_reason})",
    ]
    if plan.time_start is not None or plan.time_end is not None:
        lines.append(f"  time window: {format_time(plan.time_start)} .. {format_time(plan.time_end)}")
    for rule in plan.filter_rules:
        topics = plan.filter_topics(rule)
        lines.append(f"  filter {rule.describe()}; on {', '.join(topics) if topics else 'no topic'}")
    if plan.mode == "exactly-once":
        created = " (created on first use)" if plan.create_progress_topic else ""
        lines.append(
            f"  progress: topic {plan.progress_topic}{created}, transactional.id {plan.transactional_id}"
        )
    lines.append(f"  {records} record(s) from {len(plan.segments)} segment(s)")
    for topic in plan.topics:
        parts = [p for p in plan.partitions if p.source_topic == topic.source_topic]
        counts = [p.expected_records for p in parts]
        count = (
            f"{sum(c for c in counts if c is not None):,}"
            if all(c is not None for c in counts)
            else f"<= {sum(p.records_upper_bound for p in parts):,}"
        )
        action = (
            f"create with {topic.target_partitions} partition(s)"
            + (f", configs {topic.configs}" if topic.configs else "")
            if topic.create
            else _existing_action(topic)
        )
        routing = {
            "identity": "partition p -> p",
            "mapped": "partitions " + ", ".join(f"{p}->{q}" for p, q in sorted(topic.partition_map.items())),
            "repartition": f"repartitioned by key (murmur2) over {topic.target_partitions}",
        }[topic.routing]
        after = "; then switched to LogAppendTime" if topic.switch_to_log_append_time else ""
        lines.append(
            f"  topic {topic.source_topic} -> {topic.target_topic}: {action}; {routing}; "
            f"{count} record(s) from {len(parts)} partition(s){after}"
        )
        if topic.differences:
            lines.append(
                f"    differs from the backup (restore.existing_topics: {plan.existing_topics}): "
                + "; ".join(difference.describe() for difference in topic.differences)
            )
    for warning in plan.warnings:
        lines.append(f"  warning: {warning}")
    return lines


def _existing_action(topic: TopicPlan) -> str:
    """An existing target topic, and what ``restore.existing_topics: apply`` does to it first."""
    action = f"exists with {topic.target_partitions - topic.partitions_added} partition(s)"
    if topic.partitions_added:
        action += f", {topic.partitions_added} added before the first record"
    if topic.config_changes:
        action += f", configs {topic.config_changes} set before the first record"
    return action


def purge_lines(purge: PurgePlan) -> list[str]:
    """``restore.purge_target`` in the dry run: a line per purged topic, or why none is."""
    setting = f"restore.purge_target: {purge.how}"
    if purge.skipped:
        return [
            f"  purge ({setting}): skipped, an earlier run of this restore already restored into "
            "the target (a restore purges once, before its first record)"
        ]
    if not purge.steps:
        return [f"  purge ({setting}): no existing target topic to purge"]
    return [f"  purge ({setting}): {step.describe()}" for step in purge.steps]
