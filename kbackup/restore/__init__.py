"""Stage 2, restore: replay a backup into a target cluster with origin headers.

What the stage offers the layers above it (the CLI's ``restore``, the three-phase restore and
the drill): :func:`prepare` loads the backup, checks the settings and the target, and plans
(a :class:`RestoreJob`); :func:`dry_run` says what a run of it would do now, changing nothing
(a :class:`DryRunReport`); :func:`run` restores it (a :class:`RestoreSummary`), in this process,
on worker processes of this machine (``restore.workers``) or in Spark tasks, stopping at a safe
point when asked; :class:`RestoreMetrics` counts what it produces and the phase its run is in.
The backup's cluster metadata (ACLs, SCRAM users, configs): :func:`plan_metadata_restore`
(a :class:`~kbackup.format.metadata_plan.MetadataPlan`), then :func:`execute_metadata_plan`
(a :class:`MetadataResult`). :func:`check_as_of` refuses a moment after what a backup holds.
"""

from kbackup.restore.metadata_restore import MetadataResult, execute_metadata_plan, plan_metadata_restore
from kbackup.restore.metrics import RESTORE_RUN_PHASES, RestoreMetrics
from kbackup.restore.plan import check_as_of
from kbackup.restore.service import DryRunReport, RestoreJob, dry_run, prepare, required_backup_id, run
from kbackup.restore.summary import RestoreSummary

__all__ = [
    "RESTORE_RUN_PHASES",
    "DryRunReport",
    "MetadataResult",
    "RestoreJob",
    "RestoreMetrics",
    "RestoreSummary",
    "check_as_of",
    "dry_run",
    "execute_metadata_plan",
    "plan_metadata_restore",
    "prepare",
    "required_backup_id",
    "run",
]
