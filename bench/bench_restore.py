"""Restore throughput and memory against Kafka's own ProducerPerformance, on one local broker or on
a three-node cluster beside it.

    .venv/bin/python -m bench.bench_restore [--rounds N] [--quick] [--nodes 1,3] [--smaller|--larger]
                                            [--write-docs]

For 100-byte and 1 KiB records it builds backups at two sizes (a folder, with
the test backup builder; ``--smaller`` or ``--larger``: one of each), starts a local
Kafka cluster of each ``--nodes`` count (default 1; a three-node cluster has
replication factor 3 and ``min.insync.replicas=2``), warms
up, then for each backup runs ``--rounds`` rounds (5 by default) of eight runs
(nine with ``KBACKUP_PEER_BINARY``), each into a fresh topic with the same
partition count (deleted after its counts are checked):

- ProducerPerformance with the restore's own producer settings in transactions of
  ``restore.transaction_max_ms`` (2 s; ``restore_producer_props``: the restore's
  ``producer_tuning()`` under the Java producer's names, ``acks=all``, idempotence);
- the bare client loop (``bench/_client_floor.py``): the same records and producer settings
  through confluent-kafka and nothing else, without headers, with the five origin headers,
  and with them in transactions, in one process and in two started together (partitions 0
  and 2 in one, 1 in the other: what two restore workers make of three partitions), which is
  what a second process gives the client itself here, the ceiling for two workers;
- ``kafka-backup restore --idempotent --workers 1``, ``--exactly-once --workers 1`` and
  ``--exactly-once --workers 2`` as subprocesses;
- with ``KBACKUP_PEER_BINARY``, the header-based peer's restore of its own backup of the same
  records (the client loop fills a source topic, without headers, that the peer backs up).

They take turns going first (``rotated``). Each ratio (of records/s, or of CPU seconds per
record) is taken per round, between two runs of that round, and the table gives the median of
the rounds with their range (min-max); rates and CPU are the median of the rounds with their
range. CPU is every thread's and worker process's (``RUSAGE_CHILDREN``); the restore's start-up
and planning are subtracted (the median of three ``--dry-run`` of the same restore), the client
loop's over its produce span only.

Every run must write exactly the backup's records: the restore's summary count
(as the backup benchmark checks the backup's), ProducerPerformance's sent
count, and the target topic's log end offsets (equal to the records without
transactions; at least the records, at most one marker per transaction and
partition more, with them). A difference stops the run.

The restore's rate is records over the run time it reports itself (planning is
not in it; the up-front SHA-256 check of every segment, topic creation,
producing, commits and the wait for commit markers are); its peak RSS is the
process's VmHWM. ProducerPerformance's rate is its own report (JVM start-up
excluded). With ``--write-docs`` the tables replace the Restore section of
docs/benchmarks.md.

With several node counts, each round runs them all on every cluster, the
clusters taking turns going first too; besides each cluster's tables, the
report gives replication's cost: per side, the ratio of its rate on the larger
cluster to its rate on the single node, taken per round. ``--write-docs`` then
writes the "Restore on three nodes" section instead.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from bench._floor_span import TWO_WORKER_SPLIT
from bench._perf import (
    cluster_heading,
    cluster_words,
    create_topic,
    node_counts_of,
    refuse_smoke_figures_in_docs,
    replace_section,
)
from bench._restore_perf import (
    REPO,
    TRANSACTION_MS,
    Measured,
    build_backup,
    client_floor,
    delete_topic,
    log_end_offsets,
    producer_performance,
    restore_cli,
    restore_producer_props,
    restore_startup_cpu,
)
from bench._stats import Spread, paired_ratios, rotated, spread
from bench.accuracy.peer import peer_backup, peer_restore
from kbackup.sandbox.kafka import local_clusters

PARTITIONS = 3
DOCS = REPO / "docs" / "benchmarks.md"
START, END = "<!-- restore:start -->", "<!-- restore:end -->"
#: The section a run on several node counts writes (the single-node Restore section stays).
NODES_START, NODES_END = "<!-- restore-nodes:start -->", "<!-- restore-nodes:end -->"
#: The restore's producer settings as ProducerPerformance's --producer-props, and those left out.
RESTORE_PROPS, LEFT_OUT = restore_producer_props()
PP_SAME_TX = "ProducerPerformance (restore's settings, transactions)"
FLOOR_NO_HEADERS = "client loop (restore's settings, no headers)"
FLOOR = "client loop (restore's settings, 5 headers)"
FLOOR_TX = "client loop (restore's settings, 5 headers, transactions)"
FLOOR_TX_2 = "client loop (restore's settings, 5 headers, transactions), 2 processes"
IDEMPOTENT_1 = "restore idempotent, 1 worker"
EXACTLY_ONCE_1 = "restore exactly-once, 1 worker"
EXACTLY_ONCE = "restore exactly-once, 2 workers"
PEER = "peer restore (OSO kafka-backup)"
#: The restore's sides (a summary's count and mode to check).
RESTORES = (IDEMPOTENT_1, EXACTLY_ONCE_1, EXACTLY_ONCE)
#: The sides that write in transactions (their topics hold commit markers too).
TRANSACTIONAL = (PP_SAME_TX, FLOOR_TX, FLOOR_TX_2, EXACTLY_ONCE_1, EXACTLY_ONCE)
#: Every side of a round, in the order of the first round (the peer's only with its binary).
SIDES = (
    PP_SAME_TX, FLOOR_NO_HEADERS, FLOOR, FLOOR_TX, FLOOR_TX_2, IDEMPOTENT_1, EXACTLY_ONCE_1, EXACTLY_ONCE,
)  # fmt: skip
#: (column title, numerator side, denominator side): ratios of records/s, taken per round.
RATIOS = (
    ("2 workers / 1 worker (exactly-once)", EXACTLY_ONCE, EXACTLY_ONCE_1),
    # What a second process gives the bare client on this machine: the ceiling of the row before.
    ("client loop + transactions, 2 processes / 1", FLOOR_TX_2, FLOOR_TX),
    ("ratio exactly-once, 2 workers / PP restore's settings + transactions", EXACTLY_ONCE, PP_SAME_TX),
    ("ratio exactly-once, 1 worker / PP restore's settings + transactions", EXACTLY_ONCE_1, PP_SAME_TX),
)
#: Ratios of records/s of wall time (start to exit) against the peer, when it runs. One worker is
#: what `auto` picks on a 2-core machine (one per two cores): issue 40's "default workers".
PEER_RATIOS = (
    ("exactly-once, 1 worker (auto here) / peer (wall)", EXACTLY_ONCE_1, PEER),
    ("exactly-once, 2 workers / peer (wall)", EXACTLY_ONCE, PEER),
)
#: (column title, restore side, client loop side): ratios of CPU seconds per record, per round.
CPU_RATIOS = (
    ("client loop, 5 headers / no headers", FLOOR, FLOOR_NO_HEADERS),
    ("idempotent, 1 worker / client loop", IDEMPOTENT_1, FLOOR),
    ("exactly-once, 1 worker / client loop + transactions", EXACTLY_ONCE_1, FLOOR_TX),
    ("exactly-once, 2 workers / client loop + transactions", EXACTLY_ONCE, FLOOR_TX),
)
#: The peer's binary (``KBACKUP_PEER_BINARY``): its restore of the same records joins every round.
PEER_BINARY = Path(os.environ["KBACKUP_PEER_BINARY"]) if os.environ.get("KBACKUP_PEER_BINARY") else None


@dataclass
class Case:
    record_size: int
    records: int
    backup_bytes: int = 0
    #: The nodes of the cluster the case ran on.
    nodes: int = 1
    #: Side -> its run of each round, in round order.
    runs: dict[str, list[Measured]] = field(default_factory=dict)
    #: The order the sides ran in, per round.
    orders: list[list[str]] = field(default_factory=list)
    #: CPU seconds of the restore's start-up and planning (the median of three dry runs).
    startup_cpu: float = 0.0
    #: The peer's backup of the same records (its storage folder), when the peer runs.
    peer_store: Path | None = None

    def rates(self, name: str) -> Spread:
        return spread([m.records_per_second for m in self.runs[name]])

    def paired(self, numerator: str, denominator: str, metric: Callable[[Measured], float]) -> Spread:
        """The median and range of the per-round ratios of two sides' ``metric``."""
        return spread(
            paired_ratios(
                [metric(m) for m in self.runs[numerator]], [metric(m) for m in self.runs[denominator]]
            )
        )

    def ratio(self, numerator: str, denominator: str) -> Spread:
        """Per-round ratios of records per second (the restore's own run time)."""
        return self.paired(numerator, denominator, lambda m: m.records_per_second)

    def cpu_ratio(self, numerator: str, denominator: str) -> Spread:
        """Per-round ratios of CPU seconds per record."""
        return self.paired(numerator, denominator, lambda m: m.cpu_per_million)

    def wall_ratio(self, numerator: str, denominator: str) -> Spread:
        """Per-round ratios of records per second of wall time (start-up included)."""
        return self.paired(numerator, denominator, lambda m: m.records / (m.wall_seconds or m.seconds))

    def peak_rss(self, name: str) -> int:
        return max(m.peak_rss_bytes for m in self.runs[name])


