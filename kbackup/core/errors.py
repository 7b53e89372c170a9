"""The project's error classes and the exit codes the CLI maps them to.

Every error a user can meet is a ``KBackupError``: it carries a message that
names the thing that went wrong, an optional hint that says what to do next,
whether retrying the same command can help, and the process exit code. The
table in ``docs/exit-codes.md`` is kept in step with ``EXIT_CODES`` by a test.
"""

from __future__ import annotations

from typing import ClassVar


class KBackupError(Exception):
    """Base class of every error kafka-backup reports to a user."""

    exit_code: ClassVar[int] = 1
    #: Short name shown in ``--json`` error output and in docs/exit-codes.md.
    kind: ClassVar[str] = "error"
    #: Whether running the same command again, unchanged, may succeed.
    retryable_by_default: ClassVar[bool] = False

    def __init__(self, message: str, *, hint: str | None = None, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.retryable = self.retryable_by_default if retryable is None else retryable
        #: What the command had to say besides the error (a refused plan): under ``--json`` its keys
        #: go into the one JSON object printed, beside ``error``, so stdout stays one document.
        self.json_context: dict[str, object] = {}

    def __str__(self) -> str:
        return self.message


class UsageError(KBackupError):
    """The command was called wrong: options that do not fit together, or an input it needs given
    neither by an option nor by the config file. A wrong value is a ``ConfigError``, wherever it was
    written (docs/exit-codes.md, "One code per kind of mistake")."""

    exit_code = 2
    kind = "usage"


class ConfigError(KBackupError):
    """A value that is wrong: a config file or setting that is missing, malformed or of the wrong
    type, or an option's value (named as typed)."""

    exit_code = 3
    kind = "config"


class KafkaUnreachableError(KBackupError):
    """No broker of a cluster answered within the timeout."""

    exit_code = 5
    kind = "kafka-unreachable"
    retryable_by_default = True


class KafkaOperationError(KBackupError):
    """A Kafka request failed; keeps the broker's or librdkafka's error code."""

    exit_code = 6
    kind = "kafka"

    def __init__(
        self,
        message: str,
        *,
        code: int | None = None,
        code_name: str | None = None,
        hint: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message, hint=hint, retryable=retryable)
        self.code = code
        self.code_name = code_name


class StorageError(KBackupError):
    """Object storage could not be read or written (permissions, bucket, network)."""

    exit_code = 7
    kind = "storage"


class BackupIntegrityError(KBackupError):
    """A backup is missing, corrupt, or of a format version this release does not read."""

    exit_code = 8
    kind = "backup-integrity"


class NotFoundError(KBackupError):
    """A named thing (backup id, topic, consumer group, snapshot) does not exist."""

    exit_code = 9
    kind = "not-found"


class PreconditionError(KBackupError):
    """The cluster or storage is not in the state the command needs (active group, stale plan, ...)."""

    exit_code = 10
    kind = "precondition"


class VerificationError(KBackupError):
    """A check after the work found a difference (lost records, offsets that did not apply)."""

    exit_code = 11
    kind = "verification-failed"


class RecoveryGapError(KBackupError):
    """Groups resume after a recovery gap: they had processed source records the backup does not hold."""

    exit_code = 12
    kind = "recovery-gap"


class UnverifiedError(KBackupError):
    """Work that was done but could not be checked: a group position that cannot be judged on the
    target (no committed offset, no headers), or restored records not readable with read_committed
    within the timeout (the run is resumable: running it again checks again)."""

    exit_code = 13
    kind = "unverified"


class IncompleteBackupError(KBackupError):
    """A backup ran and committed what it copied, but not everything selected is in it in full."""

    exit_code = 14
    kind = "incomplete"


class AuditDisagreementError(KBackupError):
    """The audit (the full offset mapping, built after the groups moved) disagrees with a committed
    group position."""

    exit_code = 15
    kind = "audit-disagrees"


class RecoveryPointAlert(KBackupError):
    """``status`` with --max-age or --max-lag: a backup's last committed increment is older than
    allowed, or the backup is more records behind its live source than allowed."""

    exit_code = 16
    kind = "recovery-point-alert"


class SparkJobError(KBackupError):
    """``engine: spark``: Spark gave a job up (a task failed on every attempt, the master went away)."""

    exit_code = 17
    kind = "spark-job-failed"
    retryable_by_default = True


class EncryptionKeyError(KBackupError):
    """An encrypted backup without its key: no key configured, a key that is not the backup's, a
    KMS that refuses or cannot be reached, or ``storage.encryption`` set for a backup that is not
    encrypted."""

    exit_code = 18
    kind = "encryption-key"


class WorkerDiedError(KBackupError):
    """``restore.workers`` above 1: a worker process of the local engine died (killed, out of memory)."""

    exit_code = 19
    kind = "worker-died"
    retryable_by_default = True


class InterruptedByUser(KBackupError):
    """SIGINT/SIGTERM: the command stopped cleanly at a safe point."""

    exit_code = 130
    kind = "interrupted"
    retryable_by_default = True


#: Exit code -> (kind, meaning). Source of truth for docs/exit-codes.md.
EXIT_CODES: dict[int, tuple[str, str]] = {
    0: ("ok", "The command did what it was asked."),
    1: (
        "internal",
        "An unexpected error (a bug): run the same command again with --debug (before or after the "
        "command) for the traceback, and report it with the traceback, `kafka-backup --version` and the "
        'command to the maintainers of your copy (README.md, "Reporting a problem").',
    ),
    UsageError.exit_code: (
        UsageError.kind,
        "The command was called wrong: an unknown command or option, an option without its value, a "
        "missing required option, options that cannot go together, or an input the command needs that "
        "neither an option nor the config file gives (a backup id, a cluster).",
    ),
    ConfigError.exit_code: (
        ConfigError.kind,
        "A value is wrong, wherever it was written: a config file or key (the message names file and "
        "key), or an option's value (the message names the option as typed). A config file that is "
        "missing or cannot be read is 3 as well. Also a file named on the "
        "command line that cannot be written (an --output in a folder that does not exist, through a "
        "regular file, without permission, on a full disk): the message names the file and the reason, "
        "and a plan's --output is checked before the planning starts. And a metrics setting this "
        "machine cannot serve: a port in use, an address it does not have, a textfile it cannot write "
        "(docs/observability.md).",
    ),
    KafkaUnreachableError.exit_code: (
        KafkaUnreachableError.kind,
        "No broker answered in time; the message names the bootstrap servers. Retrying may help.",
    ),
    KafkaOperationError.exit_code: (
        KafkaOperationError.kind,
        "A Kafka request failed; the message carries Kafka's error code name.",
    ),
    StorageError.exit_code: (StorageError.kind, "Object storage could not be read or written."),
    BackupIntegrityError.exit_code: (
        BackupIntegrityError.kind,
        "A backup is missing, corrupt or of an unknown format version; the message names the object. "
        "status over several backups shows and checks the readable ones first, names each unreadable "
        "one in a line, and exits 8 when no alert fires (docs/status.md).",
    ),
    NotFoundError.exit_code: (
        NotFoundError.kind,
        "A backup id, topic, group or snapshot does not exist, or the storage folder itself does not.",
    ),
    PreconditionError.exit_code: (
        PreconditionError.kind,
        "The cluster or storage is not in the needed state (active group, stale plan, id conflict).",
    ),
    VerificationError.exit_code: (
        VerificationError.kind,
        "A post-check found a difference (records lost, offsets not applied as planned), or a drill "
        "proved nothing (no group to move).",
    ),
    RecoveryGapError.exit_code: (
        RecoveryGapError.kind,
        "Groups were moved, but some resume after a recovery gap: they had processed records the backup "
        "does not hold (three-phase-restore; --accept-gap accepts it).",
    ),
    UnverifiedError.exit_code: (
        UnverifiedError.kind,
        "The work was done but could not be verified: restored records not readable with read_committed "
        "within the timeout (running again checks again), or group positions that could not be judged "
        "on the target; the message names them.",
    ),
    IncompleteBackupError.exit_code: (
        IncompleteBackupError.kind,
        "The backup committed what it copied, but something selected is not in it in full (a topic "
        "became unavailable or was deleted during the run, committed group offsets beyond the copied "
        "data); the summary's problems name it.",
    ),
    AuditDisagreementError.exit_code: (
        AuditDisagreementError.kind,
        "Groups were moved, but the audit (the full offset mapping, built after they moved) disagrees "
        "with some positions; the message names them. Roll the groups back before starting consumers.",
    ),
    RecoveryPointAlert.exit_code: (
        RecoveryPointAlert.kind,
        "status --max-age/--max-lag: a backup's last committed increment is older than --max-age, or "
        "it is more records behind the live source than --max-lag; one line per breach names the "
        "backup, the limit and by how much it is exceeded. A backup status could not read (damaged, "
        "or encrypted without its key) does not hide an alert: it is named in its own line beside "
        "the alerts, and the exit code is still 16 (docs/status.md).",
    ),
    SparkJobError.exit_code: (
        SparkJobError.kind,
        "engine: spark: Spark gave the job up (a task failed on every attempt, executors or the master "
        "were lost); nothing of the failed step was committed, and running the same command again "
        "continues (docs/scaling.md).",
    ),
    EncryptionKeyError.exit_code: (
        EncryptionKeyError.kind,
        "An encrypted backup could not be opened: no key configured (storage.encryption or "
        "--encryption-key), a key that is not the one the backup names, a KMS that refused or could "
        "not be reached (retryable), or an unencrypted backup read with encryption configured. "
        "Nothing was written to a store or a cluster (docs/security.md).",
    ),
    WorkerDiedError.exit_code: (
        WorkerDiedError.kind,
        "A worker process of a restore or a backup on several workers died (killed, out of memory); "
        "the other workers stopped (a restore's committed what they had produced). Running the same "
        "command again continues every source partition where it got to; a backup copies the "
        'increment again (docs/restore.md, docs/backup.md, "Workers").',
    ),
    InterruptedByUser.exit_code: (
        InterruptedByUser.kind,
        "Stopped by SIGINT/SIGTERM at a safe point; running the same command again continues.",
    ),
}
