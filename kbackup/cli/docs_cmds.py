"""``kafka-backup docs [TOPIC]``: the project's documents, from the installed package.

The help texts send readers to ``kafka-backup docs <topic>``; docs/*.md ships inside the package as
``kbackup/docs`` (a link to docs/ in the source tree, package data in a wheel: pyproject.toml), so a
pip-installed CLI or the container image prints the same pages as the repository shows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kbackup.core.errors import NotFoundError

#: docs/*.md of the source tree (through the kbackup/docs link) or of an installed package.
DOCS_FOLDER = Path(__file__).resolve().parents[1] / "docs"


def topics() -> dict[str, Path]:
    """Each document by its topic, the file name without ``.md``."""
    return {path.stem: path for path in sorted(DOCS_FOLDER.glob("*.md"))}


def topic_name(text: str) -> str:
    """The topic a reader may type in any of the ways a text cites it: ``configuration``,
    ``configuration.md``, ``docs/configuration.md`` or ``docs/security.md#client-side-encryption``."""
    name = text.strip().partition("#")[0].removeprefix("docs/")
    return name.removesuffix(".md")


def _title(path: Path) -> str:
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return ""


def docs(
    topic: Annotated[
        str | None,
        # Said in the docstring: typer would print the argument's Python type beside it.
        typer.Argument(metavar="TOPIC", hidden=True, show_default=False),
    ] = None,
) -> None:
    """Print a document of the project (docs/TOPIC.md), or list the topics.

    TOPIC is a document's name, e.g. configuration or runbook; without it, the list. The same
    pages as the repository's docs/ folder, carried by the installed package.

    \b
    Example:
      kafka-backup docs
      kafka-backup docs runbook
    """
    found = topics()
    if topic is None:
        width = max((len(name) for name in found), default=0)
        for name, path in found.items():
            typer.echo(f"{name:<{width}}  {_title(path)}")
        typer.echo("print one with: kafka-backup docs TOPIC")
        return
    name = topic_name(topic)
    if name not in found:
        raise NotFoundError(
            f"no document {topic!r}",
            hint=f"the topics are: {', '.join(found)} ('kafka-backup docs' lists them)",
        )
    typer.echo(found[name].read_text(encoding="utf-8"), nl=False)
