"""``suggest --memory-reserve-gib``: the shared settings flag (areal_alloc/cli/flags.py
gpu_flags) reaches both engines' memory, as in check, layouts and explain."""

from __future__ import annotations

import json

import pytest

from areal_alloc.cli import main

ARGS = [
    "suggest",
    "--model",
    "Qwen3-8B",
    "--gpus",
    "16",
    "--gpu",
    "H100-80GB",
    "--batch-size",
    "64",
]
GIB = 1 << 30


@pytest.mark.parametrize("reserve", [1, 10])
def test_the_reserve_reaches_both_engines(
    reserve: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AREAL_ALLOC_MEMORY_RESERVE_GIB", raising=False)
    assert main([*ARGS, "--top", "1", "--json", "--memory-reserve-gib", str(reserve)]) == 0
    best = json.loads(capsys.readouterr().out)[0]
    assert best["rollout"]["memory"]["reserve"] == reserve * GIB
    assert best["actor"]["memory"]["reserve"] == reserve * GIB


def test_a_reserve_that_leaves_no_room_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--memory-reserve-gib", "60"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("areal-alloc suggest: no split of 16 H100-80GB GPUs fits Qwen3-8B")
