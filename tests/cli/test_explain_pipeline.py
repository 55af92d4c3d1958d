"""``explain SPEC --model M``'s layers per pipeline rank (text and ``--json``): the
reference's parameter-balanced split for its Megatron engine, the archon engine's own
(two virtual stages per rank by default), nothing for p = 1 or without a model, a huge p
cut and counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from areal_alloc.catalogue import MODELS
from areal_alloc.cli.memory_text import pipeline_lines
from areal_alloc.estimate.pipeline_split import (
    LISTED_RANK_STAGES,
    LISTED_RANKS,
    LISTED_STAGES,
    even_split,
    reference_split,
)
from tests.conftest import MainCli

QWEN3_8B = MODELS["qwen/qwen3-8b"]

#: The section's lines. Qwen3-8B p4: the reference's split is 7, 11, 11, 7 (the table of
#: tests/estimate/test_pipeline_split.py, checked there against the reference's own programme;
#: 7 + 11 + 11 + 7 = 36 layers); archon takes its generate_llm_fqn_per_model_part split
#: over its default Interleaved1F1B's 2 virtual stages per rank: 36 + 1 (embedding) + 1
#: (output) = 38 effective layers over 8 stages, 38 = 8 × 4 + 6, so stages 0-5 get 5 and
#: 6-7 get 4, less the embedding's 1 on stage 0 and the output's 1 on stage 7: 4, 5, 5, 5,
#: 5, 5, 4, 3; rank r holds stages r and r + 4: 4+5, 5+5, 5+4, 5+3.
SECTIONS = [
    (
        ["megatron:d2p4t2"],
        [
            "pipeline stages (the reference's parameter-balanced split):",
            "  rank 0: 7 of 36 layers + embedding",
            "  rank 1: 11 of 36 layers",
            "  rank 2: 11 of 36 layers",
            "  rank 3: 7 of 36 layers + output layer",
        ],
    ),
    (
        ["archon:d2p4t2"],
        [
            "pipeline stages (the archon engine's generate_llm_fqn_per_model_part split, "
            "embedding and output counted as a layer each; virtual stage i runs on rank i "
            "mod p):",
            "  rank 0: 9 of 36 layers (virtual stages 0, 4: 4+5) + embedding",
            "  rank 1: 10 of 36 layers (virtual stages 1, 5: 5+5)",
            "  rank 2: 9 of 36 layers (virtual stages 2, 6: 5+4)",
            "  rank 3: 8 of 36 layers (virtual stages 3, 7: 5+3) + output layer",
        ],
    ),
]


def _section(out: str) -> list[str]:
    """The pipeline section of explain's text: its header to the next blank line."""
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("pipeline stages (")]
    if not starts:
        return []
    (start,) = starts
    end = lines.index("", start) if "" in lines[start:] else len(lines)
    return lines[start:end]


@pytest.mark.parametrize(("args", "expected"), SECTIONS)
def test_the_section_after_the_rank_groups(
    args: list[str], expected: list[str], main_cli: MainCli
) -> None:
    ran = main_cli("explain", *args, "--model", "Qwen3-8B", "--gpu", "H100-80GB")
    assert ran.returncode == 0, ran.stderr
    assert _section(ran.stdout) == expected
    lines = ran.stdout.splitlines()
    # after the rank-group table, before the memory estimate
    assert lines.index("  tp-cp     2     8      [0, 1] [2, 3] [4, 5] … (5 more)") < lines.index(
        expected[0]
    )
    assert lines.index(expected[0]) < next(
        i for i, line in enumerate(lines) if line.startswith("memory per GPU")
    )


@pytest.mark.parametrize(
    "args",
    [
        ["megatron:d2p4t2"],  # no model: no architecture, no split (as no memory)
        ["megatron:d8t2", "--model", "Qwen3-8B"],  # p = 1
        ["fsdp:d8", "--model", "Qwen3-8B"],
        ["sglang:d2t4", "--model", "Qwen3-8B"],  # inference
    ],
)
def test_no_section_without_a_split(args: list[str], main_cli: MainCli) -> None:
    ran = main_cli("explain", *args)
    assert ran.returncode == 0, ran.stderr
    assert _section(ran.stdout) == []
    explained = json.loads(main_cli("explain", *args, "--json").stdout)
    assert explained["pipeline_split"] is None


