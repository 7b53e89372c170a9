"""Translation accuracy study: header-based (this project) against MirrorMaker 2 and timestamps.

    .venv/bin/python -m bench.accuracy [--quick] [--write-docs] [--records N]

On two local Kafka 4.3.1 clusters (kbackup.sandbox) it fills the source
(``bench.accuracy.data``), commits the study's consumer groups, backs the
topics up and restores them with this project's CLI (origin headers, the
default exactly-once mode), restores ``acc-main`` a second time into 6
partitions, then translates every group three ways (``translators``) and
judges each position against the truth computed from the restored records
(``measure``). Header-based translation must be exact (0 skipped, 0 re-read)
everywhere but the repartitioned topic; the run fails otherwise. With
``--write-docs`` the tables and a plot go into docs/benchmarks.md
(section ``accuracy``) and docs/img/.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from bench._perf import replace_section
from bench.accuracy.data import LAG_BUCKETS, MAIN, MAIN_RATES, SourceData, StudyGroup, fill_source
from bench.accuracy.measure import RestoredPartition, read_restored_columns
from bench.accuracy.translators import Positions, header_based, mirror_maker_2, timestamp_based
from kbackup.core.config import KafkaConnection
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import local_clusters
from kbackup.storage import open_storage

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "benchmarks.md"
PLOT = REPO / "docs" / "img" / "accuracy-rereads.png"
START, END = "<!-- accuracy:start -->", "<!-- accuracy:end -->"
RESULT_PICKLE = REPO / "bench-results" / "accuracy-result.pickle"
BACKUP_ID = "accuracy"
REPARTITIONED = f"{MAIN}-x6"
REPARTITIONED_COUNT = 6
#: acc-main restored again without transactions: no commit markers on the target (see the report's note).
IDEMPOTENT = f"{MAIN}-idempotent"
METHODS = ("header-based", "MirrorMaker 2", "timestamp")


@dataclass
class Judged:
    """One group's outcome under one method over the target partitions of a scenario."""

    skipped: int = 0
    reread: int = 0
    untranslated_partitions: int = 0


@dataclass
class ScenarioRow:
    name: str
    groups: int
    restored_records: int
    #: method -> per-group outcomes (None: the method does not apply to this scenario).
    outcomes: dict[str, list[Judged] | None] = field(default_factory=dict)
    #: Re-reads every translator must make here (the reference position's), per group.
    lower_bound: list[int] = field(default_factory=list)


@dataclass
class StudyResult:
    source: SourceData
    rows: list[ScenarioRow]
    timings: dict[str, float]
    #: Header-based positions that differ from the reference position (must stay empty).
    header_mismatches: list[str]


