"""The drill's report: a JSON document for machines and an HTML page to hand to an auditor.

The page says who (backup id, storage, both clusters with their ids, the kafka-backup version and
the digest of the configuration), when (start, end, duration, the recovery time), what (topics and
records, groups and partitions, the records the proof read back), the verdict at a glance, every
phase's time and whether it ran after the groups were committed, and draws per-group and per-phase
charts. It is one static file with no script and no external resource, so it opens anywhere and can
be archived with the drill's logs.

The JSON document is read by other tools: its fields are described in docs/runbook.md, and
``REPORT_VERSION`` changes only when a field is removed or changes its meaning (fields are added
without it, so a reader ignores those it does not know).
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr

from kbackup import __version__
from kbackup.core.errors import VerificationError
from kbackup.core.files import cannot_write, check_writable, write_file

#: The version of the JSON report's layout (docs/runbook.md, "The drill report").
REPORT_VERSION = 1

#: What stands for a secret in the text the configuration digest is taken over.
HIDDEN_VALUE = "<secret>"

#: Config maps of client and Spark properties. Any of their values may be a secret whatever its
#: key's name (a JAAS line under a custom name, an S3 key in a Spark setting), so only their keys
#: are digested.
PROPERTY_MAPS = frozenset({"properties", "producer_properties", "kafka_options", "spark_conf"})
#: Config lists of record keys and maps of header values to match (``restore.filters``): a person's
#: data that an erasure request named, so each value is hidden like a secret (their number counts).
ERASED_VALUES = frozenset({"keys", "headers"})

CONFIG_DIGEST_COVERS = (
    "SHA-256 of the effective configuration (the config file with the command's flags over it and "
    "every default filled in) as JSON with sorted keys; every secret field (SASL and key passwords, "
    "S3 credentials) and every value of a properties map (source and target properties, "
    "restore.producer_properties, mapping.kafka_options, mapping.spark_conf: only their keys count) "
    "and every key and header value of restore.filters "
    f"is replaced by {HIDDEN_VALUE}, and so is the user info of a URL; a backup id the drill "
    "named after the time is not in it"
)

#: The user info (``user:password@``) of a URL in a text: up to the last @ before the path, as a
#: password may hold an @.
_USERINFO = re.compile(r"(?<=://)[^/\s]*@")

#: Average advance of a character of the charts' 12 px sans-serif text, in em, rounded up so
#: that a layout made with it holds real text (checked in a browser by the report's test).
CHAR_EM = 0.62
FONT_PX = 12
BAR_SPACE_PX = 300
ROW_PX = 22
BAR = "#3b7dd8"
MUTED_BAR = "#a0a0a0"


@dataclass
class ClusterInfo:
    """A cluster as the report names it: never credentials, only what identifies it."""

    #: The origin id stamped on restored records (source), or None (target).
    origin_id: str | None
    #: Kafka's own cluster id.
    kafka_cluster_id: str | None
    #: Servers and protocol (``KafkaConnection.describe()``).
    servers: str
    #: Brokers in the cluster's metadata when the drill ran (a drill on one node proves less about
    #: replication than one on three); None: not read.
    brokers: int | None = None


#: What an access check answers when it can tell (kbackup.core.kafka.access); anything else is the
#: name of the error that kept it from telling.
TOLD = frozenset({"allowed", "denied"})


@dataclass(frozen=True)
class AccessOutcome:
    """One check of one principal (``drill --local --secured``), made on the source and on the
    target (its topic under the name it was restored as)."""

    principal: str
    #: The check as asked on the source (``read-topic orders``) and on the target.
    check: str
    target_check: str
    #: ``allowed``, ``denied``, or the error that kept the check from telling.
    source: str
    target: str

    @property
    def verdict(self) -> str:
        """``agrees``; ``differs``; ``unknown`` when either side could not tell (that proves nothing)."""
        if self.source not in TOLD or self.target not in TOLD:
            return "unknown"
        return "agrees" if self.source == self.target else "differs"

    def __str__(self) -> str:
        return (
            f"{self.principal} {self.check}: {self.source} on the source, "
            f"{self.target} on the target ({self.target_check})"
        )


def without_userinfo(text: str) -> str:
    """``text`` with the user info of every URL in it replaced: a password can be written there."""
    return _USERINFO.sub(f"{HIDDEN_VALUE}@", text)


def config_digest(config: BaseModel) -> str:
    """The SHA-256 (hex) of ``config`` as :data:`CONFIG_DIGEST_COVERS` describes it.

    Secrets are replaced, not left out or hashed, so that two configs that differ only in a secret
    have the same digest: a digest cannot be tried against guessed passwords."""
    text = json.dumps(_digestible(config), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _digestible(value: Any, name: str = "") -> Any:
    if isinstance(value, SecretStr):
        return HIDDEN_VALUE
    if isinstance(value, BaseModel):
        return {field: _digestible(getattr(value, field), field) for field in type(value).model_fields}
    if isinstance(value, dict):
        if name in PROPERTY_MAPS:
            return {str(key): HIDDEN_VALUE for key in value}
        if name in ERASED_VALUES:
            return {str(key): [HIDDEN_VALUE for _ in item] for key, item in value.items()}
        return {str(key): _digestible(item) for key, item in value.items()}
    if isinstance(value, list) and name in ERASED_VALUES:
        return [HIDDEN_VALUE for _ in value]
    if isinstance(value, list | tuple | set | frozenset):
        items = [_digestible(item) for item in value]
        return sorted(items, key=json.dumps) if isinstance(value, set | frozenset) else items
    if isinstance(value, str):
        return without_userinfo(value)
    return value


@dataclass
class AsOfFacts:
    """A drill as of a moment (``drill --as-of``): the moment, how it was chosen, and the reading of
    the groups it took their positions from."""

    #: The moment (UTC, to the millisecond): records stamped at or before it were restored.
    as_of: str
    #: ``given``, or how ``auto`` chose it.
    chosen: str
    #: The interval the backup read the groups at: a group may have committed that long before the
    #: moment without the positions showing it. None: the increments' snapshots only.
    precision_secs: float | None
    #: When the reading the groups' positions came from started (the latest finished by the moment).
    reading_taken_at: str
    #: When the latest reading finished by the moment started, as the drill finds it among the
    #: backup's readings itself: the positions must come from it (not an older reading, nor a later).
    latest_reading_taken_at: str | None = None
    #: The local drill's check of each group's position of the moment against its own record of
    #: the group's commits (``GroupAtMoment.to_dict``); None: not checked (real clusters).
    groups: list[dict[str, Any]] | None = None

    @property
    def wrong(self) -> list[dict[str, Any]]:
        """The checked groups not at a position they had committed by the moment."""
        return [group for group in self.groups or [] if group["verdict"] != "committed by then"]

    @property
    def problems(self) -> list[str]:
        """Why the positions of the moment are not the groups' positions then (empty: they are)."""
        found = []
        if self.latest_reading_taken_at != self.reading_taken_at:
            found.append(
                f"the positions came from the reading of {self.reading_taken_at}, but the latest reading "
                f"finished by the moment is that of {self.latest_reading_taken_at}"
            )
        for group in self.wrong:
            offsets = ", ".join(f"{key} {offset}" for key, offset in group["offsets"].items())
            found.append(f"{group['group']}: {group['verdict']} ({offsets})")
        return found

    def to_dict(self) -> dict[str, Any]:
        return {
            "as_of": self.as_of,
            "chosen": self.chosen,
            "precision_secs": self.precision_secs,
            "reading_taken_at": self.reading_taken_at,
            "latest_reading_taken_at": self.latest_reading_taken_at,
            "groups_checked": self.groups,
            "problems": self.problems,
            "passed": not self.problems,
        }

    def lines(self) -> list[str]:
        precision = (
            f"groups read every {self.precision_secs:g}s: a commit up to that long before the moment "
            "may not show"
            if self.precision_secs is not None
            else "groups read at each increment only"
        )
        lines = [
            f"as of {self.as_of} ({self.chosen}): records stamped at or before it, groups at the backup's "
            f"reading of {self.reading_taken_at} ({precision})"
        ]
        if self.groups is not None:
            lines.append(
                f"history: {len(self.groups) - len(self.wrong)} of {len(self.groups)} group(s) at a position "
                "they had committed by then, checked against the drill's own record of their commits"
            )
        lines.extend(f"  as of: {problem}" for problem in self.problems)
        return lines