def check_counts(
    side: str, measured: Measured, expected: int, log_end: int, partitions: int = PARTITIONS
) -> None:
    """Stop the run if a side did not write exactly ``expected`` records (see the module's doc)."""
    if measured.records != expected:
        raise RuntimeError(f"{side} reports {measured.records:,} records, the backup holds {expected:,}")
    exactly_once = side in RESTORES and side in TRANSACTIONAL
    if exactly_once and measured.mode != "exactly-once":
        raise RuntimeError(f"{side} ran in mode {measured.mode!r}")
    transactional = side in TRANSACTIONAL
    if not transactional and log_end != expected:
        raise RuntimeError(f"{side}: the target's log end offsets add up to {log_end:,}, not {expected:,}")
    if transactional and log_end <= expected:
        raise RuntimeError(f"{side}: log end offsets {log_end:,}: no room for commit markers")
    if exactly_once and log_end > expected + measured.transactions * partitions:
        raise RuntimeError(
            f"{side}: log end offsets {log_end:,}, more than {expected:,} records and "
            f"{measured.transactions} transaction(s) x {partitions} markers"
        )


def settled_log_end(bootstrap: str, topic: str, records: int, timeout: float = 30.0) -> int:
    """The topic's log end offsets, once they are past ``records`` or ``timeout`` passed: the last
    commit markers of a transactional producer land a moment after it commits and exits."""
    deadline = time.monotonic() + timeout
    while True:
        log_end = log_end_offsets(bootstrap, topic)
        if log_end > records or time.monotonic() > deadline:
            return log_end
        time.sleep(0.5)


