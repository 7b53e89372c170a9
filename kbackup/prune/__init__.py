"""The prune stage: retention policies, a plan of what stays and what goes, and its crash-safe
execution (docs/format.md, "Retention"; docs/prune.md)."""
