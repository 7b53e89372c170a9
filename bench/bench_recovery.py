"""Recovery time: from "start the restore" to "every consumer group committed at its exact place".

    .venv/bin/python -m bench.bench_recovery [--quick] [--write-docs]

On the same backup, in one run and one after the other (each into fresh target topics, fresh
group names and a fresh state folder), it runs:

- ``kafka-backup restore`` alone (the floor: nothing can be recovered before the data is back);
- ``three-phase-restore`` as before (``three_phase.build_mapping: always``: restore, the Spark
  mapping, then the groups moved, then verify);
- ``three-phase-restore`` with the new default (``build_mapping: audit``: restore, the groups
  moved by the header search, verify, then the Spark mapping as the audit of their positions).

For each it reports the recovery time (wall clock from the command's start to the last group
committed: the run's wall time less the ``total_seconds - recovery_seconds`` it reports after
that point; the restore alone: its wall time), the end of the whole run (the audit's end
for the new default), the ratio of each to the restore alone, and the CPU seconds and peak RSS of
the whole process tree (the Python process and the Spark JVM it starts), sampled from /proc.

Data: ``drill --local``'s data set (a real source cluster, a real backup), and a generated backup of
1,000,000 x 1 KiB records over 6 partitions with six groups at different lags, restored as it is
and repartitioned (6 -> 4 partitions: the groups found by a search per source partition). Each
case starts with one restore that is not measured (a warm page cache and broker for every
measured run), then
``--rounds`` rounds (default 3) of the three ways, each round starting with another way and
every run after the page cache's dirty pages were written back; the table shows medians. ``--quick`` runs
smaller sizes, one round, and writes nothing into docs/.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bench._perf import process_tree, refuse_smoke_figures_in_docs, replace_section
from bench._restore_perf import letter_payloads
from kbackup.format.catalog import BackupCatalog, commit_manifest
from kbackup.format.manifest import ConsumerGroupsSnapshot, GroupOffset, GroupSnapshot, utc_now_iso
from kbackup.sandbox.kafka import LocalKafkaCluster, local_clusters
from kbackup.sandbox.synthetic_backup import write_synthetic_backup
from kbackup.storage import LocalStorage

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "benchmarks.md"
START, END = "<!-- recovery:start -->", "<!-- recovery:end -->"
TICKS = os.sysconf("SC_CLK_TCK")
#: Lags of the generated backup's groups, as fractions of each partition's records still to read.
LAGS = (0.0, 0.001, 0.01, 0.1, 0.5, 1.0)
WAYS = ("restore alone", "three-phase before (always)", "three-phase now (audit)")


@dataclass
class Run:
    """One command's figures."""

    recovery_seconds: float
    total_seconds: float
    cpu_seconds: float
    peak_rss_bytes: int


@dataclass
class Case:
    name: str
    records: int
    runs: dict[str, list[Run]] = field(default_factory=dict)

    def median(self, way: str, attribute: str) -> float:
        return float(statistics.median(float(getattr(run, attribute)) for run in self.runs[way]))


def _sample(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, resident bytes) of one process now."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/status") as status:
            rss = next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:")), 0)
    except (FileNotFoundError, ProcessLookupError, ValueError, IndexError):
        return None
    # utime and stime: fields 14 and 15 of /proc/PID/stat, the 12th and 13th after the name.
    return (int(fields[11]) + int(fields[12])) / TICKS, rss