#: Where a phase of the drill stands against the recovery: the drill's own backup comes before it (a
#: real recovery starts from a backup that exists), the recovery ends when the groups are committed
#: (by the reset), and the checks after it (verify, the audit's Spark mapping, the audit, the proof)
#: do not delay the consumers.
BEFORE_RECOVERY, RECOVERY, AFTER_RECOVERY = "before recovery", "recovery", "after recovery"


@dataclass
class DrillReport:
    started_at: str
    backup_id: str
    source_cluster: str
    finished_at: str = ""
    storage: str = ""
    #: The kafka-backup version that ran the drill.
    kafka_backup_version: str = __version__
    #: :func:`config_digest` of the configuration the drill ran with ("" when not known).
    config_sha256: str = ""
    #: Source topic -> the drill's copy of it on the target.
    topic_copies: dict[str, str] = field(default_factory=dict)
    source: ClusterInfo | None = None
    target: ClusterInfo | None = None
    phase_seconds: dict[str, float] = field(default_factory=dict)
    backup: dict[str, Any] = field(default_factory=dict)
    three_phase: dict[str, Any] = field(default_factory=dict)
    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    partitions: list[dict[str, Any]] = field(default_factory=list)
    skipped: int = 0
    reprocessed: int = 0
    #: Restored records the proof read back from the target (each once).
    records_read_back: int = 0
    #: Records compared with a group's position: a record counts once per group that reads its partition.
    records_compared: int = 0
    #: Why the drill proved nothing, when it did not (no group to move, no partition verified).
    unproven: str | None = None
    #: What the report's reader must know about the data (a local data set without compaction holes).
    notes: list[str] = field(default_factory=list)
    #: The access proof of a secured drill, per principal and check; None: the drill made none.
    access: list[AccessOutcome] | None = None
    #: The moment of a drill as of a time (``--as-of``); None: the backup's latest snapshot.
    as_of: AsOfFacts | None = None

    @property
    def recovery_seconds(self) -> float | None:
        """From the start of the three-phase restore until every group was committed."""
        value = self.three_phase.get("recovery_seconds")
        return None if value is None else float(value)

    def phase_parts(self) -> dict[str, str]:
        """Each phase, in the order it ran, and where it stands against the recovery."""
        names = list(self.phase_seconds)
        committed = names.index("reset") if "reset" in names else len(names)
        return {
            name: BEFORE_RECOVERY if name == "backup" else RECOVERY if index <= committed else AFTER_RECOVERY
            for index, name in enumerate(names)
        }

    @property
    def after_recovery_seconds(self) -> float:
        """The phases' seconds after every group was committed."""
        parts = self.phase_parts()
        return sum(seconds for name, seconds in self.phase_seconds.items() if parts[name] == AFTER_RECOVERY)

    @property
    def shown_storage(self) -> str:
        return without_userinfo(self.storage)

    @property
    def access_differences(self) -> list[AccessOutcome]:
        """The access checks whose outcome on the target is not the source's (or not known)."""
        return [outcome for outcome in self.access or [] if outcome.verdict != "agrees"]

    @property
    def passed(self) -> bool:
        return (
            self.skipped == 0
            and self.unproven is None
            and not self.access_differences
            and not (self.as_of is not None and self.as_of.problems)
        )

    @property
    def verdict(self) -> str:
        if self.unproven is not None:
            return f"FAILED: nothing was proven ({self.unproven})"
        if self.skipped:
            return "FAILED: records would be skipped"
        if self.access_differences:
            return "FAILED: a principal may not do on the target what it could on the source"
        if self.as_of is not None and self.as_of.problems:
            return "FAILED: the groups' positions of the moment are not theirs of then"
        return "PASSED"

    def failure(self, report_path: Path) -> VerificationError | None:
        """Why the drill failed, as the error its command exits with (11); None when it passed."""
        if self.unproven is not None:
            return VerificationError(
                f"the drill proved nothing: {self.unproven}",
                hint="drill a backup of topics that consumer groups read (drill.groups / "
                f"offset_reset.groups name them); the report is {report_path}",
            )
        if self.skipped:
            return VerificationError(
                f"the drill found {self.skipped} record(s) that groups would skip after a restore",
                hint=f"see {report_path} for the groups and partitions",
            )
        if self.access_differences:
            first = self.access_differences[0]
            return VerificationError(
                f"the drill found {len(self.access_differences)} access check(s) whose outcome on the "
                f"target is not the source's; the first: {first}",
                hint=f"see the access section of {report_path}: each principal's checks on both clusters",
            )
        if self.as_of is not None and self.as_of.problems:
            return VerificationError(
                f"the drill found the groups' positions as of {self.as_of.as_of} are not theirs of then: "
                f"{self.as_of.problems[0]}",
                hint=f"see the as_of section of {report_path}: the reading used and each group's verdict",
            )
        return None

    def access_by_principal(self) -> dict[str, list[AccessOutcome]]:
        grouped: dict[str, list[AccessOutcome]] = {}
        for outcome in self.access or []:
            grouped.setdefault(outcome.principal, []).append(outcome)
        return grouped

    def access_dict(self) -> dict[str, Any] | None:
        if self.access is None:
            return None
        return {
            "passed": not self.access_differences,
            "principals": {
                principal: [
                    {
                        "check": outcome.check,
                        "target_check": outcome.target_check,
                        "source": outcome.source,
                        "target": outcome.target,
                        "verdict": outcome.verdict,
                    }
                    for outcome in outcomes
                ]
                for principal, outcomes in self.access_by_principal().items()
            },
        }

    def access_lines(self) -> list[str]:
        """One line per principal: how many checks agree, and each that does not."""
        lines = []
        for principal, outcomes in self.access_by_principal().items():
            allowed = sum(outcome.source == "allowed" for outcome in outcomes)
            denied = sum(outcome.source == "denied" for outcome in outcomes)
            wrong = [outcome for outcome in outcomes if outcome.verdict != "agrees"]
            line = (
                f"access {principal}: {len(outcomes) - len(wrong)} of {len(outcomes)} check(s) the same "
                f"on the target as on the source (on the source: {allowed} allowed, {denied} denied)"
            )
            lines.append(line + "".join(f"; {outcome.verdict}: {outcome}" for outcome in wrong))
        return lines

    @property
    def seconds(self) -> float | None:
        if not self.finished_at:
            return None
        return (_parse_time(self.finished_at) - _parse_time(self.started_at)).total_seconds()

    def topics(self) -> list[dict[str, Any]]:
        """Each restored topic: its source name, its drill copy, and records backed up and restored."""
        restore = self.three_phase.get("phases", {}).get("restore", {})
        restored: dict[str, int] = restore.get("records_per_topic", {})
        filtered: dict[str, dict[str, int]] = restore.get("filtered_per_topic", {})
        return [
            {
                "topic": name,
                "restored_as": self.topic_copies.get(name, name),
                "records_restored": restored.get(self.topic_copies.get(name, name)),
                "records_dropped_by_filters": filtered.get(self.topic_copies.get(name, name), {}).get(
                    "dropped", 0
                ),
                "records_tombstoned_by_filters": filtered.get(self.topic_copies.get(name, name), {}).get(
                    "tombstoned", 0
                ),
            }
            for name in self.backup.get("topics", [])
        ]

    def compaction(self) -> list[dict[str, Any]]:
        """What the target's log cleaner may remove from restored compacted topics (restore's facts)."""
        found: list[dict[str, Any]] = (
            self.three_phase.get("phases", {}).get("restore", {}).get("compaction", [])
        )
        return found

    def to_dict(self) -> dict[str, Any]:
        parts = self.phase_parts()
        return {
            "report_version": REPORT_VERSION,
            "passed": self.passed,
            "kafka_backup_version": self.kafka_backup_version,
            "config_digest": {"sha256": self.config_sha256 or None, "covers": CONFIG_DIGEST_COVERS},
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "seconds": None if self.seconds is None else round(self.seconds, 2),
            "backup_id": self.backup_id,
            "storage": self.shown_storage,
            "source_cluster": self.source_cluster,
            "topics": self.topics(),
            "clusters": {
                "source": None if self.source is None else self.source.__dict__,
                "target": None if self.target is None else self.target.__dict__,
            },
            "unproven": self.unproven,
            "notes": self.notes,
            "records_skipped": self.skipped,
            "records_reprocessed": self.reprocessed,
            "records_read_back": self.records_read_back,
            "records_compared": self.records_compared,
            "phase_seconds": {name: round(value, 2) for name, value in self.phase_seconds.items()},
            "phases": [
                {"name": name, "seconds": round(value, 2), "part": parts[name]}
                for name, value in self.phase_seconds.items()
            ],
            "recovery_seconds": self.recovery_seconds,
            "after_recovery_seconds": round(self.after_recovery_seconds, 2),
            "groups": self.groups,
            "partitions": self.partitions,
            "access": self.access_dict(),
            "as_of": None if self.as_of is None else self.as_of.to_dict(),
            "backup": self.backup,
            "three_phase": self.three_phase,
        }

    def cluster_lines(self) -> list[str]:
        """The clusters' broker counts, when the drill read them."""
        counts = [
            f"{side} {info.brokers} broker(s)"
            for side, info in (("source", self.source), ("target", self.target))
            if info is not None and info.brokers is not None
        ]
        return [f"clusters: {', '.join(counts)}"] if counts else []

    def summary_lines(self) -> list[str]:
        parts = self.phase_parts()
        lines = [
            f"drill {self.verdict}: {len(self.groups)} group(s), {len(self.partitions)} partition(s), "
            f"{self.skipped} record(s) skipped, {self.reprocessed} re-read",
            f"proof: {self.records_read_back:,} restored record(s) read back, {self.records_compared:,} "
            "compared with a group's position",
            "phases: "
            + ", ".join(
                f"{name} {seconds:.1f}s" + (" (after recovery)" if parts[name] == AFTER_RECOVERY else "")
                for name, seconds in self.phase_seconds.items()
            ),
            *(
                [
                    f"recovery time: groups committed {self.recovery_seconds:.1f}s after the restore "
                    f"started; {self.after_recovery_seconds:.1f}s of checks after recovery"
                ]
                if self.recovery_seconds is not None
                else []
            ),
            f"kafka-backup {self.kafka_backup_version}, config sha256 {self.config_sha256 or 'unknown'}",
            *self.cluster_lines(),
            *(self.as_of.lines() if self.as_of is not None else []),
            *(f"note: {note}" for note in self.notes),
            *self.access_lines(),
        ]
        for group, totals in sorted(self.groups.items()):
            lines.append(
                f"  {group:<40} partitions {totals['partitions']:>3}  skipped {totals['skipped']:>6}  "
                f"re-read {totals['reprocessed']:>6}"
            )
        return lines