def run_round(case: Case, bootstrap: str, root: Path, round_: int, work: Path) -> None:
    """The runs of one round of ``case`` against the cluster at ``bootstrap``."""
    backup_id = f"bench-{case.record_size}-{case.records}"
    tag = f"{case.record_size}-{case.records}" + (f"-n{case.nodes}" if case.nodes > 1 else "")
    stamp = f"{tag}-{round_}-{int(time.time())}"
    restore = partial(
        restore_cli, root, backup_id, bootstrap, topic="bench", record_size=case.record_size,
        startup_cpu=case.startup_cpu,
    )  # fmt: skip
    floor = partial(_floor, bootstrap, case)
    runs: dict[str, tuple[str, Callable[[], Measured]]] = {
        PP_SAME_TX: (
            f"ppt-{stamp}",
            partial(_pp, bootstrap, f"ppt-{stamp}", case, PP_SAME_TX, RESTORE_PROPS, TRANSACTION_MS),
        ),
        FLOOR_NO_HEADERS: (
            f"fl0-{stamp}",
            partial(floor, f"fl0-{stamp}", FLOOR_NO_HEADERS, None, headers=False),
        ),
        FLOOR: (f"fl-{stamp}", partial(floor, f"fl-{stamp}", FLOOR, None)),
        FLOOR_TX: (f"flt-{stamp}", partial(floor, f"flt-{stamp}", FLOOR_TX, TRANSACTION_MS)),
        FLOOR_TX_2: (f"flt2-{stamp}", partial(_floor_processes, bootstrap, case, f"flt2-{stamp}")),
        IDEMPOTENT_1: (
            f"ri-{stamp}",
            partial(restore, target_topic=f"ri-{stamp}", exactly_once=False, workers=1),
        ),
        EXACTLY_ONCE_1: (
            f"re1-{stamp}",
            partial(restore, target_topic=f"re1-{stamp}", exactly_once=True, workers=1),
        ),
        EXACTLY_ONCE: (
            f"re-{stamp}",
            partial(restore, target_topic=f"re-{stamp}", exactly_once=True, workers=2),
        ),
    }
    if PEER_BINARY is not None and case.peer_store is not None:
        runs[PEER] = (
            f"peer-{stamp}",
            partial(_peer, bootstrap, case, f"peer-{stamp}", work / f"peer-{stamp}"),
        )
    order = rotated(list(runs), round_)
    case.orders.append(order)
    for name in order:
        target, run = runs[name]
        measured = run()
        log_end = (
            settled_log_end(bootstrap, target, case.records)
            if name in TRANSACTIONAL
            else log_end_offsets(bootstrap, target)
        )
        check_counts(name, measured, case.records, log_end)
        delete_topic(bootstrap, target)
        case.runs.setdefault(name, []).append(measured)
        print(
            f"  {tag:>17} round {round_}: {name:58} {measured.records_per_second:>10,.0f} rec/s "
            f"{measured.cpu_per_million:6.2f} CPU s/M  peak RSS {measured.peak_rss_bytes / 2**20:6.0f} MiB",
            flush=True,
        )


