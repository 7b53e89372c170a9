"""``--quick --write-docs`` is refused by every benchmark the runner knows, before anything runs: smoke
figures never land in docs/benchmarks.md. One rule (``bench._perf.refuse_smoke_figures_in_docs``),
called by each benchmark right after it parses its arguments."""

from __future__ import annotations

import argparse
import importlib
import runpy
import subprocess
from typing import Any

import pytest

from bench.__main__ import BENCHMARKS
from bench._perf import refuse_smoke_figures_in_docs


class WentOn(Exception):
    """The benchmark read or set an argument other than ``--quick``/``--write-docs``, or started a
    process, before refusing: it would have run."""


class Guarded:
    """A parsed namespace that lets only ``quick`` and ``write_docs`` be read."""

    def __init__(self, real: argparse.Namespace) -> None:
        object.__setattr__(self, "_real", real)

    def __getattr__(self, name: str) -> Any:
        if name in ("quick", "write_docs"):
            return getattr(self._real, name)
        raise WentOn(f"read args.{name} before refusing --quick --write-docs")

    def __setattr__(self, name: str, value: object) -> None:
        raise WentOn(f"set args.{name} before refusing --quick --write-docs")


@pytest.mark.parametrize("module", sorted(BENCHMARKS.values()))
def test_every_benchmark_refuses_to_write_smoke_figures_into_the_docs(
    module: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    parse_args = argparse.ArgumentParser.parse_args

    def guarded(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        return Guarded(parse_args(self, *args, **kwargs))

    def no_process(*args: object, **kwargs: object) -> None:
        raise WentOn(f"started a process before refusing: {args[:1]}")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", guarded)
    monkeypatch.setattr(subprocess, "Popen", no_process)
    monkeypatch.setattr("sys.argv", [module, "--quick", "--write-docs"])
    imported = importlib.import_module(module)
    # What ``python -m`` runs: a module's ``main()`` (each ends in it), a package's __main__.py.
    main = getattr(imported, "main", lambda: runpy.run_module(module, run_name="__main__", alter_sys=True))
    with pytest.raises(SystemExit) as refused:
        main()
    assert refused.value.code not in (0, None)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "--quick --write-docs refused" in err[0]
    assert "docs/benchmarks.md" in err[0]


def test_the_rule_lets_either_flag_alone_through() -> None:
    for quick, write_docs in ((True, False), (False, True), (False, False)):
        refuse_smoke_figures_in_docs(argparse.Namespace(quick=quick, write_docs=write_docs))
    with pytest.raises(SystemExit):
        refuse_smoke_figures_in_docs(argparse.Namespace(quick=True, write_docs=True))
