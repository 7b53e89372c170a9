"""``three-phase-restore`` and ``drill``."""

from __future__ import annotations

from typing import Annotated

import typer

from kbackup.cli.common import ConfigOption, JsonOption, load_config, not_built_yet


def three_phase_restore(config: ConfigOption = None, as_json: JsonOption = False) -> None:
    """Restore data, build the offset mapping, and move every consumer group, in one resumable run."""
    load_config(config)
    raise not_built_yet("three-phase-restore")


def drill(
    config: ConfigOption = None,
    local: Annotated[
        bool, typer.Option("--local", help="Start two throwaway local clusters and drill on realistic data.")
    ] = False,
    report: Annotated[
        str | None, typer.Option("--report", help="Where to write the drill report (JSON).")
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Disaster-recovery drill: back up, restore, map, reset, then prove no consumer skips a record."""
    load_config(config)
    raise not_built_yet("drill")
