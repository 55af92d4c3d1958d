"""Which way GPUs should move (areal_alloc.estimate.advice.balance_advice): the side a step
needs grown, and whether it can grow — free GPUs, the other side's least, whole nodes, and
whether the move makes the step faster."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from areal_alloc.estimate.advice import Split, balance_advice
from areal_alloc.estimate.step_mode import ASYNCHRONOUS, COLOCATED, SYNCHRONOUS

TWO_NODES = Split(8, 8, 16, 8, rollout_unit=4, train_unit=2)  # the default run: d2t4 | d4t2
FOUR_NODES = Split(24, 8, 32, 8, rollout_unit=4, train_unit=2)
ONE_BIG_NODE = Split(4, 12, 16, 16, rollout_unit=4, train_unit=1)  # one sglang:d1t4 instance
LINEAR = ", each side scaled by its GPUs"

ADVICE: list[tuple[tuple[float, float, str, Split | None], str]] = [
    # without a split: the direction only
    ((10.0, 10.5, ASYNCHRONOUS, None), "balanced"),
    (
        (10.0, 15.0, ASYNCHRONOUS, None),
        "rollout produces 1.5× what training consumes: move GPUs to training",
    ),
    (
        (15.0, 10.0, ASYNCHRONOUS, None),
        "training could consume 1.5× what rollout produces: move GPUs to rollout",
    ),
    ((0.0, 10.0, ASYNCHRONOUS, None), "one side has no estimate"),
    # asynchronous on two nodes: the rollout's one node is its least
    (
        (10.0, 12.0, ASYNCHRONOUS, TWO_NODES),
        "rollout produces 1.2× what training consumes, but the rollout cannot give up a node "
        "(8 GPUs): it has 8 GPUs and needs at least 8, so the split is the best on whole "
        "nodes; a faster step needs more GPUs (areal-alloc suggest --gpus N)",
    ),
    # a node moved: the rollout 24 → 16 GPUs takes 15 s, training 8 → 16 takes 10 s
    (
        (10.0, 20.0, ASYNCHRONOUS, FOUR_NODES),
        "rollout produces 2.0× what training consumes: move a node (8 GPUs) to training "
        f"(≈ 15 s a step instead of 20 s{LINEAR})",
    ),
    # … unless the rollout then becomes the slower side as slow as training is now
    (
        (10.0, 15.0, ASYNCHRONOUS, FOUR_NODES),
        "rollout produces 1.5× what training consumes, but moving a node (8 GPUs) to training "
        f"would leave the step at ≈ 15 s{LINEAR}: the split is the best on whole nodes "
        "(areal-alloc suggest weighs every split)",
    ),
    # free GPUs: training takes them, nothing moves
    (
        (10.0, 20.0, ASYNCHRONOUS, Split(8, 16, 32, 8, rollout_unit=4, train_unit=2)),
        "rollout produces 2.0× what training consumes: give the 8 free GPUs to training",
    ),
    # synchronous: a GPU goes where it saves most (seconds per GPU), a whole instance at once
    (
        (200.0, 100.0, SYNCHRONOUS, ONE_BIG_NODE),
        "training could consume 2.0× what rollout produces; a synchronous step is their sum, "
        "and a GPU saves ≈ 50 s on rollout, 8.33 s on training: move 4 GPUs to rollout "
        f"(≈ 250 s a step instead of 300 s{LINEAR})",
    ),
    # the rollout outruns training, yet a synchronous step gains more per rollout GPU; one
    # more instance (4 GPUs) would cost training more than it saves
    (
        (50.0, 100.0, SYNCHRONOUS, ONE_BIG_NODE),
        "rollout produces 2.0× what training consumes; a synchronous step is their sum, and a "
        "GPU saves ≈ 12.5 s on rollout, 8.33 s on training, but moving 4 GPUs to rollout "
        f"would take ≈ 175 s a step, not less than 150 s{LINEAR}: the split is the best in "
        "steps of 4 GPUs (areal-alloc suggest weighs every split)",
    ),
    # the default run (grpo_2x8): 'move GPUs to training' was impossible on whole nodes
    (
        (98.8, 109.2, SYNCHRONOUS, TWO_NODES),
        "rollout produces 1.1× what training consumes; a synchronous step is their sum, and a "
        "GPU saves ≈ 13.7 s on training, 12.3 s on rollout, but the rollout cannot give up a "
        "node (8 GPUs): it has 8 GPUs and needs at least 8, so the split is the best on whole "
        "nodes; a faster step needs more GPUs (areal-alloc suggest --gpus N)",
    ),
    (
        (10.0, 30.0, COLOCATED, Split(8, 8, 8, 8, rollout_unit=4, train_unit=2)),
        "rollout produces 3.0× what training consumes; colocated, the two take turns on the "
        "same GPUs: none move between them (areal-alloc suggest proposes separate splits)",
    ),
]


@pytest.mark.parametrize(("given", "expected"), ADVICE)
def test_advice(given: tuple[float, float, str, Split | None], expected: str) -> None:
    assert balance_advice(*given) == expected


NEIGHBOURS: list[tuple[Callable[[str], float | None], str]] = [
    # suggest's neighbouring split, estimated, instead of the scaling
    (
        lambda side: None,
        "rollout produces 2.0× what training consumes, but no split with a node (8 GPUs) more "
        "for training fits: the split is the best on whole nodes",
    ),
    (
        lambda side: 12.0 if side == "training" else None,
        "rollout produces 2.0× what training consumes: move a node (8 GPUs) to training "
        "(≈ 12 s a step instead of 20 s)",
    ),
    (  # as fast: e.g. each instance still generates as many sequences
        lambda side: 20.0,
        "rollout produces 2.0× what training consumes, but moving a node (8 GPUs) to training "
        "would leave the step at ≈ 20 s: the split is the best on whole nodes (areal-alloc "
        "suggest weighs every split)",
    ),
    (
        lambda side: 25.0,
        "rollout produces 2.0× what training consumes, but moving a node (8 GPUs) to training "
        "would take ≈ 25 s a step, not less than 20 s: the split is the best on whole nodes "
        "(areal-alloc suggest weighs every split)",
    ),
]


@pytest.mark.parametrize(("moved", "expected"), NEIGHBOURS)
def test_advice_against_the_neighbouring_split(
    moved: Callable[[str], float | None], expected: str
) -> None:
    assert balance_advice(10.0, 20.0, ASYNCHRONOUS, FOUR_NODES, moved=moved) == expected


@pytest.mark.parametrize(
    ("model", "gpus", "asynchronous"),
    [
        ("Qwen3-0.6B", 8, False),
        ("Qwen3-8B", 16, True),
        ("Qwen3-8B", 64, True),
        ("Qwen3-8B", 64, False),
    ],
)
def test_the_fastest_proposal_never_says_move(model: str, gpus: int, asynchronous: bool) -> None:
    """Its neighbouring splits were estimated and are slower: a move it advised would be a
    faster split that the search ranked below it."""
    from areal_alloc.catalogue import find_gpu, find_model
    from areal_alloc.estimate.execution import TrainingSettings
    from areal_alloc.estimate.system import Hardware
    from areal_alloc.search.split import RunShape, suggest

    gpu = find_gpu("H100-80GB")
    found = suggest(
        find_model(model),
        gpus,
        gpu.memory_bytes,
        Hardware.from_gpu(gpu, 8),
        RunShape.of(batch=256, gen_len=4096, asynchronous=asynchronous),
        training=TrainingSettings(tokens_per_micro_batch=16384, recompute="full"),
    )
    assert found
    best = found[0]
    assert ": move " not in best.advice, best.advice
    assert best.neighbours is not None
    for p in found:  # an advised move names the neighbour's estimated step, faster
        if ": move " in p.advice:
            assert p.neighbours is not None
            faster = [s for s in p.neighbours if s is not None and s < p.step_seconds]
            assert faster, p.advice