def test_the_json_split(main_cli: MainCli) -> None:
    ran = main_cli("explain", "megatron:d2p4t2", "--model", "Qwen3-8B", "--json")
    assert ran.returncode == 0, ran.stderr
    split = json.loads(ran.stdout)["pipeline_split"]

    def rank(r: int, layers: int) -> dict[str, Any]:
        return {
            "rank": r,
            "layers": layers,
            "stages": [r],
            "stage_layers": [layers],
            "stages_omitted": 0,
            "embedding": r == 0,
            "output": r == 3,
        }

    assert split == {
        "rule": "the reference's parameter-balanced split",
        "pp": 4,
        "vpp": 1,
        "layers": 36,
        "stage_layers": [7, 11, 11, 7],
        "stage_layers_omitted": 0,
        "ranks": [rank(0, 7), rank(1, 11), rank(2, 11), rank(3, 7)],
        "ranks_omitted": 0,
    }


def test_virtual_stages_per_rank() -> None:
    # Qwen3-8B p8 vpp4 (tests/estimate/test_pipeline_split.py: stage 0 holds none, stages 1–27
    # one layer each, 28–30 three, 31 none): rank r runs stages r, r+8, r+16, r+24, so
    # rank 0 holds 0+1+1+1 = 3, rank 4 holds 1+1+1+3 = 6 and rank 7 holds 1+1+1+0 = 3
    split = reference_split(QWEN3_8B.architecture, 8, 4)
    lines = pipeline_lines(split)
    assert lines[0] == (
        "pipeline stages (the reference's parameter-balanced split; "
        "virtual stage i runs on rank i mod p):"
    )
    assert lines[1] == "  rank 0: 3 of 36 layers (virtual stages 0, 8, 16, 24: 0+1+1+1) + embedding"
    assert lines[5] == "  rank 4: 6 of 36 layers (virtual stages 4, 12, 20, 28: 1+1+1+3)"
    assert lines[8] == (
        "  rank 7: 3 of 36 layers (virtual stages 7, 15, 23, 31: 1+1+1+0) + output layer"
    )
    assert [r["layers"] for r in split.to_dict()["ranks"]] == [3, 4, 4, 4, 6, 6, 6, 3]
    assert split.to_dict()["ranks"][4]["stage_layers"] == [1, 1, 1, 3]


def test_many_virtual_stages_per_rank_are_cut() -> None:
    # 2 ranks of 40 virtual stages of one layer each (80 layers, megatron-core's even split)
    split = even_split(80, 2, 40)
    line = pipeline_lines(split)[1]
    shown = ", ".join(str(2 * i) for i in range(LISTED_RANK_STAGES))
    plus = "+".join(["1"] * LISTED_RANK_STAGES)
    assert line == (
        f"  rank 0: 40 of 80 layers (virtual stages {shown}, … (24 more): {plus}+…) + embedding"
    )
    rank = split.to_dict()["ranks"][0]
    assert (len(rank["stages"]), rank["stages_omitted"]) == (LISTED_RANK_STAGES, 40 - 16)


@pytest.fixture
def deep_model(tmp_path: Path) -> Path:
    """Qwen3-8B's config.json with 4,096 layers: 2,048 pipeline ranks of 2 layers."""
    path = tmp_path / "deep" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({**QWEN3_8B.config, "num_hidden_layers": 4096}))
    return path


def test_a_huge_p_is_cut_and_counted(deep_model: Path, main_cli: MainCli) -> None:
    ran = main_cli("explain", "megatron:p2048", "--model", str(deep_model))
    assert ran.returncode == 0, ran.stderr
    section = _section(ran.stdout)
    # beyond 512 stages megatron-core's even split: 4,096 / 2,048 = 2 layers a rank; the
    # first 31 ranks, the 2,048 − 32 = 2,016 left out, and the last
    assert section[0].startswith("pipeline stages (megatron-core's even split (")
    assert section[1] == "  rank 0: 2 of 4,096 layers + embedding"
    assert section[2:31] == [f"  rank {r}: 2 of 4,096 layers" for r in range(1, 30)]
    assert section[-2:] == ["  … (2,016 more)", "  rank 2047: 2 of 4,096 layers + output layer"]
    assert len(section) == 1 + LISTED_RANKS + 1
    out = main_cli("explain", "megatron:p2048", "--model", str(deep_model), "--json").stdout
    split = json.loads(out)["pipeline_split"]
    assert [r["rank"] for r in split["ranks"]] == [*range(31), 2047]
    assert split["ranks_omitted"] == 2048 - 32
    assert split["stage_layers"] == [2] * LISTED_STAGES
    assert split["stage_layers_omitted"] == 2048 - 256
    assert [r["output"] for r in split["ranks"][-2:]] == [False, True]
    assert len(json.dumps(split, indent=1)) < 8_000


