"""When nothing fits, the hint offers --recompute full only when it was not given (issue 16)."""

from __future__ import annotations

import pytest

from areal_alloc.cli import main

MOE = ["--model", "Qwen3-30B-A3B", "--gpu", "H100-80GB"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["layouts", "megatron", "2", *MOE],
            "areal-alloc layouts: none of the 7 megatron layouts of 2 GPUs fits Qwen3-30B-A3B on "
            "H100-80GB: the smallest needs 364.7 GiB per GPU (largest term optimizer 170.7 GiB); "
            "try more GPUs, --recompute full or fewer --tokens",
        ),
        (
            ["layouts", "megatron", "2", *MOE, "--recompute", "full"],
            "areal-alloc layouts: none of the 7 megatron layouts of 2 GPUs fits Qwen3-30B-A3B on "
            "H100-80GB: the smallest needs 290.8 GiB per GPU (largest term optimizer 170.7 GiB); "
            "try more GPUs or fewer --tokens (this is already with --recompute full)",
        ),
        (
            ["suggest", "--gpus", "4", *MOE, "--recompute", "full"],
            "areal-alloc suggest: no split of 4 H100-80GB GPUs fits Qwen3-30B-A3B: the rollout or "
            "the trainer does not fit on any share; try more GPUs or fewer --tokens (this is "
            "already with --recompute full)",
        ),
        (
            ["suggest", "--gpus", "4", *MOE],  # the default: none, as every command's
            "areal-alloc suggest: no split of 4 H100-80GB GPUs fits Qwen3-30B-A3B: the rollout or "
            "the trainer does not fit on any share; try more GPUs, --recompute full or fewer "
            "--tokens",
        ),
    ],
)
def test_the_hint_repeats_what_was_given(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(args) == 1
    assert capsys.readouterr().err.splitlines() == [message]