def _cli(*args: str, config: Mapping[str, object], work: Path) -> dict[str, object]:
    """Run ``kafka-backup`` with a config file, as a user would; its --json summary."""
    path = work / f"{args[0]}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(config))  # JSON is YAML
    result = subprocess.run(
        [sys.executable, "-m", "kbackup", *args, "-c", str(path), "--json"],
        capture_output=True, text=True, timeout=3600, check=False, cwd=REPO,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"kafka-backup {args[0]} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    summary: dict[str, object] = json.loads(result.stdout)
    return summary


def _judge(
    restored: Mapping[TopicPartitionKey, RestoredPartition],
    group: StudyGroup,
    keys: list[TopicPartitionKey],
    positions: Positions,
) -> Judged:
    judged = Judged()
    for topic, partition in keys:
        position = positions.get((group.group_id, topic, partition))
        if position is None:
            judged.untranslated_partitions += 1
            continue
        committed = {p: c for (_, p), c in group.committed.items()}
        skipped, reread = restored[(topic, partition)].judge(committed, position)
        judged.skipped += skipped
        judged.reread += reread
    return judged


def run_study(
    source: KafkaConnection,
    target: KafkaConnection,
    work: Path,
    *,
    records: int,
    groups_per_bucket: int,
    seed: int,
    log: Callable[[str], None] = print,
) -> StudyResult:
    timings: dict[str, float] = {}
    started = time.monotonic()
    data = fill_source(source, records, groups_per_bucket=groups_per_bucket, seed=seed)
    timings["fill source"] = time.monotonic() - started
    log(f"source filled in {timings['fill source']:.0f}s: holes {data.holes}, {len(data.groups)} groups")

    storage_url = str(work / "store")
    topics = sorted(data.partition_counts)
    source_section = {"bootstrap_servers": source.bootstrap_servers, "topics": {"include": topics}}
    target_section = {"bootstrap_servers": target.bootstrap_servers}
    started = time.monotonic()
    backup_summary = _cli(
        "backup",
        config={"backup_id": BACKUP_ID, "source": source_section, "storage": {"url": storage_url},
                "backup": {"consumer_group_snapshot": True}},
        work=work,
    )  # fmt: skip
    timings["backup"] = time.monotonic() - started
    log(f"backup: {backup_summary.get('records')} records in {timings['backup']:.0f}s")
    restores = {
        "restore": {},
        f"repartitioned restore ({MAIN} 3 -> {REPARTITIONED_COUNT})": {
            "topics": [MAIN], "topic_mapping": {MAIN: REPARTITIONED},
            "target_partitions": {MAIN: REPARTITIONED_COUNT}, "repartition": True,
        },
        f"idempotent restore ({MAIN})": {"topics": [MAIN], "topic_mapping": {MAIN: IDEMPOTENT},
                                         "exactly_once": False},
    }  # fmt: skip
    restored_counts: dict[str, int] = {}
    for name, settings in restores.items():
        started = time.monotonic()
        summary = _cli(
            "restore",
            config={"backup_id": BACKUP_ID, "storage": {"url": storage_url}, "target": target_section,
                    "restore": settings},
            work=work,
        )  # fmt: skip
        timings[name] = time.monotonic() - started
        restored_counts[name] = int(str(summary["records"]))
        log(f"{name}: {restored_counts[name]:,} records in {timings[name]:.0f}s")

    storage = open_storage(storage_url)
    backup = BackupCatalog(storage).load(BACKUP_ID)
    target_partitions = {topic: list(range(count)) for topic, count in data.partition_counts.items()}
    target_partitions[REPARTITIONED] = list(range(REPARTITIONED_COUNT))
    target_partitions[IDEMPOTENT] = list(range(len(MAIN_RATES)))
    started = time.monotonic()
    restored = read_restored_columns(
        target,
        [(topic, p) for topic, partitions in target_partitions.items() for p in partitions],
        backup.source_cluster,
    )
    timings["read restored records (truth)"] = time.monotonic() - started
    total = sum(len(item) for item in restored.values())
    # acc-main and its two copies must come back whole (the compacted topic may be compacted again on
    # the target, where the cleaner drops duplicate keys the backup still held).
    for topic in (MAIN, REPARTITIONED, IDEMPOTENT):
        count = sum(len(item) for (name, _), item in restored.items() if name == topic)
        if count != records * len(MAIN_RATES):
            raise RuntimeError(
                f"read {count:,} restored records of {topic}, expected {records * len(MAIN_RATES):,}"
            )
    log(f"read {total:,} restored records in {timings['read restored records (truth)']:.0f}s")

    groups = data.groups
    lag_groups = [group for group in groups if group.lags]
    positions: dict[str, Positions] = {}
    header, timings["header-based plan"] = header_based(target, backup, storage.url, groups)
    header_x6, timings["header-based plan (repartitioned)"] = header_based(
        target, backup, storage.url, lag_groups, topic_mapping={MAIN: REPARTITIONED}, repartitioned=restored
    )
    header_idem, _ = header_based(target, backup, storage.url, lag_groups, topic_mapping={MAIN: IDEMPOTENT})
    positions["header-based"] = {**header, **header_x6, **header_idem}
    started = time.monotonic()
    positions["MirrorMaker 2"] = {
        **mirror_maker_2(groups, restored),
        **mirror_maker_2(lag_groups, restored, topic_mapping={MAIN: IDEMPOTENT}),
    }
    timings["MirrorMaker 2 model"] = time.monotonic() - started
    started = time.monotonic()
    positions["timestamp"] = {
        **timestamp_based(source, target, groups, target_partitions),
        **timestamp_based(
            source,
            target,
            lag_groups,
            target_partitions,
            topic_mapping={MAIN: REPARTITIONED},
            repartitioned=True,
        ),
        **timestamp_based(source, target, lag_groups, target_partitions, topic_mapping={MAIN: IDEMPOTENT}),
    }
    timings["timestamp lookups"] = time.monotonic() - started
    log("translated: " + ", ".join(f"{name} {seconds:.0f}s" for name, seconds in timings.items()))

    mismatches = _header_mismatches(groups, lag_groups, restored, positions["header-based"])
    rows = _scenarios(groups, lag_groups, restored, positions)
    return StudyResult(source=data, rows=rows, timings=timings, header_mismatches=mismatches)


def _keys_of(group: StudyGroup) -> list[TopicPartitionKey]:
    return sorted(group.committed)


def _header_mismatches(
    groups: list[StudyGroup],
    lag_groups: list[StudyGroup],
    restored: Mapping[TopicPartitionKey, RestoredPartition],
    header: Positions,
) -> list[str]:
    found = []
    checks = [(group, key) for group in groups for key in _keys_of(group)]
    checks += [(group, (REPARTITIONED, q)) for group in lag_groups for q in range(REPARTITIONED_COUNT)]
    checks += [(group, (IDEMPOTENT, p)) for group in lag_groups for p in range(len(MAIN_RATES))]
    for group, (topic, partition) in checks:
        committed = {p: c for (_, p), c in group.committed.items()}
        expected = restored[(topic, partition)].reference_position(committed)
        got = header.get((group.group_id, topic, partition))
        if got != expected:
            found.append(f"{group.group_id} {topic}/{partition}: planned {got}, reference {expected}")
    return found


def _scenarios(
    groups: list[StudyGroup],
    lag_groups: list[StudyGroup],
    restored: Mapping[TopicPartitionKey, RestoredPartition],
    positions: Mapping[str, Positions],
) -> list[ScenarioRow]:
    def row(name: str, members: list[StudyGroup], keys_of: Callable[[StudyGroup], list[TopicPartitionKey]],
            methods: tuple[str, ...] = METHODS) -> ScenarioRow:  # fmt: skip
        keys = sorted({key for group in members for key in keys_of(group)})
        result = ScenarioRow(name, len(members), sum(len(restored[key]) for key in keys))
        for method in METHODS:
            result.outcomes[method] = (
                [_judge(restored, group, keys_of(group), positions[method]) for group in members]
                if method in methods
                else None
            )
        for group in members:
            committed = {p: c for (_, p), c in group.committed.items()}
            result.lower_bound.append(
                sum(
                    restored[key].judge(committed, restored[key].reference_position(committed) or 0)[1]
                    for key in keys_of(group)
                )
            )
        return result

    rows = []
    for bucket, _, _ in LAG_BUCKETS:
        members = [group for group in lag_groups if group.scenario == f"lag {bucket}"]
        rows.append(row(f"lag {bucket} (3 partitions)", members, _keys_of))
    for partition, rate in enumerate(MAIN_RATES):

        def keys_of_partition(group: StudyGroup, p: int = partition) -> list[TopicPartitionKey]:
            return [(MAIN, p)]

        rows.append(
            row(f"{rate} records/ms (partition {partition}, all lags)", lag_groups, keys_of_partition)
        )
    for scenario in ("transaction markers and aborted records", "compaction holes", "skewed producer clocks"):
        rows.append(row(scenario, [group for group in groups if group.scenario == scenario], _keys_of))
    for bucket, _, _ in LAG_BUCKETS:
        members = [group for group in lag_groups if group.scenario == f"lag {bucket}"]
        rows.append(
            row(f"idempotent restore (no markers), lag {bucket}", members,
                lambda group: [(IDEMPOTENT, p) for _, p in _keys_of(group)])
        )  # fmt: skip
    for bucket, _, _ in LAG_BUCKETS:
        members = [group for group in lag_groups if group.scenario == f"lag {bucket}"]
        rows.append(
            row(f"repartitioned 3 -> 6, lag {bucket}", members,
                lambda _group: [(REPARTITIONED, q) for q in range(REPARTITIONED_COUNT)],
                methods=("header-based", "timestamp"))
        )  # fmt: skip
    return rows


def _cell(outcomes: list[Judged] | None) -> str:
    if outcomes is None:
        return "n/a | n/a | n/a | n/a"
    translated = [item for item in outcomes if not item.untranslated_partitions]
    rereads = [item.reread for item in outcomes]
    skipped = sum(item.skipped for item in outcomes)
    return (
        f"{skipped:,} | {statistics.fmean(rereads) if rereads else 0:,.0f} | {max(rereads, default=0):,} "
        f"| {len(outcomes) - len(translated)}"
    )


def report(result: StudyResult, seconds: float, plot: Path | None) -> str:
    load = os.getloadavg()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    data = result.source
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m bench.accuracy` on {os.cpu_count()} CPU(s) "
        f"({platform.machine()}), {memory:.0f} GiB, load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}; "
        f"two local Kafka 4.3.1 clusters; {seconds / 60:.0f} min in all.",
        "",
        f"Source: `{MAIN}` 3 partitions x {data.records_per_partition:,} records (2, 4 and 100 records per "
        "millisecond), plus smaller topics for transactions, compaction and skewed clocks "
        f"({', '.join(f'{t}/{p}: {n:,} holes' for (t, p), n in sorted(data.holes.items()))}). "
        "Backed up and restored with `kafka-backup backup` / `restore` (origin headers, exactly-once), "
        f"and `{MAIN}` restored again into {REPARTITIONED_COUNT} partitions. {len(data.groups)} groups.",
        "",
        "Per scenario and method: records skipped (sum over groups; data loss), records re-read per group "
        "(mean, max), and groups with at least one untranslated partition (not counted in the skipped and "
        "re-read columns). Truth: the reference formula of `shared/reference/offset-translation.md` "
        "evaluated on every restored record read back from the target.",
        "",
        "| scenario | groups | restored records | header-based skipped | re-read mean | re-read max "
        "| untranslated | MM2 skipped | re-read mean | re-read max | untranslated | timestamp skipped "
        "| re-read mean | re-read max | untranslated | lower bound (mean re-read) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result.rows:
        lines.append(
            f"| {row.name} | {row.groups} | {row.restored_records:,} | "
            + " | ".join(_cell(row.outcomes[method]) for method in METHODS)
            + f" | {statistics.fmean(row.lower_bound) if row.lower_bound else 0:,.0f} |"
        )
    lines += [
        "",
        "MM2: the offset-sync model (`bench/accuracy/mm2_model.py`: Kafka's OffsetSyncStore rules, 64 syncs, "
        "`offset.lag.max=100`) fed with the restore's real (source, target) offset pairs; n/a on the "
        "repartitioned topic, which MirrorMaker 2 cannot produce. Timestamp: the committed record's "
        "timestamp read from the source, then offsets-for-times on the real target (a group at the head "
        "has no record to read: untranslated, as the seed describes). The exactly-once restore leaves "
        "transaction commit markers on the target, stamped with the broker's wall-clock time; "
        "offsets-for-times returns the first record or marker at or after a timestamp, so a lookup can "
        f"stop at a marker well before the record: the `{IDEMPOTENT}` rows are the same groups on an "
        "idempotent restore without markers. Lower bound: the re-reads of the "
        "reference position itself (non-zero only where one target partition interleaves several source "
        "partitions).",
        "",
        "Time per step: " + ", ".join(f"{name} {value:.0f}s" for name, value in result.timings.items()) + ".",
    ]
    if result.header_mismatches:
        lines += [
            "",
            f"**Header-based positions differing from the reference: {len(result.header_mismatches)}**",
        ]
    if plot is not None:
        lines += ["", f"![re-reads per lag bucket]({plot.relative_to(DOCS.parent).as_posix()})"]
    return "\n".join(lines)


def draw_plot(result: StudyResult, path: Path) -> None:
    """Mean re-reads per lag bucket per method (symlog: header-based is 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in result.rows if row.name.startswith("lag ")]
    figure, axis = plt.subplots(figsize=(8, 4.2))
    width = 0.27
    for index, method in enumerate(METHODS):
        values = [
            statistics.fmean(item.reread for item in row.outcomes[method] or [])
            if row.outcomes[method]
            else 0
            for row in rows
        ]
        axis.bar([i + (index - 1) * width for i in range(len(rows))], values, width, label=method)
    axis.set_xticks(range(len(rows)), [row.name.split(" (")[0].removeprefix("lag ") for row in rows])
    axis.set_yscale("symlog", linthresh=1)
    axis.set_xlabel("group lag behind the head (records)")
    axis.set_ylabel("records re-read per group (mean)")
    axis.set_title("Re-reads after translation, 3 partitions x 1 group, by lag")
    axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def failures(result: StudyResult) -> list[str]:
    """What makes the run fail: header-based not exact where it must be, or any skipped record."""
    found = list(result.header_mismatches)
    for row in result.rows:
        header = row.outcomes["header-based"] or []
        skipped = sum(item.skipped for item in header)
        reread = sum(item.reread for item in header)
        if skipped:
            found.append(f"{row.name}: header-based skipped {skipped} records")
        if row.name.startswith("repartitioned"):
            if reread != sum(row.lower_bound):
                found.append(f"{row.name}: header-based re-read {reread}, lower bound {sum(row.lower_bound)}")
        elif reread:
            found.append(f"{row.name}: header-based re-read {reread} records")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="20,000 records per partition, 2 groups per bucket"
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="records per partition of acc-main")
    parser.add_argument("--groups-per-bucket", type=int, default=5)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--write-docs", action="store_true", help="write the section and plot into docs/")
    args = parser.parse_args()
    records = 20_000 if args.quick else args.records
    per_bucket = 2 if args.quick else args.groups_per_bucket
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kbackup-accuracy-") as scratch:
        work = Path(scratch)
        with local_clusters(["source", "target"], work / "kafka") as (source, target):
            print(f"source {source.bootstrap_servers}, target {target.bootstrap_servers}", flush=True)
            result = run_study(
                source.connection(), target.connection(), work,
                records=records, groups_per_bucket=per_bucket, seed=args.seed,
                log=lambda line: print(line, flush=True),
            )  # fmt: skip
    # Kept so the section can be redrawn without measuring again (bench-results/ is not committed).
    RESULT_PICKLE.parent.mkdir(parents=True, exist_ok=True)
    RESULT_PICKLE.write_bytes(pickle.dumps(result))
    plot = PLOT if args.write_docs else None
    if plot is not None:
        draw_plot(result, plot)
    text = report(result, time.monotonic() - started, plot)
    print("\n" + text)
    if args.write_docs:
        replace_section(DOCS, START, END, f"## Accuracy\n\n{text}")
        print(f"\nwritten to {DOCS} and {plot}")
    problems = failures(result)
    if problems:
        print("\nHEADER-BASED TRANSLATION IS NOT EXACT:\n  " + "\n  ".join(problems[:50]), file=sys.stderr)
        raise SystemExit(1)


if __name__ == "__main__":
    main()
