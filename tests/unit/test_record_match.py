"""The key lists and header values that restore filters and erasure match records by."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pyarrow as pa
import pytest
from pydantic import ValidationError

from kbackup.core.errors import ConfigError
from kbackup.format.record_match import (
    RecordMatcher,
    RecordMatchSettings,
    keyed_hash,
    parse_entry,
    read_keys_file,
)
from kbackup.format.schema import RECORD_SCHEMA


def _batch(keys: list[bytes | None], headers: list[list[tuple[str, bytes | None]]]) -> pa.RecordBatch:
    rows = len(keys)
    return pa.RecordBatch.from_pydict(
        {
            "source_cluster": ["c"] * rows,
            "topic": ["t"] * rows,
            "partition": [0] * rows,
            "offset": list(range(rows)),
            "timestamp": [0] * rows,
            "timestamp_type": [0] * rows,
            "key": keys,
            "value": [b"v"] * rows,
            "headers": [[{"key": k, "value": v} for k, v in row] for row in headers],
        },
        schema=RECORD_SCHEMA,
    )


def _matcher(**settings: object) -> RecordMatcher:
    return RecordMatcher.from_settings(RecordMatchSettings.model_validate(settings))


def test_entries_in_every_syntax() -> None:
    assert parse_entry("user-42") == (False, b"user-42")
    assert parse_entry("hex:00ff") == (False, b"\x00\xff")
    assert parse_entry("base64:AP8=") == (False, b"\x00\xff")
    assert parse_entry("text:hex:1") == (False, b"hex:1")
    digest = hashlib.sha256(b"k").hexdigest()
    assert parse_entry(f"sha256:{digest.upper()}") == (True, bytes.fromhex(digest))


@pytest.mark.parametrize("entry", ["hex:0", "base64:***", "sha256:abc", "", "text:"])
def test_a_bad_entry_is_refused_without_echoing_it(entry: str) -> None:
    with pytest.raises(ValidationError) as caught:
        RecordMatchSettings(keys=["fine", entry])
    assert "keys entry 2" in str(caught.value)


def test_keys_match_exactly_and_by_hash_and_null_keys_never() -> None:
    batch = _batch([b"a", b"b", None, b"c", b"ab"], [[]] * 5)
    matcher = _matcher(keys=["a", f"sha256:{hashlib.sha256(b'c').hexdigest()}"])
    assert matcher.mask(batch).to_pylist() == [True, False, False, True, False]
    assert matcher.key_matches(b"c")
    assert not matcher.key_matches(None)
    assert not matcher.key_matches(b"ab")


def test_header_values_match_by_name_and_value() -> None:
    batch = _batch(
        [b"1", b"2", b"3", b"4"],
        [
            [("tenant", b"acme")],
            [("other", b"acme"), ("tenant", None)],
            [],
            [("x", b"1"), ("tenant", b"beta")],
        ],
    )
    matcher = _matcher(headers={"tenant": ["acme", "beta"]})
    assert matcher.mask(batch).to_pylist() == [True, False, False, True]
    # A sliced batch (a resumed restore reads from the middle) keeps its rows' own headers.
    assert matcher.mask(batch.slice(1)).to_pylist() == [False, False, True]


def test_keys_or_headers_and_tables_of_several_batches() -> None:
    first = _batch([b"a", b"b"], [[], [("h", b"v")]])
    second = _batch([b"c", b"a"], [[("h", b"w")], []])
    matcher = _matcher(keys=["a"], headers={"h": ["v"]})
    table = pa.Table.from_batches([first, second])
    assert matcher.mask(table).to_pylist() == [True, True, False, True]
    assert matcher.mask(table.slice(0, 0)).to_pylist() == []


def test_describe_gives_counts_never_keys() -> None:
    matcher = _matcher(keys=["secret-person", f"sha256:{'0' * 64}"], headers={"tenant": ["acme"]})
    text = matcher.describe()
    assert text == "2 keys (1 as SHA-256) or 1 header value of 1 header name"
    assert "secret" not in text
    assert "acme" not in text
    assert _matcher().describe() == "nothing"
    assert _matcher().is_empty()


def test_keys_file_lines_comments_and_binary(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    path.write_bytes(b"# request 17\r\nuser-1\r\n\nhex:00\nwith space \n#not-a-comment? no: skipped\n")
    matcher = RecordMatcher.from_settings(
        RecordMatchSettings(keys=["z"], keys_file=Path("keys.txt")), base_dir=tmp_path
    )
    assert matcher.key_count == 4
    assert matcher.key_matches(b"with space ")
    assert matcher.key_matches(b"\x00")
    assert matcher.key_matches(b"z")


def test_keys_file_errors_name_the_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        read_keys_file(tmp_path / "missing.txt")
    bad = tmp_path / "bad.txt"
    bad.write_text("ok\nhex:zz\n")
    with pytest.raises(ConfigError, match=r"bad.txt, line 2: a hex: entry"):
        read_keys_file(bad)
    latin = tmp_path / "latin.txt"
    latin.write_bytes(b"caf\xe9\n")
    with pytest.raises(ConfigError, match="not UTF-8"):
        read_keys_file(latin)


def test_keyed_hash_depends_on_secret_and_key() -> None:
    one = keyed_hash(b"s1", b"k")
    assert one.startswith("hmac-sha256:")
    assert len(one) == len("hmac-sha256:") + 64
    assert one != keyed_hash(b"s2", b"k")
    assert one != keyed_hash(b"s1", b"k2")
    assert one == keyed_hash(b"s1", b"k")
