"""docs/format.md and kbackup/format/ describe the same format."""

from __future__ import annotations

import json
import re
from pathlib import Path

from kbackup.format.encryption import ENCRYPTED_FORMAT_VERSION
from kbackup.format.manifest import Manifest, parse_manifest
from kbackup.format.schema import FORMAT_VERSION, RECORD_SCHEMA, arrow_type_name

DOC = (Path(__file__).parents[2] / "docs" / "format.md").read_text()


def test_schema_table_matches_record_schema() -> None:
    rows = re.findall(r"^\| `([a-z_]+)` \| `([^`]+)` \| (yes|no) \|", DOC, re.MULTILINE)
    documented = [(name, type_name, nullable == "yes") for name, type_name, nullable in rows]
    in_code = [(field.name, arrow_type_name(field.type), field.nullable) for field in RECORD_SCHEMA]
    assert documented == in_code


def test_doc_names_the_current_versions() -> None:
    assert f"# The kafka-backup format, versions {FORMAT_VERSION} and {ENCRYPTED_FORMAT_VERSION}" in DOC
    assert f"## Encrypted backups (format version {ENCRYPTED_FORMAT_VERSION})" in DOC
    assert RECORD_SCHEMA.metadata[b"kafka-backup.format_version"] == str(FORMAT_VERSION).encode()


def test_manifest_example_parses_and_uses_every_field() -> None:
    example = re.search(r"```json\n(.*?)\n```", DOC, re.DOTALL)
    assert example is not None
    raw = json.loads(example.group(1))
    manifest = parse_manifest(example.group(1).encode(), "docs/format.md")
    assert set(raw) == set(Manifest.model_fields)
    assert set(raw["segments"][0]) == set(type(manifest.segments[0]).model_fields)
    assert set(raw["partitions"][0]) == set(type(manifest.partitions[0]).model_fields)
    assert re.fullmatch(r"[0-9a-f]{64}", manifest.segments[0].sha256)