def measured(command: list[str], cwd: Path) -> tuple[dict[str, Any], float, float, int]:
    """Run ``command`` (JSON on stdout); its output, wall seconds, CPU seconds and peak RSS of its
    process tree (each process's last CPU sample counts: a process ending between two samples
    loses at most one interval)."""
    # Dirty pages of the run before (a restore writes a GiB into the broker) are written back now,
    # not during this run: otherwise whichever way comes next pays for the one before.
    os.sync()
    started = time.monotonic()
    process = subprocess.Popen(
        command,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
    )
    cpu: dict[int, float] = {}
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.1):
            rss = 0
            for pid in process_tree(process.pid):
                found = _sample(pid)
                if found is not None:
                    cpu[pid] = max(cpu.get(pid, 0.0), found[0])
                    rss += found[1]
            peak = max(peak, rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, err = process.communicate()
    seconds = time.monotonic() - started
    done.set()
    sampler.join()
    if process.returncode != 0:
        raise RuntimeError(f"{' '.join(command[3:5])} exited {process.returncode}:\n{err.decode()[-3000:]}")
    return json.loads(out), seconds, sum(cpu.values()), peak


def write_config(
    folder: Path, target: LocalKafkaCluster, store: Path, backup_id: str, topics: dict[str, str], **extra: Any
) -> Path:
    """A config restoring ``topics`` (source -> target name) into ``target``, groups prefixed."""
    restore: dict[str, Any] = {"topic_mapping": topics}
    restore.update(extra.pop("restore", {}))
    config = {
        "backup_id": backup_id,
        "target": {"bootstrap_servers": [target.bootstrap_servers]},
        "storage": {"url": str(store)},
        "restore": restore,
        "offset_reset": {"snapshot_dir": str(folder / "snapshots")},
        "three_phase": {"state_dir": str(folder / "state"), **extra.pop("three_phase", {})},
    }
    path = folder / "config.yaml"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    return path


def run_case(
    case: Case, target: LocalKafkaCluster, store: Path, backup_id: str, topics: list[str], work: Path,
    rounds: int, restore_settings: dict[str, Any],
) -> None:  # fmt: skip
    # One restore first, not measured: the first run into a fresh broker reads the backup from a
    # cold page cache and warms the broker's JIT, which would flatter every later run.
    warm = work / f"{case.name.replace(' ', '-').replace(',', '')}-warm-up"
    config = write_config(
        warm, target, store, backup_id, {t: f"{t}-warm-{abs(hash(case.name)) % 10_000}" for t in topics},
        restore=restore_settings,
    )  # fmt: skip
    measured([sys.executable, "-m", "kbackup", "restore", "-c", str(config), "--json"], cwd=warm)
    for round_ in range(rounds):
        # Each round starts with another way, so no way always runs first (or after the same one).
        for way in WAYS[round_ % len(WAYS) :] + WAYS[: round_ % len(WAYS)]:
            slug = "".join(c if c.isalnum() else "-" for c in case.name).strip("-")
            tag = f"{slug}-{round_}-{WAYS.index(way)}"
            folder = work / tag
            mapping = {topic: f"{topic}-{tag}" for topic in topics}
            three_phase: dict[str, Any] = {"group_prefix": f"{tag}-"}
            if way != "restore alone":
                three_phase["build_mapping"] = "always" if "always" in way else "audit"
            config = write_config(
                folder, target, store, backup_id, mapping, restore=restore_settings, three_phase=three_phase
            )
            command = [sys.executable, "-m", "kbackup"]
            if way == "restore alone":
                command += ["restore", "-c", str(config), "--json"]
            else:
                command += ["three-phase-restore", "-c", str(config), "--json"]
            summary, wall, cpu, peak = measured(command, cwd=folder)
            # Wall-clock for every way (interpreter start included, as for the restore alone): the
            # run's wall time less what it reports it spent after the last group was committed.
            recovery = (
                wall
                if way == "restore alone"
                else wall - (float(summary["total_seconds"]) - float(summary["recovery_seconds"]))
            )
            if way != "restore alone" and "audit" in summary["phases"]:
                assert summary["phases"]["audit"]["disagreements"] == [], summary["phases"]["audit"]
            case.runs.setdefault(way, []).append(Run(recovery, wall, cpu, peak))
            print(f"  {case.name} round {round_}: {way}: recovery {recovery:.1f}s, end {wall:.1f}s, "
                  f"CPU {cpu:.1f}s, peak RSS {peak / 2**20:.0f} MiB", flush=True)  # fmt: skip


def generated_backup(store: Path, backup_id: str, records: int, partitions: int, scratch: Path) -> None:
    """``records`` x 1 KiB null-key records over ``partitions``, and six groups at LAGS."""
    storage = LocalStorage(store)
    payloads = letter_payloads(1024)
    now = int(time.time() * 1000)
    per_partition = records // partitions

    def generate(partition: int) -> Any:
        for i in range(per_partition):
            yield i, now - 60_000 + i // 100, payloads[(i * partitions + partition) % len(payloads)]

    manifest = write_synthetic_backup(
        storage, backup_id, topic="events", partitions=partitions, records_of=generate,
        source_cluster="bench-source", scratch_dir=scratch,
    )  # fmt: skip
    groups = [
        GroupSnapshot(
            group_id=f"lag-{lag}",
            state="Empty",
            offsets=[
                GroupOffset(topic="events", partition=p, offset=per_partition - int(lag * per_partition))
                for p in range(partitions)
            ],
        )
        for lag in LAGS
    ]
    # The synthetic writer commits no group snapshot: the same manifest again, with one.
    with_groups = manifest.model_copy(
        update={
            "consumer_groups": ConsumerGroupsSnapshot(taken_at=utc_now_iso(), groups=groups),
            "settings": {**manifest.settings, "include_offset_headers": True},
        }
    )
    storage.delete(next(info.key for info in storage.list(f"{backup_id}/manifests/")))
    commit_manifest(storage, with_groups)
    assert BackupCatalog(storage).load(backup_id).latest.consumer_groups is not None


def drill_backup(
    source: LocalKafkaCluster, store: Path, backup_id: str, records_per_partition: int
) -> list[str]:
    """``drill --local``'s data set on ``source``, backed up with the CLI; its topics."""
    from kbackup.app.drill_data import fill_source

    data = fill_source(source.connection(), records_per_partition=records_per_partition)
    topics = sorted(data.topics)
    subprocess.run(
        [sys.executable, "-m", "kbackup", "backup", "-b", source.bootstrap_servers, "-p", str(store),
         "--backup-id", backup_id, *[arg for topic in topics for arg in ("--include", topic)], "--json"],
        check=True, capture_output=True, env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
    )  # fmt: skip
    return topics


def table(cases: list[Case]) -> list[str]:
    lines = [
        "| data | records | way | recovery (s) | recovery / restore | end of run (s) | end / restore "
        "| CPU (s) | peak RSS (MiB) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for case in cases:
        floor = case.median("restore alone", "recovery_seconds")
        for way in WAYS:
            recovery = case.median(way, "recovery_seconds")
            end = case.median(way, "total_seconds")
            lines.append(
                f"| {case.name} | {case.records:,} | {way} | {recovery:.1f} | {recovery / floor:.2f} | "
                f"{end:.1f} | {end / floor:.2f} | {case.median(way, 'cpu_seconds'):.1f} | "
                f"{max(run.peak_rss_bytes for run in case.runs[way]) / 2**20:,.0f} |"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, nothing written into docs/")
    parser.add_argument("--write-docs", action="store_true", help="replace the Recovery time section")
    parser.add_argument("--rounds", type=int, default=None)
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    big = 60_000 if args.quick else 1_000_000
    rounds = args.rounds or (1 if args.quick else 3)
    started = time.monotonic()
    cases: list[Case] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-recovery-") as scratch,
        local_clusters(["source", "target"]) as (source, target),
    ):
        work = Path(scratch)
        drill_store = work / "drill-store"
        topics = drill_backup(source, drill_store, "drill", 500 if args.quick else 2_000)
        print("drill data set backed up", flush=True)
        drill_cases: tuple[tuple[str, dict[str, Any]], ...] = (("drill data", {}),)
        for name, settings in drill_cases:
            case = Case(name, BackupCatalog(LocalStorage(drill_store)).load("drill").total_records())
            run_case(case, target, drill_store, "drill", topics, work, rounds, settings)
            cases.append(case)
        big_store = work / "big-store"
        generated_backup(big_store, "big", big, 6, work)
        print(f"{big:,} x 1 KiB backed up", flush=True)
        for name, settings in (
            ("1 KiB records", {}),
            (
                "1 KiB records, repartitioned 6 -> 4",
                {"repartition": True, "target_partitions": {"events": 4}},
            ),
        ):
            case = Case(name, big)
            run_case(case, target, big_store, "big", ["events"], work, rounds, settings)
            cases.append(case)
    lines = table(cases)
    big_case = next(case for case in cases if case.name == "1 KiB records")
    ratio = big_case.median(WAYS[2], "recovery_seconds") / big_case.median(WAYS[0], "recovery_seconds")
    headline = f"recovery/restore at {big:,} records: {ratio:.2f}"
    print("\n".join([headline, *lines]))
    print(f"benchmark took {time.monotonic() - started:.0f}s")
    if args.write_docs:
        body = "\n".join(
            [
                "## Recovery time",
                "",
                f"`{headline}`",
                "",
                f"`python -m bench.bench_recovery --write-docs`, {time.strftime('%Y-%m-%d')}, one local "
                f"broker per cluster, on this machine ({os.cpu_count()} cores); medians of {rounds} "
                "round(s). *Recovery* is from the "
                "start of the command to the last group committed (the restore alone: its whole run); "
                "*end of run* includes, for the new default, the Spark mapping that audits every committed "
                "position after the groups moved. CPU and RSS are the whole process tree's (Python and "
                "the Spark JVM).",
                "",
                *lines,
            ]
        )
        replace_section(DOCS, START, END, body)


if __name__ == "__main__":
    main()
