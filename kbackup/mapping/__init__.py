"""Stage 3, mapping: a Spark job that turns restored records' origin headers into offset ranges.

:func:`build_offset_mapping` scans target topics into an
:class:`kbackup.format.mapping_file.OffsetMapping` (the file format, its readers and writers, and
the position look-ups live in ``kbackup.format.mapping_file``, below every stage).
"""

from kbackup.mapping.build import build_offset_mapping, plan_scan

__all__ = ["build_offset_mapping", "plan_scan"]
