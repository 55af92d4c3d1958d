"""suggest's bounded search proposes what estimating every layout of every split proposes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import areal_alloc.suggest as suggest_module
from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.estimate.execution import TrainingSettings
from areal_alloc.estimate.system import Hardware
from areal_alloc.layouts import FastestLayouts, RankedLayout, ranked_layouts
from areal_alloc.strategy import ParallelStrategy
from areal_alloc.suggest import RunShape, suggest

GPU = find_gpu("H100-80GB")
SETTINGS = TrainingSettings(tokens_per_micro_batch=16384, recompute="full")


def _exhaustive(
    backend: str,
    gpus: int,
    *args: Any,
    top: int,
    keep: Callable[[ParallelStrategy], bool] | None = None,
    accept: Callable[[RankedLayout], bool] | None = None,
    limit: int = 0,
    **kwargs: Any,
) -> FastestLayouts:
    """Every layout ranked (the search before the bound), then filtered."""
    every = ranked_layouts(backend, gpus, *args, **kwargs)
    kept = [r for r in every if (keep is None or keep(r.parallel))]
    kept = [r for r in kept if (accept is None or accept(r))]
    return FastestLayouts(tuple(kept[:top]), len(every), False)


def _proposals(model: str, gpus: int, asynchronous: bool) -> list[tuple[object, ...]]:
    found = suggest(
        find_model(model),
        gpus,
        GPU.memory_bytes,
        Hardware.from_gpu(GPU, 8),
        RunShape(asynchronous=asynchronous),
        training=SETTINGS,
    )
    return [(p.rollout_gpus, p.rollout.spec, p.actor.spec, p.step_seconds) for p in found]


@pytest.mark.parametrize(
    ("model", "gpus"),
    [
        ("Qwen3-0.6B", 16),
        ("Qwen3-8B", 64),
        ("Qwen3-8B", 512),  # 63 whole-node splits: searched, not tried one by one
        ("Qwen3-30B-A3B", 64),
        ("Qwen3-30B-A3B", 256),
    ],
)
@pytest.mark.parametrize("asynchronous", [True, False])
def test_the_bounded_search_proposes_what_the_exhaustive_one_does(
    model: str, gpus: int, asynchronous: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    bounded = _proposals(model, gpus, asynchronous)
    monkeypatch.setattr(suggest_module, "fastest_layouts", _exhaustive)
    every = _proposals(model, gpus, asynchronous)
    assert bounded == every
    assert bounded  # something fits, so the comparison says something


def test_a_cut_split_is_said_in_the_proposal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(suggest_module, "SPLIT_LAYOUTS", 10)
    (first, *_) = suggest(
        find_model("Qwen3-30B-A3B"),
        64,
        GPU.memory_bytes,
        Hardware.from_gpu(GPU, 8),
        RunShape(),
        training=SETTINGS,
    )
    assert first.training_search_cut
    assert first.search_note == (
        f"training on {first.train_gpus:,} GPUs: only the first 10 megatron layouts were "
        f"searched (most data parallelism first); `areal-alloc layouts megatron "
        f"{first.train_gpus} --rank --top 3` searches more"
    )


@pytest.mark.parametrize("gpus", [2520, 3360, 3840, 4032, 4096])  # the most divisors ≤ 4,096
def test_no_split_of_up_to_4096_gpus_is_cut(gpus: int) -> None:
    from areal_alloc.catalogue import MODELS
    from areal_alloc.layouts import LayoutConstraints, iter_strategies
    from areal_alloc.layouts import _shaped as shaped

    for name in MODELS:
        arch = find_model(name)
        count = sum(
            1
            for _ in iter_strategies(
                "megatron", gpus, shaped(LayoutConstraints(gpus_per_node=8), arch)
            )
        )
        assert count <= suggest_module.SPLIT_LAYOUTS, (name, gpus, count)
