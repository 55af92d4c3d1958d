"""`layouts --rank` at its limits: the bounded --top search, and one line past the bounds."""

from __future__ import annotations

import pytest

from areal_alloc.cli import main

MOE = ["--model", "Qwen3-30B-A3B", "--gpu", "H100-80GB"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["megatron", "720720", "--rank", "--hybrid", *MOE],
            "areal-alloc layouts: more than 5,000 megatron layouts of 720,720 GPUs to rank (the "
            "limit of a full ranking; --top K ranks more); narrow the search with --max-tp, "
            "--max-pp, --max-cp, --max-ep or --gpus-per-node",
        ),
        (
            ["megatron", "720720", "--rank", "--hybrid", "--top", "3", *MOE],
            "areal-alloc layouts: more than 10,000 megatron layouts of 720,720 GPUs to search "
            "(the limit of --rank --top); narrow the search with --max-tp, --max-pp, --max-cp, "
            "--max-ep or --gpus-per-node",
        ),
    ],
)
def test_past_the_bounds_one_line_names_the_limit(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["layouts", *args]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [message]
    assert captured.out == ""


def _rows(capsys: pytest.CaptureFixture[str], args: list[str]) -> list[str]:
    assert main(["layouts", *args]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize("gpus", ["64", "256", "1024"])
def test_top_k_is_the_head_of_the_full_ranking(
    capsys: pytest.CaptureFixture[str], gpus: str
) -> None:
    common = ["megatron", gpus, "--rank", "--gpus-per-node", "8", *MOE]
    every = _rows(capsys, common)
    top = _rows(capsys, [*common, "--top", "3"])
    # the header and the same three fastest with the same figures (columns fit the rows shown)
    assert [row.split() for row in top[:4]] == [row.split() for row in every[:4]]
    fitting = sum(1 for row in every[1:] if row.startswith("megatron:"))
    assert every[1 + fitting].startswith(f"# {fitting} of {fitting} layouts that fit, fastest ")
    assert top[4].startswith("# the 3 fastest that fit of ")
