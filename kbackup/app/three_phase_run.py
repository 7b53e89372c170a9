"""The files of one three-phase restore, named by its run key.

A run keeps its state, its offset mapping and its reset plan in ``three_phase.state_dir`` under a
key made of the backup, the target cluster and the settings. The run itself and ``offset-reset
plan`` (which plans with the mapping a run of the same config built) both name them here.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

from kbackup.app.config import KBackupConfig


def run_key_of(config: KBackupConfig, target_cluster_id: str | None) -> str:
    """Same backup, target and settings: same key, so a re-run finds its state."""
    restore = config.restore.model_dump(mode="json")
    # A run goes on only with origin headers on, and then records them as on; unset here is that
    # run's config as read from the file (offset-reset plan looking for the run's mapping).
    if restore["include_original_offset_header"] is None:
        restore["include_original_offset_header"] = True
    identity = {
        "backup_id": config.backup_id,
        "storage": config.storage.resolved_url(),
        "target": target_cluster_id,
        "restore": restore,
        # Neither setting changes where a group lands: the rollback snapshots' folder, and the
        # confirmation of which live cluster is read (left out, a run started before it existed
        # still finds its state).
        "offset_reset": config.offset_reset.model_dump(
            mode="json", exclude={"snapshot_dir", "live_source_cluster_id"}
        ),
        "group_prefix": config.three_phase.group_prefix,
    }
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:12]
    return f"{config.backup_id}-{digest}"


@dataclass(frozen=True)
class RunFiles:
    run_key: str
    #: Each finished phase and its result (kbackup.format.three_phase_state).
    state: Path
    #: The offset mapping the mapping phase writes (when it builds one).
    mapping: Path
    #: The reset plan the reset phase writes and executes.
    reset_plan: Path
    #: The metadata plan the metadata phase writes and executes (``restore_metadata.enabled``).
    metadata_plan: Path


def run_files(config: KBackupConfig, target_cluster_id: str | None) -> RunFiles:
    run_key = run_key_of(config, target_cluster_id)
    state_dir = Path(config.three_phase.state_dir)
    return RunFiles(
        run_key=run_key,
        state=state_dir / f"{run_key}.json",
        mapping=state_dir / f"{run_key}-mapping.json",
        reset_plan=state_dir / f"{run_key}-reset-plan.json",
        metadata_plan=state_dir / f"{run_key}-metadata-plan.json",
    )


def mapping_files_of_backup(config: KBackupConfig) -> list[Path]:
    """The mappings runs of this backup wrote in ``three_phase.state_dir``, with any key (other
    flags or settings), newest first: named in a hint when the run's own is not found."""
    state_dir = Path(config.three_phase.state_dir)
    # Exactly "<backup_id>-<key digest>-mapping.json": not the files of a backup whose id starts the same.
    name = re.compile(re.escape(f"{config.backup_id}-") + r"[0-9a-f]{12}-mapping\.json")
    found = [path for path in state_dir.iterdir() if name.fullmatch(path.name)] if state_dir.is_dir() else []
    return sorted(found, key=lambda path: path.stat().st_mtime, reverse=True)
