"""``drill --nodes`` sizes the local drill's clusters: with a config file it is refused in one line."""

from __future__ import annotations

from pathlib import Path

from kbackup.cli.common import MAX_LOCAL_NODES
from kbackup.sandbox.kafka import MAX_NODES
from tests.support.cli_run import RunCli


def test_nodes_without_local_is_refused_in_one_line(cli: RunCli, tmp_path: Path) -> None:
    config = tmp_path / "drill.yaml"
    config.write_text("storage:\n  url: /tmp/nowhere\n")
    code, out, err = cli("drill", "-c", str(config), "--nodes", "3")
    assert code == 2, err
    assert "--nodes 3 goes with --local" in err
    assert not out


def test_nodes_beyond_what_the_sandbox_starts_is_a_wrong_value(cli: RunCli) -> None:
    code, _out, err = cli("drill", "--local", "--nodes", "6")
    assert code == 3, err
    assert "--nodes" in err


def test_the_clis_largest_node_count_is_the_sandboxs() -> None:
    assert MAX_LOCAL_NODES == MAX_NODES
