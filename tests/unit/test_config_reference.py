"""docs/configuration.md is what the config models say about themselves."""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel

from kbackup.app.config import KBackupConfig
from kbackup.cli.config_reference import render_config_reference

DOC = Path(__file__).parents[2] / "docs" / "configuration.md"


def _sections(model: type[BaseModel], path: str, found: dict[str, type[BaseModel]]) -> None:
    found[path] = model
    for name, field in model.model_fields.items():
        stack = [field.annotation]
        while stack:
            annotation = stack.pop()
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                _sections(annotation, f"{path}.{name}" if path else name, found)
            stack.extend(typing.get_args(annotation))


def test_configuration_reference_is_current() -> None:
    assert DOC.read_text() == render_config_reference(), (
        "docs/configuration.md is stale: run `make docs` "
        "(python -m kbackup.cli.config_reference > docs/configuration.md)"
    )


def test_every_key_has_a_description_and_a_row() -> None:
    sections: dict[str, type[BaseModel]] = {}
    _sections(KBackupConfig, "", sections)
    text = render_config_reference()
    undocumented = [
        f"{path}.{name}" if path else name
        for path, model in sections.items()
        for name, field in model.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not undocumented, f"config keys without a description: {undocumented}"
    for model in sections.values():
        for name in model.model_fields:
            assert f"| `{name}` |" in text
    # Every section the loader accepts has its own table (sections shared by source and target once).
    for heading in ("`source`", "`source.security`", "`source.topics`", "`target`", "`storage`", "`backup`",
                    "`restore`", "`mapping`", "`offset_reset`", "`three_phase`", "`drill`"):  # fmt: skip
        assert f"## {heading}\n" in text


def _row(text: str, key: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| `{key}` |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


def test_rows_show_the_models_defaults_and_types() -> None:
    text = render_config_reference()
    defaults = KBackupConfig()
    _, kind, default, _ = _row(text, "segment_max_bytes")
    assert (kind, default) == ("integer (>= 1024)", f"`{defaults.backup.segment_max_bytes}` (128 MiB)")
    assert _row(text, "spark_master")[2] == f'`"{defaults.mapping.spark_master}"`'
    assert _row(text, "bootstrap_servers")[1:3] == ["list of string (at least 1)", "required"]
    assert _row(text, "sasl_password")[1:3] == ["string, *secret*", "unset"]
    assert _row(text, "isolation_level")[1] == '`"read_committed"` \\| `"read_uncommitted"`'
