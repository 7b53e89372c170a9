"""The prune stage: retention policies, a plan of what stays and what goes, and its crash-safe
execution (docs/format.md, "Retention"; docs/prune.md).

What it offers:

- plan: :func:`plan_prune` applies a :class:`kbackup.prune.settings.RetentionSettings` policy to
  the backups of a store and says what stays and what goes (a :class:`PrunePlan` of
  :class:`BackupPlan`), deleting nothing.
- execute: :func:`execute_prune` carries a plan out, crash-safe (:class:`PruneResult`).
"""

from kbackup.prune.execute import PruneResult, execute_prune
from kbackup.prune.plan import BackupPlan, PrunePlan, plan_prune

__all__ = ["BackupPlan", "PrunePlan", "PruneResult", "execute_prune", "plan_prune"]
