"""Every command that reads a dataset takes it as ``--dataset``; a bare path gets one line saying
so, not argparse's usage dump."""

from __future__ import annotations

import pytest

from coding_agent_rl.cli import main


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "rows.jsonl"],
        ["validate", "--runs", "1", "rows.jsonl"],
        ["run", "rows.jsonl", "--policy", "replay", "--out", "o"],
        ["run", "--out", "o", "--policy", "replay", "rows.jsonl"],
        ["images", "build", "rows.jsonl"],
    ],
)
def test_a_positional_dataset_gets_a_one_line_hint(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert (
        err == f"coding-agent-rl {argv[0]}: error: the dataset is an option: --dataset rows.jsonl\n"
    )


def test_an_existing_file_without_a_dataset_suffix_is_recognised(tmp_path, capsys):
    rows = tmp_path / "rows.txt"
    rows.write_text("")
    assert main(["validate", str(rows)]) == 2
    assert capsys.readouterr().err.endswith(f"--dataset {rows}\n")


def test_option_values_and_the_option_itself_are_not_hints(tmp_path, capsys):
    """``--out report.jsonl`` is --out's value; with ``--dataset`` given, argparse decides."""
    missing = tmp_path / "absent.jsonl"
    rc = main(["validate", "--dataset", str(missing), "--out", str(tmp_path / "r.jsonl")])
    err = capsys.readouterr().err
    assert rc == 2 and "the dataset is an option" not in err and str(missing) in err
    assert len(err.splitlines()) == 1
