"""An installed kafka-backup carries every document its help texts cite (issue 34, item 9).

The wheel is built from what the Dockerfile copies (pyproject.toml, README.md, kbackup/ with its
docs link, docs/*.md) and installed into a throwaway virtualenv without its dependencies, which
come from this interpreter's site-packages on PYTHONPATH (that adds no .pth finders, so the
project's own editable install cannot shadow the wheel); the wheel's ``kafka-backup docs TOPIC``
must print each cited page as docs/ holds it. Needs pip's cache or an index for setuptools.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

from tests.support.cli_help import cited_topics

ROOT = Path(__file__).parents[2]


def test_an_installed_wheel_prints_every_cited_document(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "kbackup", source / "kbackup", symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    (source / "docs").mkdir()
    for page in (ROOT / "docs").glob("*.md"):
        shutil.copy(page, source / "docs" / page.name)
    wheels = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(source), "-w", str(wheels)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("kafka_backup-*.whl")
    environment = tmp_path / "venv"
    venv.create(environment, with_pip=False)
    python = environment / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "-q", str(wheel)],
        check=True,
        capture_output=True,
    )
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    where = subprocess.run(
        [str(python), "-c", "import kbackup.cli.docs_cmds as d; print(d.DOCS_FOLDER)"],
        env=env, cwd=tmp_path, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    assert where.startswith(str(environment)), where
    topics = cited_topics()
    assert topics
    for topic in sorted(topics):
        printed = subprocess.run(
            [str(environment / "bin" / "kafka-backup"), "docs", topic],
            env=env, cwd=tmp_path, capture_output=True, text=True,
        )  # fmt: skip
        assert printed.returncode == 0, (topic, printed.stderr)
        assert printed.stdout == (ROOT / "docs" / f"{topic}.md").read_text(), topic
