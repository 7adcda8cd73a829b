"""``run --branches B --branch-at K``: the tree spec, and one-line usage errors (exit 2) before
anything starts."""

from __future__ import annotations

import argparse

import pytest
from support.rollout_helpers import TASKS

from coding_agent_rl import cli
from coding_agent_rl.commands.run import add_arguments, tree_spec


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args(["--dataset", "x.jsonl", "--out", "o", "--policy", "replay", *argv])


def test_the_tree_spec_from_the_flags():
    assert tree_spec(_args(), "in-process") is None
    spec = tree_spec(_args("--branch-at", "3"), "in-process")
    assert (spec.branches, spec.branch_at) == (1, 3)
    spec = tree_spec(_args("--branches", "4"), "in-process")
    assert (spec.branches, spec.branch_at) == (4, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--branches", "0"], "--branches and --branch-at must be >= 1"),
        (["--branch-at", "0"], "--branches and --branch-at must be >= 1"),
        (["--branches", "2", "--agent", "native"], "not with native"),
        (["--branches", "2", "--executor", "ray"], "runs in-process"),
        (["--branches", "2", "--resume"], "without --resume"),
    ],
)
def test_bad_tree_flags_are_one_line_errors(argv, message, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(
        ["run", "--dataset", str(TASKS), "--policy", "replay", "--out", str(out), *argv]
    )
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert not out.exists()  # refused before the run folder was written
