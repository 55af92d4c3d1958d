"""suggest's bounded search proposes what estimating every layout of every split proposes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import areal_alloc.search.split as suggest_module
from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.estimate.execution import TrainingSettings
from areal_alloc.estimate.system import Hardware
from areal_alloc.search.layouts import LayoutConstraints
from areal_alloc.search.ranking import FastestLayouts, RankedLayout, fastest_layouts, ranked_layouts
from areal_alloc.search.split import RunShape, suggest
from areal_alloc.strategy import ParallelStrategy

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
        RunShape.of(asynchronous=asynchronous),
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
        RunShape.of(),
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
    from areal_alloc.search.layouts import LayoutConstraints, iter_strategies, shaped

    for name in MODELS:
        arch = find_model(name)
        count = sum(
            1
            for _ in iter_strategies(
                "megatron", gpus, shaped(LayoutConstraints(gpus_per_node=8), arch)
            )
        )
        assert count <= suggest_module.SPLIT_LAYOUTS, (name, gpus, count)


# --- issue 17 item 6: no more instances or data-parallel ranks than the step's sequences ----

FEW_SEQUENCES = [  # (model, GPUs, sequences per step, training backend)
    ("Qwen3-0.6B", 64, 4, "fsdp"),
    ("Qwen3-0.6B", 64, 6, "megatron"),
    ("Qwen3-8B", 128, 12, "fsdp"),
    ("Qwen3-30B-A3B", 512, 16, "megatron"),
]


@pytest.mark.parametrize(("model", "gpus", "batch", "backend"), FEW_SEQUENCES)
@pytest.mark.parametrize("asynchronous", [True, False])
def test_no_proposal_has_more_instances_or_ranks_than_sequences(
    model: str, gpus: int, batch: int, backend: str, asynchronous: bool
) -> None:
    arch = find_model(model)
    hardware = Hardware.from_gpu(GPU, 8)
    shape = RunShape.of(batch=batch, gen_len=2048, asynchronous=asynchronous)
    found = suggest(
        arch, gpus, GPU.memory_bytes, hardware, shape, train_backend=backend, training=SETTINGS
    )
    assert found
    for p in found:
        assert p.rollout.parallel.dp_size <= batch, p.rollout.spec  # an instance per sequence
        dp = p.actor.parallel.dp_size
        # a sequence per rank at least, split evenly (the reference's single controller)
        assert dp <= batch, p.actor.spec
        assert batch % dp == 0, p.actor.spec
    # the bound is what keeps them out: on the same GPUs, the fastest layouts that fit
    # without it have more instances, or more ranks, than the step has sequences
    first = found[0]
    constraints = LayoutConstraints(gpus_per_node=8)
    rollout = fastest_layouts(
        "sglang",
        first.rollout_gpus,
        constraints,
        arch,
        GPU.memory_bytes,
        hardware,
        top=1,
        tokens_per_step=shape.generated_tokens,
        sequence_length=shape.prompt_len + shape.gen_len,
        keep=lambda p: p.tp_size * p.pp_size <= 8,
    ).layouts[0]
    training = fastest_layouts(
        backend,
        first.train_gpus,
        constraints,
        arch,
        GPU.memory_bytes,
        hardware,
        top=1,
        tokens_per_step=shape.train_tokens,
        sequence_length=min(shape.prompt_len + shape.gen_len, SETTINGS.tokens_per_micro_batch),
        training=SETTINGS,
    ).layouts[0]
    wide = training.parallel.dp_size
    assert rollout.parallel.dp_size > batch or wide > batch or batch % wide, (rollout, training)
