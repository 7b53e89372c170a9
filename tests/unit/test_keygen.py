"""``kafka-backup keygen`` as docs/security.md promises it: a key file of mode 600, never written over
an existing file, and the key never printed (issue 33).

Each check is judged from the file on disk and from the bytes the test itself wrote, not from what
the command says about itself.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.errors import PreconditionError

#: What a file at the output path holds before keygen is pointed at it: not a key, and not
#: something keygen could produce by chance.
PRECIOUS = b"an operator's only copy of the backup key\n\x00\xff"


def keygen(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """A permissive umask, so that the file's mode comes from keygen, not from the shell's umask."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def key_texts(key_file: Path) -> list[str]:
    """Every way the key in ``key_file`` could show in printed text: as stored, the raw bytes in
    standard and URL-safe base64 (with and without padding), in hex (both cases), and each half of
    the base64 text (a key cut over two fields or lines)."""
    stored = key_file.read_text(encoding="utf-8").strip()
    raw = base64.b64decode(stored, validate=True)
    assert len(raw) == 32, f"{key_file} holds {len(raw)} bytes, not a 256-bit key"
    standard = base64.b64encode(raw).decode()
    urlsafe = base64.urlsafe_b64encode(raw).decode()
    texts = {
        stored,
        standard,
        standard.rstrip("="),
        urlsafe,
        urlsafe.rstrip("="),
        raw.hex(),
        raw.hex().upper(),
    }
    texts |= {standard[:22], standard[22:].rstrip("=")}
    return sorted(texts)


def assert_key_not_in(key_file: Path, *outputs: str) -> None:
    raw = base64.b64decode(key_file.read_text(encoding="utf-8").strip())
    for output in outputs:
        for text in key_texts(key_file):
            assert text not in output, f"the key ({text[:6]}...) was printed"
        assert raw.decode("latin-1") not in output, "the key's raw bytes were printed"


@pytest.mark.parametrize("as_json", [False, True])
def test_keygen_writes_a_private_key_file_and_never_prints_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    key_file = tmp_path / "backup.key"
    json_flag = ["--json"] if as_json else []
    with umask(0o000):  # keygen must make the file private itself, whatever the umask
        code, out, err = keygen(capsys, "-v", "keygen", "--output", str(key_file), *json_flag)
    assert code == 0, err
    info = key_file.lstat()
    assert stat.S_ISREG(info.st_mode)
    assert stat.S_IMODE(info.st_mode) == 0o600, oct(stat.S_IMODE(info.st_mode))
    assert info.st_uid == os.getuid()
    assert_key_not_in(key_file, out, err)
    if as_json:
        assert json.loads(out)["key_file"] == str(key_file)
    # A second key is a new random one, private too, and not printed either.
    second = tmp_path / "second.key"
    with umask(0o000):
        code, out, err = keygen(capsys, "-v", "keygen", "--output", str(second), *json_flag)
    assert code == 0, err
    assert stat.S_IMODE(second.lstat().st_mode) == 0o600
    assert key_texts(second) != key_texts(key_file)
    assert_key_not_in(second, out, err)
    assert_key_not_in(key_file, out, err)


@pytest.mark.parametrize("existing", ["other-file", "earlier-key", "symlink-to-file"])
@pytest.mark.parametrize("as_json", [False, True])
def test_keygen_never_writes_over_an_existing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], existing: str, as_json: bool
) -> None:
    """An existing file at --output keeps its bytes and its mode; the refusal is one error line
    (and a next step) naming the file, with the precondition exit code."""
    target = tmp_path / "backup.key"
    if existing == "earlier-key":
        assert keygen(capsys, "keygen", "--output", str(target))[0] == 0
    else:
        target.write_bytes(PRECIOUS)
        target.chmod(0o640)
    output = target
    if existing == "symlink-to-file":
        output = tmp_path / "link.key"
        output.symlink_to(target)
    before = target.read_bytes()
    mode_before = stat.S_IMODE(target.stat().st_mode)
    json_flag = ["--json"] if as_json else []

    code, out, err = keygen(capsys, "keygen", "--output", str(output), *json_flag)

    assert code == PreconditionError.exit_code, (out, err)
    assert target.read_bytes() == before
    assert stat.S_IMODE(target.stat().st_mode) == mode_before
    if existing == "symlink-to-file":
        assert output.is_symlink()
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        {target.name, output.name}
    )  # no key written anywhere else (a temporary file left beside it)
    lines = err.strip().splitlines()
    assert lines[0] == f"kafka-backup: error: {output} exists: keygen never overwrites a key", err
    assert len(lines) <= 2, err
    assert all(line.startswith("kafka-backup: next step: ") for line in lines[1:]), err
    if as_json:
        error = json.loads(out)["error"]
        assert (error["kind"], error["exit_code"]) == ("precondition", PreconditionError.exit_code)
    else:
        assert out == ""
    if existing == "earlier-key":
        assert_key_not_in(target, out, err)  # not even the key it refused to replace
