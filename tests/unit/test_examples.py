"""Every example config in examples/ loads and validates."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup import config as config_module

EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


def test_there_are_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_config_validates(path: Path) -> None:
    cfg = config_module.load(path)
    assert cfg.mode is not None
    assert cfg.backup_id == "nightly"