def _pp(
    bootstrap: str,
    topic: str,
    case: Case,
    name: str,
    extra: list[str] | None = None,
    transaction_ms: int | None = None,
) -> Measured:
    create_topic(bootstrap, topic, PARTITIONS)
    return producer_performance(
        bootstrap, topic, records=case.records, record_size=case.record_size, extra_props=extra,
        transaction_ms=transaction_ms, name=name,
    )  # fmt: skip


def _floor(
    bootstrap: str, case: Case, topic: str, name: str, transaction_ms: int | None, *, headers: bool = True
) -> Measured:
    create_topic(bootstrap, topic, PARTITIONS)
    return client_floor(
        bootstrap, topic, records=case.records, record_size=case.record_size, partitions=PARTITIONS,
        transaction_ms=transaction_ms, name=name, headers=headers,
    )  # fmt: skip


def _floor_processes(bootstrap: str, case: Case, topic: str) -> Measured:
    create_topic(bootstrap, topic, PARTITIONS)
    return client_floor(
        bootstrap, topic, records=case.records, record_size=case.record_size, partitions=PARTITIONS,
        transaction_ms=TRANSACTION_MS, name=FLOOR_TX_2, groups=TWO_WORKER_SPLIT,
    )  # fmt: skip


def _peer(bootstrap: str, case: Case, target_topic: str, work: Path) -> Measured:
    """The peer's restore of its backup of the same records into ``target_topic`` (no group reset)."""
    assert PEER_BINARY is not None
    assert case.peer_store is not None
    run = peer_restore(
        PEER_BINARY, bootstrap, case.peer_store, work, {_peer_source(case): target_topic}, reset_groups=False
    )
    shutil.rmtree(work, ignore_errors=True)
    return Measured(
        PEER, run.records, case.record_size, run.seconds, run.peak_rss_bytes,
        wall_seconds=run.seconds, cpu_seconds=run.cpu_seconds,
    )  # fmt: skip


def _peer_source(case: Case) -> str:
    return f"peer-src-{case.record_size}-{case.records}"


def peer_backup_of(case: Case, bootstrap: str, work: Path) -> Path:
    """The peer's backup of ``case``'s records: the same values produced into a source topic (the
    client loop, no headers, as the backup's records have none), then backed up by the peer."""
    source = _peer_source(case)
    create_topic(bootstrap, source, PARTITIONS)
    client_floor(
        bootstrap, source, records=case.records, record_size=case.record_size, partitions=PARTITIONS,
        transaction_ms=None, name="peer source", headers=False,
    )  # fmt: skip
    assert PEER_BINARY is not None
    store = work / f"peer-store-{case.record_size}-{case.records}"
    peer_backup(
        PEER_BINARY, bootstrap, [source], store, work / f"peer-backup-{source}", snapshot_groups=False
    )
    return store


def rate_cell(case: Case, name: str) -> str:
    rates = case.rates(name)
    return f"{rates.format()} rec/s ({rates.median * case.record_size / 2**20:,.1f} MiB/s)"


