"""docs/exit-codes.md must list exactly the codes the error handler uses."""

from __future__ import annotations

import re
from pathlib import Path

from kbackup.core.errors import EXIT_CODES

DOC = Path(__file__).parents[2] / "docs" / "exit-codes.md"


def test_exit_code_table_matches_code() -> None:
    rows = re.findall(r"^\|\s*(\d+)\s*\|\s*`([^`]+)`\s*\|", DOC.read_text(), re.MULTILINE)
    documented = {int(code): kind for code, kind in rows}
    assert documented == {code: kind for code, (kind, _meaning) in EXIT_CODES.items()}
