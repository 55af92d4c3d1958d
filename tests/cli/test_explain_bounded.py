"""`explain --groups N` past the text's bound: the groups left out are counted and named."""

from __future__ import annotations

import pytest

from areal_alloc.cli import main
from areal_alloc.cli.layout_text import TEXT_MAX_GROUPS
from areal_alloc.rankgroups import JSON_MAX_RANKS


def _explain(capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert main(["explain", *args]) == 0
    return capsys.readouterr().out.splitlines()


@pytest.mark.parametrize(
    ("args", "note"),
    [
        # d1024: five kinds have 1,024 groups (tp, cp, pp, tp-pp, tp-cp); 300 - 256 = 44 cut each
        (
            ["megatron:d1024", "--groups", "300"],
            "--groups 300: the text lists at most 256 groups per kind, so 220 of the groups "
            "asked for are left out; --json lists every group up to 16,384 ranks per kind",
        ),
        # a million ranks: tp, cp, pp, tp-pp and tp-cp have 1,048,576 groups of one rank
        # (5 × 1,048,320 cut); dp, dp-cp, tp-dp-cp and tp-dp one group of every rank
        (
            ["megatron:d1048576", "--groups", "1048576"],
            "--groups 1,048,576: the text lists at most 256 groups per kind, so 5,241,600 of the "
            "groups asked for are left out; --json lists every group up to 16,384 ranks per kind",
        ),
    ],
)
def test_the_text_says_how_many_groups_it_left_out(
    capsys: pytest.CaptureFixture[str], args: list[str], note: str
) -> None:
    lines = _explain(capsys, *args)
    assert lines[-1] == note
    assert sum(len(line) for line in lines) < 100_000


def test_each_cut_row_says_how_many_more(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _explain(capsys, "megatron:d1048576", "--groups", "1048576")
    tp = next(line for line in lines if line.startswith("  tp "))
    shown = " ".join(f"[{rank}]" for rank in range(TEXT_MAX_GROUPS))
    assert tp.split(None, 3)[3] == f"{shown} … (1,048,320 more)"
    dp = next(line for line in lines if line.startswith("  dp "))
    assert dp.split() == ["dp", "1048576", "1", "[0,", "1,", "2,", "3,", "…", "1048575]"]


def test_up_to_the_bound_nothing_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    lines = _explain(capsys, "megatron:d1024", "--groups", str(TEXT_MAX_GROUPS))
    assert not any(line.startswith("--groups") for line in lines)
    assert lines[-1].split()[:3] == ["tp-cp", "1", "1,024"]


def test_json_of_a_million_ranks_lists_at_most_its_bound(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    assert main(["explain", "megatron:d1048576", "--groups", "1048576", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["rank_groups"]["tp"]) == JSON_MAX_RANKS
    assert out["rank_groups"]["dp"] == []
    assert out["rank_group_counts"]["dp"] == {"size": 1_048_576, "count": 1, "omitted": 1}
    assert out["rank_group_counts"]["tp"]["omitted"] == 1_048_576 - JSON_MAX_RANKS