def test_check_json_shows_the_archon_split(tmp_path: Path, main_cli: MainCli) -> None:
    """A config's archon engine splits as explain says (its default Interleaved1F1B: the
    stages of SECTIONS' archon case); archon.pp_schedule=1F1B runs one stage per rank: 38
    effective layers over 4 stages, 38 = 4 × 9 + 2, so 10 − 1, 10, 9, 9 − 1."""
    config = tmp_path / "archon.yaml"
    config.write_text(
        "cluster: {n_nodes: 1, n_gpus_per_node: 8}\n"
        "actor:\n  backend: archon:d2p4\n  path: Qwen/Qwen3-8B\n"
        "  mb_spec: {max_tokens_per_mb: 8192}\n  optimizer: {type: adam}\n"
    )
    for extra, vpp, stages, ranks in [
        ((), 2, [4, 5, 5, 5, 5, 5, 4, 3], [9, 10, 9, 8]),
        (("+actor.archon.pp_schedule=1F1B",), 1, [9, 10, 9, 8], [9, 10, 9, 8]),
    ]:
        ran = main_cli("check", str(config), *extra, "--json")
        assert ran.returncode == 0, ran.stderr
        (actor,) = json.loads(ran.stdout)["engines"]
        split = actor["pipeline_split"]
        assert (split["vpp"], split["stage_layers"]) == (vpp, stages)
        assert [r["layers"] for r in split["ranks"]] == ranks
        assert split["rule"].startswith("the archon engine's generate_llm_fqn_per_model_part")


def test_archon_takes_any_p_its_stages_fill(tmp_path: Path, main_cli: MainCli) -> None:
    """The archon engine needs no p that divides the layers, only p × (stages per rank) ≤
    layers + 2. Qwen3-8B p8 (36 % 8 = 4): 38 effective layers over 16 stages, 38 = 16 × 2
    + 6, stages 0-5 hold 3 and 6-15 hold 2, less the embedding's 1 on stage 0 and the
    output's 1 on stage 15: rank 0 runs stages 0 and 8, 2 + 2; rank 7 stages 7 and 15,
    2 + 1. Qwen3-0.6B p16: 28 + 2 = 30 < 32 stages, refused; one stage per rank (1F1B)
    fills 16."""
    ran = main_cli("explain", "archon:d1p8", "--model", "Qwen3-8B")
    assert ran.returncode == 0, ran.stderr
    section = _section(ran.stdout)
    assert section[1] == "  rank 0: 4 of 36 layers (virtual stages 0, 8: 2+2) + embedding"
    assert section[-1] == "  rank 7: 3 of 36 layers (virtual stages 7, 15: 2+1) + output layer"
    refused = main_cli("explain", "archon:d1p16", "--model", "Qwen3-0.6B")
    assert refused.returncode != 0
    assert refused.stderr.strip() == (
        "areal-alloc explain: backend='archon:d1p16' does not fit the model "
        "(--model='Qwen3-0.6B'): num_layers=28 cannot fill the archon engine's p16 × 2 = 32 "
        "virtual stages: 28 layers + 1 (embedding) + 1 (output) = 30 < 32"
    )
    # a run of Qwen3-0.6B (tied embeddings) at p > 1 stops earlier, in prepare_training_config
    # (archon_utils.py l.353-363, before the pipeline split at archon_engine.py l.899); an
    # untied Qwen3-8B at p32: 36 + 2 = 38 < 64 stages
    tied = tmp_path / "tied.yaml"
    tied.write_text(
        "cluster: {n_nodes: 2, n_gpus_per_node: 8}\n"
        "actor:\n  backend: archon:d1p16\n  path: Qwen/Qwen3-0.6B\n"
        "  mb_spec: {max_tokens_per_mb: 8192}\n  optimizer: {type: adam}\n"
    )
    refused = main_cli("check", str(tied))
    assert refused.returncode != 0
    assert "with tie_word_embeddings=true, and the archon engine raises" in refused.stderr
    config = tmp_path / "small.yaml"
    config.write_text(
        "cluster: {n_nodes: 4, n_gpus_per_node: 8}\n"
        "actor:\n  backend: archon:d1p32\n  path: Qwen/Qwen3-8B\n"
        "  mb_spec: {max_tokens_per_mb: 8192}\n  optimizer: {type: adam}\n"
    )
    interleaved = main_cli("check", str(config))
    assert interleaved.returncode != 0
    assert interleaved.stderr.strip().endswith(
        "actor.backend='archon:d1p32' does not fit the model (actor.path='Qwen/Qwen3-8B'): "
        "num_layers=36 cannot fill the archon engine's p32 × 2 = 64 virtual stages: 36 layers "
        "+ 1 (embedding) + 1 (output) = 38 < 64"
    )
    looped = main_cli("check", str(config), "+actor.archon.pp_schedule=1F1B", "--json")
    assert looped.returncode == 0, looped.stderr
    (actor,) = json.loads(looped.stdout)["engines"]
    assert actor["pipeline_split"]["vpp"] == 1