def report(cases: list[Case], rounds: int, seconds: float, argv: str = "") -> str:
    node_counts = sorted({case.nodes for case in cases})
    header = (
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m bench.bench_restore{argv}` on "
        f"{os.cpu_count()} CPU(s) ({platform.machine()}, {platform.system()}), "
        f"{' and '.join(cluster_words(nodes) for nodes in node_counts)}, "
        f"{PARTITIONS} partitions, acks=all everywhere, {rounds} round(s) "
        "after a warm-up, the runs of a round one after the other, which of them goes first "
        f"rotating from round to round{'' if len(node_counts) == 1 else ' (and the clusters likewise)'}; "
        f"{seconds / 60:.0f} min in all; brokers, tools and restore share "
        "the cores: expect noise."
    )
    if len(node_counts) == 1:
        return header + "\n\n" + tables(cases)
    parts = [header, replication_cost(cases, node_counts)]
    for nodes in node_counts:
        parts += [f"### {cluster_heading(nodes)}", tables([c for c in cases if c.nodes == nodes])]
    return "\n\n".join(parts)


def replication_cost(cases: list[Case], node_counts: Sequence[int]) -> str:
    """Per side, its rate on each larger cluster over its rate on the smallest, taken per round."""
    smallest = node_counts[0]
    lines = [
        f"Replication's cost: each side's records/s on the larger cluster over its records/s on "
        f"{cluster_words(smallest)}, the two runs of the same round paired: the median of the rounds "
        "and their range (below 1: slower with replication).",
        "",
        "| nodes | record size | records | " + " | ".join(SIDES) + " |",
        "|---:|---:|---:|" + "---:|" * len(SIDES),
    ]
    base = {(c.record_size, c.records): c for c in cases if c.nodes == smallest}
    for case in cases:
        if case.nodes == smallest:
            continue
        reference = base[(case.record_size, case.records)]
        cells = []
        for name in SIDES:
            ratios = paired_ratios(
                [m.records_per_second for m in case.runs[name]],
                [m.records_per_second for m in reference.runs[name]],
            )
            cells.append(spread(ratios).format(digits=2))
        lines.append(
            f"| {case.nodes} | {case.record_size} B | {case.records:,} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def sides_of(cases: list[Case]) -> list[str]:
    return [name for name in (*SIDES, PEER) if all(name in case.runs for case in cases)]


def tables(cases: list[Case]) -> str:
    """The rates, CPU, ratios and every run of ``cases`` (all on one cluster)."""
    sides = sides_of(cases)
    lines = [
        "Records per second: the median of the rounds (their range, min-max), and the median in MiB/s "
        "of payload (record size x records; 1 MiB = 2^20 bytes, the unit of the perf tools' `MB/sec`):",
        "",
        "| record size | records | backup on disk | " + " | ".join(sides) + " |",
        "|---:|---:|---:|" + "---:|" * len(sides),
    ]
    for case in cases:
        lines.append(
            f"| {case.record_size} B | {case.records:,} | {case.backup_bytes / 2**20:,.0f} MiB | "
            + " | ".join(rate_cell(case, name) for name in sides)
            + " |"
        )
    lines += [
        "",
        "CPU seconds per million records (user + system, every thread and worker process): the median "
        "of the rounds (their range). The restore's with its start-up and planning subtracted (a "
        "`--dry-run` of the same restore: Python's start, imports, manifests, plan), its workers' "
        "start-up kept; the client loop's over its produce span; ProducerPerformance's whole JVM, "
        "start-up and JIT included; the peer's whole process. Peak RSS: the highest of the rounds.",
        "",
        "| record size | records | " + " | ".join(sides) + " |",
        "|---:|---:|" + "---:|" * len(sides),
    ]
    for case in cases:
        cells = [
            f"{spread([m.cpu_per_million for m in case.runs[name]]).format(digits=1)} "
            f"({case.peak_rss(name) / 2**20:,.0f} MiB)"
            for name in sides
        ]
        lines.append(f"| {case.record_size} B | {case.records:,} | " + " | ".join(cells) + " |")
    ratios = [
        *RATIOS,
        *(PEER_RATIOS if PEER in sides else ()),
    ]
    lines += [
        "",
        "Ratios taken between the runs of one round: the median of the rounds, then their range. "
        "Records/s (above 1: the first is faster; the peer's by wall time, start to exit, on both "
        "sides):",
        "",
        "| record size | records | " + " | ".join(f"{title} | range" for title, _, _ in ratios) + " |",
        "|---:|---:|" + "---:|---|" * len(ratios),
    ]
    for case in cases:
        cells = []
        for title, numerator, denominator in ratios:
            ratio = (
                case.wall_ratio(numerator, denominator)
                if "wall" in title
                else case.ratio(numerator, denominator)
            )
            cells.append(f"{ratio.median:.2f} | {ratio.low:.2f}-{ratio.high:.2f}")
        lines.append(f"| {case.record_size} B | {case.records:,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "CPU per record, the restore's over the bare client loop's (below 1.2: the issue's target; the "
        "client loop is the same records, headers and producer settings through confluent-kafka and "
        "nothing else, `bench/_client_floor.py`); the first column is what the five origin headers "
        "cost the client itself:",
        "",
        "| record size | records | " + " | ".join(f"{title} | range" for title, _, _ in CPU_RATIOS) + " |",
        "|---:|---:|" + "---:|---|" * len(CPU_RATIOS),
    ]
    for case in cases:
        cells = []
        for _, numerator, denominator in CPU_RATIOS:
            ratio = case.cpu_ratio(numerator, denominator)
            cells.append(f"{ratio.median:.2f} | {ratio.low:.2f}-{ratio.high:.2f}")
        lines.append(f"| {case.record_size} B | {case.records:,} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "ProducerPerformance and the client loop with the restore's settings: `--producer-props "
        + " ".join(RESTORE_PROPS)
        + "`, from the restore's `producer_tuning()` (kbackup/restore/writer.py: its tuning and "
        "`restore.compression`) and the `acks=all` and "
        "idempotence every restore producer gets (kbackup/core/kafka/clients.py); the client loop "
        "takes them as they are, ProducerPerformance leaves out what has no Java "
        "equivalent (`" + "`, `".join(LEFT_OUT) + "`). The transactional ones commit every "
        f"{TRANSACTION_MS} ms (`restore.transaction_max_ms`); the restore also commits after "
        "`restore.transaction_max_records` records. Two workers: `--workers 2` (`auto` gives one per "
        f"two cores, {max(1, (os.cpu_count() or 1) // 2)} on this machine).",
        "",
        "The restore's rate is its records over the run time it reports: the up-front SHA-256 check "
        "of every segment, topic creation, the workers' start, producing, commits and the wait for "
        "commit markers are in it; start-up and planning are not (ProducerPerformance's JVM start is "
        "not in its rate either, nor the client loop's building of its records). Every restored record "
        "and every client-loop record carries five origin headers (about 150 bytes) that "
        "ProducerPerformance's records do not. Every run wrote exactly the backup's records (summary "
        "or sent count, and the target's log end offsets: the run stops otherwise).",
        "",
        "Every run (records/s, CPU s per million records), in round order; the order of each round:",
        "",
    ]
    for case in cases:
        for number, order in enumerate(case.orders):
            lines.append(f"- {case.record_size} B x {case.records:,}, round {number}: " + " -> ".join(order))
        for name in sides:
            values = ", ".join(
                f"{m.records_per_second:,.0f} ({m.cpu_per_million:.1f})" for m in case.runs[name]
            )
            lines.append(f"- {case.record_size} B x {case.records:,}, {name}: {values}")
    return "\n".join(lines)


