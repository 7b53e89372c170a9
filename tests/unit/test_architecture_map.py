"""docs/architecture.md is the map of the package: every module named in its package's row, every
name a stage offers in the table of public surfaces. A module added or a surface changed without
the map fails here."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "kbackup"
MAP = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
STAGES = ["backup", "restore", "mapping", "reset", "prune", "erase"]


def _rows(heading: str) -> dict[str, str]:
    """The rows of the first table under ``heading``, by the package their first cell names."""
    section = MAP.split(heading, 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        found = re.match(r"\| `kbackup\.(\w+)` \|(.*)", line)
        if found:
            rows[found.group(1)] = found.group(2)
    return rows


def _packages() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def test_every_package_has_a_row() -> None:
    rows = _rows("## What each package owns and may import")
    assert sorted(rows) == _packages()


@pytest.mark.parametrize("package", _packages())
def test_every_module_is_named_in_its_packages_row(package: str) -> None:
    row = _rows("## What each package owns and may import")[package]
    modules = sorted(
        path.relative_to(PACKAGE / package)
        for path in (PACKAGE / package).rglob("*.py")
        if path.name != "__init__.py"
    )
    missing = [
        str(module) for module in modules if f"`{module.name}`" not in row and f"`{module.stem}`" not in row
    ]
    assert missing == [], f"docs/architecture.md does not name these modules of kbackup.{package}"


@pytest.mark.parametrize("stage", STAGES)
def test_every_name_a_stage_offers_is_in_the_surface_table(stage: str) -> None:
    offered = importlib.import_module(f"kbackup.{stage}").__all__
    row = _rows("## Each stage's public surface")[stage]
    missing = [name for name in offered if f"`{name}`" not in row]
    assert offered, f"kbackup.{stage} offers nothing in its __all__"
    assert missing == [], f"docs/architecture.md's surface of kbackup.{stage} misses these"
