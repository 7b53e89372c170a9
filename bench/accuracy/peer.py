"""Drive the header-based peer, OSO's ``kafka-backup`` (Rust), on the same clusters as this project.

The peer is not part of this repository: the benchmark gets the path of a
binary built elsewhere (``--peer-binary``; the integration test reads
``KBACKUP_PEER_BINARY``). The binary these functions were written and tested
against was built from github.com/osodevops/kafka-backup at commit
``e5ab92234d6ebdb7acb37a2b2480ffc1c931de1d`` (2026-08-20, workspace version
0.17.4; ``kafka-backup --version`` prints ``kafka-backup 0.17.4``): the
``kafka-backup-cli`` crate, release profile, default features, with rustc
1.95.0. The optional ``gssapi`` feature (Kerberos, needs system krb5 headers)
was left off; nothing here uses it. The peer speaks Kafka's protocol itself
(the ``kafka-protocol`` crate), without librdkafka.

How the peer is driven (each step one child process, with a YAML config written
into ``work``; the peer parses JSON as YAML, so the configs are written as JSON):

- backup: ``kafka-backup backup --config backup.yaml``, a one-shot snapshot
  backup (``stop_at_current_offsets``) to a filesystem storage, with the
  peer's ``consumer_group_snapshot`` on: after copying, the same process lists
  the source's consumer groups and writes
  ``<backup_id>/consumer-groups-snapshot.json`` (every group with a committed
  offset on a backed-up topic).
- restore: ``kafka-backup restore --config restore.yaml`` with
  ``auto_consumer_groups``. The backup stored each record with its source
  offset and, by default, ``x-original-offset`` / ``x-original-timestamp``
  headers (8-byte little-endian integers), which the restored records carry
  too. While producing, the peer keeps in memory one (source offset, target
  offset) pair per record: the source offset from that header (else the
  stored offset), the target offset from its produce response. After the data
  (its "Phase 3", run by ``restore`` itself since its issue #148) it commits
  each snapshotted group on the target at ``lookup_target_offset(C)``: the
  target offset of the record whose source offset is C if there is one,
  otherwise the target offset of the nearest restored record below C plus the
  distance to C (so C at the end of a partition gives the last record's target
  offset + 1). It does not read the target's headers back.
- translate: :func:`peer_translate` reads the groups' committed offsets back
  from the target; where the restore wrote its offset report
  (``write_offset_report``) it also runs the peer's offline planner,
  ``kafka-backup offset-reset plan --format json``, and checks that the target
  holds what the plan says.

Limitations found in this open version:

- Group offsets cross clusters only through the group snapshot. Without the
  group in the offset mapping (which only the snapshot fills), the offline
  ``offset-reset plan`` plans nothing for it, and a restore's
  ``consumer_groups`` list (also ``offset-reset execute``, by its source) reads
  the group's committed offsets from the cluster it commits to, the target:
  with the source's offsets not there, a restore with ``consumer_groups`` and
  ``reset_consumer_offsets`` printed ``Partitions reset: 0`` and "Result:
  APPLIED". A non-empty ``consumer_groups`` also turns the snapshot off, so a
  restore translates all snapshotted groups or none. The snapshot is taken
  after the copy, in the backup process.
- The per-record mapping lives only in the restore process. Nothing is saved
  in the storage unless ``offset_report`` names a file (indented JSON, one
  entry per restored record); ``offset-reset plan|execute`` read it from
  ``<storage>/<backup_id>/offset-mapping.json`` only.
- The backup reads read_uncommitted and keeps control records: aborted
  transactional records and the commit/abort markers are stored and restored
  as ordinary records (a marker came back with the 4-byte key ``00 00 00 01``
  or ``00 00 00 00``). Every source offset becomes a record on the target, so
  the restored record count of a transactional topic is its offset span, not
  its committed records.
- Metrics: without ``metrics.enabled: false`` every run serves Prometheus on
  0.0.0.0:8080; the configs here turn it off.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import open_admin

#: The backup id the peer writes under (``<storage_dir>/<backup_id>/...``).
DEFAULT_BACKUP_ID = "peer"
#: Seconds a peer command may run before it is killed.
DEFAULT_TIMEOUT = 3600.0
#: Characters of the peer's output kept in an error message.
TAIL_CHARS = 3000

#: (group id, target topic, target partition) -> position (None: the peer gives no answer).
Positions = dict[tuple[str, str, int], int | None]

_RESTORED = re.compile(r"Restored (\S+):(\d+) -> (\S+):(\d+) \((\d+) records")
_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+)Z ")


@dataclass(frozen=True)
class PeerRun:
    """One peer command: its wall time, what it moved, and its footprint."""

    #: From the child's start to its exit.
    seconds: float
    #: Records the peer stored (backup: its manifest) or produced (restore: its per-partition log lines).
    records: int
    #: The child's maximum resident set (``wait4``'s ru_maxrss).
    peak_rss_bytes: int
    #: Sum of the sizes of every file under the storage folder after the run.
    stored_bytes: int
    #: User and system CPU seconds of the child, all its threads.
    cpu_seconds: float = 0.0
    #: Restore only: seconds of the group offset reset (Phase 3) inside ``seconds``, from the peer's log.
    reset_seconds: float | None = None


@dataclass(frozen=True)
class _Finished:
    seconds: float
    peak_rss_bytes: int
    cpu_seconds: float
    stdout: str


def peer_version(binary: Path) -> str:
    """What ``kafka-backup --version`` prints, e.g. ``kafka-backup 0.17.4``."""
    try:
        done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RuntimeError(f"cannot run the peer binary {binary}: {exc}") from exc
    if done.returncode != 0:
        raise RuntimeError(f"{binary} --version failed (exit {done.returncode}): {done.stderr[-TAIL_CHARS:]}")
    return done.stdout.strip()


def peer_backup(
    binary: Path,
    source_bootstrap: str,
    topics: list[str],
    storage_dir: Path,
    work: Path,
    *,
    backup_id: str = DEFAULT_BACKUP_ID,
    snapshot_groups: bool = True,
    backup_options: Mapping[str, object] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerRun:
    """Back ``topics`` up once, to their offsets at start, into ``storage_dir`` (a filesystem storage).

    With ``snapshot_groups`` the same run also saves the source's consumer group
    offsets, which :func:`peer_restore` needs to translate them.
    ``backup_options`` go into the config's ``backup`` section over the ones
    set here (the peer's defaults otherwise: zstd, 128 MiB segments).
    """
    config = {
        "mode": "backup",
        "backup_id": backup_id,
        "source": {"bootstrap_servers": [source_bootstrap], "topics": {"include": list(topics)}},
        "storage": {"backend": "filesystem", "path": str(storage_dir.resolve())},
        "metrics": {"enabled": False},
        "backup": {
            "stop_at_current_offsets": True,
            "consumer_group_snapshot": snapshot_groups,
            **(backup_options or {}),
        },
    }
    work.mkdir(parents=True, exist_ok=True)
    path = _write_config(work / "peer-backup.yaml", config)
    done = _run(binary, ["backup", "--config", str(path)], work, "backup", timeout=timeout)
    manifest = json.loads((storage_dir / backup_id / "manifest.json").read_text())
    records = sum(
        int(segment["record_count"])
        for topic in manifest["topics"]
        for partition in topic["partitions"]
        for segment in partition["segments"]
    )
    if snapshot_groups and not (storage_dir / backup_id / "consumer-groups-snapshot.json").exists():
        raise RuntimeError(
            f"peer backup wrote no consumer-groups-snapshot.json:\n{done.stdout[-TAIL_CHARS:]}"
        )
    return PeerRun(
        seconds=done.seconds,
        records=records,
        peak_rss_bytes=done.peak_rss_bytes,
        stored_bytes=stored_bytes(storage_dir),
        cpu_seconds=done.cpu_seconds,
    )


def peer_restore(
    binary: Path,
    target_bootstrap: str,
    storage_dir: Path,
    work: Path,
    topic_mapping: dict[str, str] | None,
    *,
    backup_id: str = DEFAULT_BACKUP_ID,
    reset_groups: bool = True,
    write_offset_report: bool = False,
    restore_options: Mapping[str, object] | None = None,
    timeout: float = DEFAULT_TIMEOUT,
) -> PeerRun:
    """Restore the backup into the target (topics created when missing), renaming by ``topic_mapping``.

    With ``reset_groups`` the peer also commits the snapshotted groups on the
    target after the data (its Phase 3); :attr:`PeerRun.reset_seconds` says how
    long that took. ``write_offset_report`` has the peer save its per-record
    offset mapping (and the groups' planned offsets) to
    ``<storage_dir>/<backup_id>/offset-mapping.json``, where its
    ``offset-reset`` commands look for it; it is large (about 100 bytes a
    record) and costs restore time, so it is off by default.
    """
    options: dict[str, object] = {"create_topics": True, "topic_mapping": dict(topic_mapping or {})}
    if reset_groups:
        if not (storage_dir / backup_id / "consumer-groups-snapshot.json").exists():
            raise RuntimeError(
                f"no consumer group snapshot in {storage_dir / backup_id}: the peer would reset nothing "
                "(back up with snapshot_groups=True)"
            )
        options["auto_consumer_groups"] = True
    if write_offset_report:
        options["offset_report"] = str((storage_dir / backup_id / "offset-mapping.json").resolve())
    options.update(restore_options or {})
    config = {
        "mode": "restore",
        "backup_id": backup_id,
        "target": {"bootstrap_servers": [target_bootstrap]},
        "storage": {"backend": "filesystem", "path": str(storage_dir.resolve())},
        "metrics": {"enabled": False},
        "restore": options,
    }
    work.mkdir(parents=True, exist_ok=True)
    path = _write_config(work / "peer-restore.yaml", config)
    done = _run(binary, ["restore", "--config", str(path)], work, "restore", timeout=timeout)
    records = sum(int(match.group(5)) for match in _RESTORED.finditer(done.stdout))
    return PeerRun(
        seconds=done.seconds,
        records=records,
        peak_rss_bytes=done.peak_rss_bytes,
        stored_bytes=stored_bytes(storage_dir),
        cpu_seconds=done.cpu_seconds,
        reset_seconds=_reset_seconds(done.stdout) if reset_groups else None,
    )


def peer_translate(
    binary: Path,
    target_bootstrap: str,
    groups: list[str],
    work: Path,
    *,
    storage_dir: Path | None = None,
    backup_id: str = DEFAULT_BACKUP_ID,
    expected: Iterable[tuple[str, str, int]] = (),
    timeout: float = 600.0,
) -> Positions:
    """Where the peer put each group on the target: its committed offsets there after :func:`peer_restore`.

    The peer translates inside its restore (``reset_groups``); this reads the
    result back. Keys of ``expected`` (group, target topic, target partition)
    the peer committed nothing for are None. When ``storage_dir`` holds the
    restore's offset report, the peer's own planner is run on it too
    (``offset-reset plan --format json``, offline) and every planned position
    must be the one committed on the target, else RuntimeError. Assumes the
    groups had no offsets on the target before the peer's restore.
    """
    wanted = sorted(set(groups))
    committed = open_admin(
        KafkaConnection(bootstrap_servers=[target_bootstrap]), client_id="kafka-backup-accuracy-peer"
    ).committed_offsets_of(wanted)
    positions: Positions = {key: None for key in expected}
    for group_id, offsets in committed.items():
        for (topic, partition), offset in offsets.items():
            positions[(group_id, topic, partition)] = offset
    if storage_dir is not None and (storage_dir / backup_id / "offset-mapping.json").exists():
        planned = peer_plan(binary, storage_dir, wanted, work, backup_id=backup_id, timeout=timeout)
        differing = {
            key: (value, positions.get(key)) for key, value in planned.items() if positions.get(key) != value
        }
        if differing:
            raise RuntimeError(
                f"the peer's plan and the target's committed offsets differ (plan, target): {differing}"
            )
    return positions


def peer_plan(
    binary: Path,
    storage_dir: Path,
    groups: list[str],
    work: Path,
    *,
    backup_id: str = DEFAULT_BACKUP_ID,
    timeout: float = 600.0,
) -> Positions:
    """The peer's offline reset plan from the restore's offset report (``offset-reset plan --format json``).

    Partitions the peer could not map are left out of its plan (it logs "No
    target offset mapping ... skipping"), so they are absent here.
    """
    work.mkdir(parents=True, exist_ok=True)
    done = _run(
        binary,
        ["offset-reset", "plan", "--path", str(storage_dir.resolve()), "--backup-id", backup_id,
         "--groups", ",".join(groups), "--format", "json"],
        work,
        "plan",
        timeout=timeout,
        log_level="off",
    )  # fmt: skip
    plan = json.loads(done.stdout)
    positions: Positions = {}
    for group in plan["groups"]:
        for row in group["partitions"]:
            positions[(str(group["group_id"]), str(row["topic"]), int(row["partition"]))] = int(
                row["target_offset"]
            )
    return positions


def stored_bytes(folder: Path) -> int:
    """Sum of the sizes of every file under ``folder`` (0 if it does not exist)."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def _write_config(path: Path, config: Mapping[str, Any]) -> Path:
    path.write_text(json.dumps(config, indent=2) + "\n")  # JSON is YAML: the peer's serde_yaml reads it
    return path


def _run(
    binary: Path,
    args: list[str],
    work: Path,
    name: str,
    *,
    timeout: float,
    log_level: str = "info",
) -> _Finished:
    """Run the peer to its end within ``timeout``; RuntimeError with the tail of its output if it fails.

    The peer logs to stdout (tracing) and prints errors to stderr; both go to
    files in ``work``. TMPDIR points into ``work`` (the peer's default place
    for its offset database), NO_COLOR keeps escape codes out of the log and
    RUST_LIB_BACKTRACE=0 keeps stack traces out of its error message.
    """
    out_path, err_path = work / f"peer-{name}.out", work / f"peer-{name}.err"
    env = {
        **os.environ,
        "NO_COLOR": "1",
        "RUST_LOG": log_level,
        "RUST_LIB_BACKTRACE": "0",
        "TMPDIR": str(work.resolve()),
    }
    started = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        try:
            process = subprocess.Popen([str(binary), *args], stdout=out, stderr=err, env=env, cwd=work)
        except OSError as exc:
            raise RuntimeError(f"cannot run the peer binary {binary}: {exc}") from exc
        deadline = started + timeout
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                process.kill()
                _, status, usage = os.wait4(process.pid, 0)
                process.returncode = os.waitstatus_to_exitcode(status)
                raise RuntimeError(
                    f"peer {name} did not finish within {timeout:.0f} s and was killed\n"
                    + _tail(out_path, err_path)
                )
            time.sleep(0.02)
    seconds = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"peer {name} failed (exit {process.returncode})\n" + _tail(out_path, err_path))
    return _Finished(
        seconds=seconds,
        peak_rss_bytes=int(usage.ru_maxrss) * 1024,  # Linux reports KiB
        cpu_seconds=usage.ru_utime + usage.ru_stime,
        stdout=out_path.read_text(errors="replace"),
    )


def _tail(out_path: Path, err_path: Path) -> str:
    err = err_path.read_text(errors="replace")[-TAIL_CHARS:]
    out = out_path.read_text(errors="replace")[-TAIL_CHARS:]
    return f"--- stderr (tail) ---\n{err}\n--- stdout (tail) ---\n{out}"


def _reset_seconds(log: str) -> float | None:
    """From the peer's "Applying consumer group offset reset" line to its last log line."""
    start = end = None
    for line in log.splitlines():
        match = _TIMESTAMP.match(line)
        if match is None:
            continue
        stamp = datetime.fromisoformat(match.group(1)[:26])
        if start is None and "Applying consumer group offset reset" in line:
            start = stamp
        end = stamp
    if start is None or end is None:
        return None
    return (end - start).total_seconds()