def write_docs(text: str, several_nodes: bool = False) -> None:
    """The Restore section of docs/benchmarks.md, or with several node counts its own section."""
    if several_nodes:
        replace_section(DOCS, NODES_START, NODES_END, f"## Restore on three nodes\n\n{text}")
    else:
        replace_section(DOCS, START, END, f"## Restore\n\n{text}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="backups a tenth of the size, one round unless --rounds"
    )
    parser.add_argument(
        "--rounds", type=int, default=None, help="rounds of the five runs (default 5; --quick: 1)"
    )
    parser.add_argument(
        "--nodes",
        type=node_counts_of,
        default=[1],
        help="nodes of the cluster, or several counts (1,3) measured side by side (default 1)",
    )
    parser.add_argument("--smaller", action="store_true", help="only the smaller backup of each record size")
    parser.add_argument("--larger", action="store_true", help="only the larger backup of each record size")
    parser.add_argument("--write-docs", action="store_true", help="write the table into docs/benchmarks.md")
    parser.add_argument(
        "--work-dir", type=Path, default=None, help="where backups go (default: a temp folder)"
    )
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    scale = 10 if args.quick else 1
    rounds = args.rounds or (1 if args.quick else 5)
    argv = "".join(f" {arg}" for arg in sys.argv[1:] if arg != "--write-docs")
    smaller = [(100, 1_000_000 // scale), (1024, 250_000 // scale)]
    larger = [(100, 4_000_000 // scale), (1024, 1_000_000 // scale)]
    if args.smaller:
        sizes = smaller
    elif args.larger:
        sizes = larger
    else:
        sizes = [smaller[0], larger[0], smaller[1], larger[1]]
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="kbackup-bench-restore-"))
    root = work / "store"
    started = time.monotonic()
    try:
        backup_bytes = {size: build_bench_backup(root, work, *size) for size in sizes}
        with ExitStack() as stack:
            clusters = {
                nodes: stack.enter_context(
                    local_clusters([f"bench-{nodes}"], work / f"kafka-{nodes}", nodes=nodes)
                )[0]
                for nodes in args.nodes
            }
            for nodes, cluster in clusters.items():
                warm_up(cluster.bootstrap_servers, root, nodes, min(r for size, r in sizes if size == 1024))
            cases = [
                Case(record_size, records, backup_bytes[(record_size, records)], nodes=nodes)
                for record_size, records in sizes
                for nodes in args.nodes
            ]
            for case in cases:
                prepare_case(case, clusters[case.nodes].bootstrap_servers, root, work)
            for record_size, records in sizes:
                of_size = {c.nodes: c for c in cases if (c.record_size, c.records) == (record_size, records)}
                for round_ in range(rounds):
                    for nodes in rotated(args.nodes, round_):
                        run_round(of_size[nodes], clusters[nodes].bootstrap_servers, root, round_, work)
        text = report(cases, rounds, time.monotonic() - started, argv)
        print("\n" + text)
        if args.write_docs:
            write_docs(text, several_nodes=len(args.nodes) > 1)
            print(f"\nwritten to {DOCS}")
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


def build_bench_backup(root: Path, work: Path, record_size: int, records: int) -> int:
    """The backup ``bench-SIZE-RECORDS`` of topic ``bench``; its bytes."""
    built = time.monotonic()
    scratch = work / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    size = build_backup(
        root,
        f"bench-{record_size}-{records}",
        record_size=record_size,
        records=records,
        partitions=PARTITIONS,
        topic="bench",
        scratch=scratch,
    )
    print(
        f"backup of {records:,} x {record_size} B: {size / 2**20:,.0f} MiB "
        f"in {time.monotonic() - built:.0f}s",
        flush=True,
    )
    return size


def prepare_case(case: Case, bootstrap: str, root: Path, work: Path) -> None:
    """What a case's rounds need first: the restore's start-up CPU (the median of three dry runs,
    subtracted from each restore's CPU) and, with the peer's binary, its backup of the same records."""
    backup_id = f"bench-{case.record_size}-{case.records}"
    case.startup_cpu = statistics.median(
        restore_startup_cpu(root, backup_id, bootstrap, topic="bench") for _ in range(3)
    )
    print(f"  {backup_id}: start-up and planning {case.startup_cpu:.2f} CPU s", flush=True)
    if PEER_BINARY is not None:
        case.peer_store = peer_backup_of(case, bootstrap, work)


def warm_up(bootstrap: str, root: Path, nodes: int, records: int) -> None:
    """JIT, page cache and imports warm before anything is timed: ProducerPerformance and an
    exactly-once restore of the 1 KiB backup of ``records`` records."""
    print(f"{nodes} node(s) at {bootstrap}; warming up", flush=True)
    _pp(bootstrap, f"warm-{int(time.time())}", Case(1024, min(records, 100_000)), PP_SAME_TX, RESTORE_PROPS)
    restore_cli(
        root, f"bench-1024-{records}", bootstrap, topic="bench", target_topic=f"warm-r-{int(time.time())}",
        exactly_once=True, record_size=1024,
    )  # fmt: skip


if __name__ == "__main__":
    main()