def _parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text)


#: How the report's errors name it: `drill --report`, or the config's `drill.report_path`.
REPORT_OUTPUT = "drill report (--report, drill.report_path)"


def _report_folder(path: Path) -> None:
    """The report's folder, made as the report has always made it (``reports/drill.json``); one
    that cannot be made (a path through a file, no permission) is the user's to fix."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if path.parent.exists() and not path.parent.is_dir():
            exc = NotADirectoryError(exc.errno, exc.strerror)  # named as the file in the way
        raise cannot_write(path, REPORT_OUTPUT, exc) from None


def check_report_writable(path: Path) -> None:
    """Refuse now a report that :func:`write_report` could not write after the drill's minutes:
    the JSON file and the HTML beside it."""
    _report_folder(path)
    check_writable(path, REPORT_OUTPUT)
    check_writable(path.with_suffix(".html"), REPORT_OUTPUT)


def write_report(report: DrillReport, path: Path) -> None:
    _report_folder(path)
    write_file(path, json.dumps(report.to_dict(), indent=2, default=str) + "\n", REPORT_OUTPUT)
    write_file(path.with_suffix(".html"), render_html(report), REPORT_OUTPUT)


def text_width(text: str, font_px: int = FONT_PX) -> float:
    """The width a chart reserves for ``text`` (pixels)."""
    return len(text) * font_px * CHAR_EM


def bar_chart(title: str, values: dict[str, float], unit: str, muted: frozenset[str] = frozenset()) -> str:
    """A horizontal bar chart as inline SVG, laid out so no label is clipped: the label column is as
    wide as the longest label, and the drawing as wide as the longest bar with its value after it.
    The bars of the ``muted`` rows are grey."""
    labels = {name: f"{value:g} {unit}" for name, value in values.items()}
    label_px = max((text_width(name) for name in values), default=0) + 12
    value_px = max((text_width(text) for text in labels.values()), default=0) + 12
    width = int(label_px + BAR_SPACE_PX + value_px + 4)
    peak = max(values.values(), default=0) or 1
    rows = []
    for index, (name, value) in enumerate(values.items()):
        y = 8 + index * ROW_PX
        length = 0 if value <= 0 else max(2, int(value / peak * BAR_SPACE_PX))
        rows.append(
            f'<text x="0" y="{y + 13}" font-size="{FONT_PX}">{html.escape(name)}</text>'
            f'<rect x="{label_px:.0f}" y="{y}" width="{length}" height="16" '
            f'fill="{MUTED_BAR if name in muted else BAR}"/>'
            f'<text x="{label_px + length + 6:.0f}" y="{y + 13}" font-size="{FONT_PX}">'
            f"{html.escape(labels[name])}</text>"
        )
    height = 16 + len(values) * ROW_PX
    return (
        f"<h2>{html.escape(title)}</h2>"
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="sans-serif">{"".join(rows)}</svg>'
    )


def _table(headings: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(text))}</th>" for text in headings)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{html.escape('-' if cell is None else str(cell))}</td>" for cell in row)
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _access_html(outcomes: list[AccessOutcome]) -> str:
    """The access proof's table: per principal and check, both outcomes and the verdict."""
    if not outcomes:
        return ""
    return "<h2>Access of the restored principals</h2>" + _table(
        ["principal", "check on the source", "outcome", "check on the target", "outcome", "verdict"],
        [
            [item.principal, item.check, item.source, item.target_check, item.target, item.verdict]
            for item in outcomes
        ],
    )


