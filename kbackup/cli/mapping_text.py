"""The offset mapping for people (the text table) and ``show-offset-mapping --format``.

The file formats themselves (JSON, CSV, Parquet) are :mod:`kbackup.format.mapping_file`'s.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Literal

from kbackup.core.errors import ConfigError, UsageError
from kbackup.core.files import write_file
from kbackup.format.mapping_file import (
    MAPPING_OUTPUT,
    MappingFileFormat,
    OffsetMapping,
    render_csv,
    render_json,
    write_mapping,
)

MappingFormat = Literal["text", MappingFileFormat]
FORMATS: tuple[MappingFormat, ...] = ("text", "json", "csv", "parquet")


def render_text(mapping: OffsetMapping) -> str:
    """A readable table: one line per range, then what was scanned."""
    out = io.StringIO()
    out.write(
        f"offset mapping of source cluster {mapping.source_cluster} "
        f"(created {mapping.header()['created_at']}; ends are inclusive)\n"
    )
    headings = ("source topic", "part", "source offsets", "target topic", "part", "target offsets", "records")
    rows = [
        (
            item.source_topic,
            str(item.source_partition),
            f"{item.source_start}..{item.source_end}",
            item.target_topic,
            str(item.target_partition),
            f"{item.target_start}..{item.target_end}",
            str(item.records),
        )
        for item in sorted(
            mapping.ranges,
            key=lambda r: (
                r.source_topic,
                r.source_partition,
                r.target_topic,
                r.target_partition,
                r.target_start,
            ),
        )
    ]
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(headings)]
    out.write("  ".join(h.ljust(w) for h, w in zip(headings, widths, strict=True)).rstrip() + "\n")
    for row in rows:
        out.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip() + "\n")
    if not rows:
        out.write("(no restored records of this source cluster)\n")
    out.write(f"{len(rows)} range(s), {mapping.records} record(s); scanned target partitions:\n")
    for scanned in mapping.scanned:
        out.write(
            f"  {scanned.topic}[{scanned.partition}] offsets {scanned.start_offset} to {scanned.end_offset} "
            "(end exclusive)\n"
        )
    return out.getvalue()


def render(mapping: OffsetMapping, output_format: MappingFormat) -> str:
    """The mapping as printed on standard output (parquet is binary: a UsageError)."""
    if output_format == "text":
        return render_text(mapping)
    if output_format == "json":
        return render_json(mapping)
    if output_format == "csv":
        return render_csv(mapping)
    raise UsageError("the parquet format is binary: give --output FILE")


def write_output(mapping: OffsetMapping, path: str, output_format: MappingFormat) -> int:
    """``--output FILE``: the mapping written in ``output_format`` (the text table too); its size in bytes."""
    if output_format == "text":
        data = render_text(mapping).encode("utf-8")
        write_file(Path(path), data, MAPPING_OUTPUT)
        return len(data)
    return write_mapping(mapping, path, output_format)


def parse_format(value: str | None, output: str | None) -> MappingFormat:
    """``--format``, else the output file's extension, else text (no file) or json (a file)."""
    if value is not None:
        lowered = value.lower()
        for known in FORMATS:
            if lowered == known:
                return known
        # A wrong value after an option: exit 3, as --engine's (docs/exit-codes.md).
        raise ConfigError(f"--format {value}: choose {', '.join(FORMATS[:-1])} or {FORMATS[-1]}")
    if output is not None:
        suffix = Path(output).suffix.lower().lstrip(".")
        for known in FORMATS:
            if suffix == known:
                return known
        return "json"
    return "text"