def _cluster(info: ClusterInfo | None) -> str:
    if info is None:
        return "-"
    parts = [f"Kafka cluster id {info.kafka_cluster_id or 'unknown'}", info.servers]
    if info.brokers is not None:
        parts.append(f"{info.brokers} broker(s)")
    if info.origin_id:
        parts.insert(0, f"origin id {info.origin_id}")
    return ", ".join(parts)


_STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
.verdict { display: inline-block; padding: 0.4em 1em; border-radius: 6px; color: #fff; font-size: 1.6em; }
.passed { background: #2e7d32; } .failed { background: #c62828; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.2em 1em; }
dt { font-weight: bold; }
"""


def render_html(report: DrillReport) -> str:
    verdict = "PASSED" if report.passed else "FAILED"
    seconds = report.seconds
    parts = report.phase_parts()
    after = [name for name, part in parts.items() if part == AFTER_RECOVERY]
    storage = report.shown_storage or without_userinfo(str(report.backup.get("storage", "-")))
    facts = [
        ("Verdict", f"{report.verdict}: {report.skipped} record(s) skipped, {report.reprocessed} re-read"),
        ("Backup", f"{report.backup_id} in {storage}"),
        *(("As of", line) for line in (report.as_of.lines() if report.as_of is not None else [])),
        ("Source cluster", _cluster(report.source)),
        ("Target cluster", _cluster(report.target)),
        ("Run by", f"kafka-backup {report.kafka_backup_version}"),
        ("Configuration", f"sha256 {report.config_sha256 or 'unknown'}"),
        ("The digest covers", CONFIG_DIGEST_COVERS),
        ("Started (UTC)", report.started_at),
        ("Finished (UTC)", report.finished_at or "-"),
        (
            "Duration",
            "-"
            if seconds is None
            else f"{seconds:.1f} s in all: the drill's backup, the recovery and the checks after it",
        ),
        (
            "Recovery time",
            "-"
            if report.recovery_seconds is None
            else f"{report.recovery_seconds:.1f} s from the start of the restore to every group committed",
        ),
        (
            "After recovery",
            f"{report.after_recovery_seconds:.1f} s after recovery: {', '.join(after)} "
            "(checks run after the groups were committed)"
            if after
            else "-",
        ),
        (
            "Backed up",
            f"{report.backup.get('records', 0):,} records of {len(report.backup.get('topics', []))} topic(s)",
        ),
        ("Groups", f"{len(report.groups)} group(s) on {len(report.partitions)} partition(s) proven"),
        (
            "Proof",
            f"{report.records_read_back:,} restored records read back from the target and compared with "
            f"the positions of the groups that read them ({report.records_compared:,} comparisons: a "
            "record counts once per group)",
        ),
        *(("Note", note) for note in report.notes),
    ]
    facts_html = "".join(f"<dt>{html.escape(key)}</dt><dd>{html.escape(value)}</dd>" for key, value in facts)
    topic_rows = report.topics()
    # The filters' columns only where a rule changed something: a drill without filters reads as before.
    filtered = any(
        row["records_dropped_by_filters"] or row["records_tombstoned_by_filters"] for row in topic_rows
    )
    topics = _table(
        ["source topic", "restored as", "records restored"]
        + (["dropped by filters", "tombstoned by filters"] if filtered else []),
        [
            [row["topic"], row["restored_as"], row["records_restored"]]
            + ([row["records_dropped_by_filters"], row["records_tombstoned_by_filters"]] if filtered else [])
            for row in topic_rows
        ],
    )
    groups = _table(
        ["group", "partitions", "records skipped", "records re-read"],
        [
            [group, totals["partitions"], totals["skipped"], totals["reprocessed"]]
            for group, totals in sorted(report.groups.items())
        ],
    )
    phases = _table(
        ["phase", "seconds", "part"],
        [[name, f"{value:.1f}", parts[name]] for name, value in report.phase_seconds.items()],
    )
    compaction = report.compaction()
    compaction_html = (
        "<h2>Compacted topics</h2>"
        + _table(
            ["topic", "records restored", "the target's cleaner may remove", "why"],
            [
                [row.get("topic"), row.get("records"), row.get("may_remove"), row.get("why")]
                for row in compaction
            ],
        )
        if compaction
        else ""
    )
    rereads = {group: float(totals["reprocessed"]) for group, totals in sorted(report.groups.items())}
    skips = {group: float(totals["skipped"]) for group, totals in sorted(report.groups.items())}
    # Labelled as well as greyed: the audit's Spark mapping, the longest phase of a small drill, must
    # not read as the bulk of the recovery, nor the drill's own backup as a part of it.
    labels = {name: name if part == RECOVERY else f"{name} ({part})" for name, part in parts.items()}
    times = {labels[name]: round(value, 1) for name, value in report.phase_seconds.items()}
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>kafka-backup drill {verdict}: {html.escape(report.backup_id)}</title>"
        f"<style>{_STYLE}</style></head><body>"
        f"<h1>Disaster-recovery drill</h1>"
        f"<p class='verdict {'passed' if report.passed else 'failed'}' id='verdict'>{verdict}</p>"
        f"<dl>{facts_html}</dl>"
        f"<h2>Topics</h2>{topics}"
        f"<h2>Consumer groups</h2>{groups}"
        f"<h2>Phases</h2>{phases}"
        f"{_access_html(report.access or [])}"
        f"{compaction_html}"
        + bar_chart("Records skipped per group (must be 0)", skips, "records")
        + bar_chart("Records re-read per group", rereads, "records")
        + bar_chart(
            "Time per phase (grey: outside the recovery, which ends when the groups are committed)",
            times,
            "s",
            muted=frozenset(labels[name] for name, part in parts.items() if part != RECOVERY),
        )
        + "</body></html>\n"
    )
