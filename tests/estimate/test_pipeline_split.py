"""The pipeline split: the reference's parameter-balanced layout for its Megatron engine,
against a transcription of its own dynamic programme, and megatron-core's even split."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_alloc.catalogue import MODELS
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.pipeline_split import (
    ARCHON_RULE,
    PipelineSplit,
    archon_split,
    engine_split,
    even_split,
    reference_split,
    reference_weights,
    split_lengths,
)


def _reference_lengths(
    weights: list[float], embedding: float, output: float, stages: int
) -> list[int]:
    """``_compute_stage_layer_lengths`` of areal/engine/megatron_utils/pipeline_parallel.py
    (AReaL cbff54d645d2cd8ee1f1c358a82f3f473588433d), transcribed as the oracle: the
    reference's own O(stages × layers²) loop, which the package computes faster."""
    total = len(weights)
    if total == 0 or stages <= 0:
        return []
    prefix = [0.0]
    for value in weights:
        prefix.append(prefix[-1] + float(value))
    dp = [[math.inf] * (total + 1) for _ in range(stages + 1)]
    choice = [[-1] * (total + 1) for _ in range(stages + 1)]
    dp[0][0] = 0.0
    for stage in range(1, stages + 1):
        base = embedding if stage == 1 else output if stage == stages else 0.0
        for end in range(total + 1):
            for start in range(end + 1):
                prev = dp[stage - 1][start]
                if not math.isfinite(prev):
                    continue
                if stage not in (1, stages) and start == end:
                    continue
                candidate = max(prev, base + (prefix[end] - prefix[start]))
                if candidate < dp[stage][end]:
                    dp[stage][end] = candidate
                    choice[stage][end] = start
    if not math.isfinite(dp[stages][total]):
        return []
    lengths, idx = [0] * stages, total
    for stage in range(stages, 0, -1):
        split = choice[stage][idx]
        if split < 0:
            return []
        lengths[stage - 1] = idx - split
        idx = split
    return lengths


LAYOUTS = [(2, 1, 1), (4, 1, 1), (4, 2, 1), (8, 1, 8), (8, 4, 8), (16, 1, 1)]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_catalogue_model_splits_as_the_reference_does(name: str) -> None:
    arch = MODELS[name].architecture
    for pp, vpp, ep in LAYOUTS:
        if pp * vpp > arch.num_layers:
            continue
        weights, embedding, output = reference_weights(arch, ep)
        ours = reference_split(arch, pp, vpp, ep).stage_layers
        assert list(ours) == _reference_lengths(list(weights), embedding, output, pp * vpp)
        assert sum(ours) == arch.num_layers


@settings(max_examples=150, deadline=None)
@given(
    weights=st.lists(
        st.sampled_from([0.0, 1.0, 2.0, 3.0, 0.5, 7.25]) | st.floats(0.0, 9.0),
        min_size=1,
        max_size=24,
    ),
    embedding=st.sampled_from([0.0, 1.0, 4.0]) | st.floats(0.0, 12.0),
    output=st.sampled_from([0.0, 1.0, 4.0]) | st.floats(0.0, 12.0),
    extra=st.integers(-23, 3),
)
def test_the_split_equals_the_references_programme(
    weights: list[float], embedding: float, output: float, extra: int
) -> None:
    stages = max(1, len(weights) + extra)
    ours = split_lengths(tuple(weights), embedding, output, stages)
    assert list(ours) == _reference_lengths(weights, embedding, output, stages)


def test_a_row_after_a_falling_one_is_scanned_in_full() -> None:
    """The one-sweep search needs the previous stage's row to rise; where it does not
    (weights could never make it so, but the rule is kept), every start is scanned."""
    from areal_alloc.estimate.pipeline_split import _stage_row

    prefix = [0.0, 1.0, 3.0, 6.0, 10.0]
    falling = [0.0, 5.0, 2.0, 9.0, math.inf]
    current, choice = _stage_row(falling, prefix, 1.0, False, True)
    for end in range(5):  # the reference's scan, by hand
        options = [max(falling[p], 1.0 + (prefix[end] - prefix[p])) for p in range(end + 1)]
        assert current[end] == min(options)
        assert choice[end] == options.index(min(options))


# (model, pp, vpp, ep, layers per virtual stage) as the reference places them: the embedding
# (vocab × h) weighs about three of Qwen3-8B's layers, so with 32 stages the first and last
# hold none and, of the equal splits, the loop's first keeps the middle stages at one layer
SPLITS = [
    ("qwen/qwen3-8b", 4, 1, 1, (7, 11, 11, 7)),
    ("qwen/qwen2.5-7b", 4, 1, 1, (6, 8, 8, 6)),
    ("qwen/qwen3-30b-a3b", 4, 1, 1, (12, 12, 12, 12)),
    ("qwen/qwen3-8b", 8, 4, 1, (0,) + (1,) * 27 + (3, 3, 3, 0)),
]


@pytest.mark.parametrize(("name", "pp", "vpp", "ep", "expected"), SPLITS)
def test_the_references_split(
    name: str, pp: int, vpp: int, ep: int, expected: tuple[int, ...]
) -> None:
    assert reference_split(MODELS[name].architecture, pp, vpp, ep).stage_layers == expected


def test_ranks_hold_every_pp_th_virtual_stage() -> None:
    split = reference_split(MODELS["qwen/qwen3-8b"].architecture, 8, 4)
    assert split.stages_of(4) == (4, 12, 20, 28)
    assert [split.layers_of(r) for r in range(8)] == [3, 4, 4, 4, 6, 6, 6, 3]
    assert split.layer_ranges(4) == (range(3, 4), range(11, 12), range(19, 20), range(27, 30))
    assert split.describe(0) == "3 of 36 layers (virtual stages 0, 8, 16, 24: 0+1+1+1) + embedding"
    assert split.describe(7).endswith("+ output layer")


# megatron-core's even split, with the embedding and the loss each counted as a layer
EVEN = [
    ((94, 8, 4, True, True), (2,) + (3,) * 30 + (2,)),
    ((94, 32, 3, True, True), (0,) + (1,) * 94 + (0,)),
    ((96, 8, 1, False, False), (12,) * 8),
    ((10, 4, 1, False, False), (3, 3, 2, 2)),
]


@pytest.mark.parametrize(("args", "expected"), EVEN)
def test_megatron_cores_even_split(
    args: tuple[int, int, int, bool, bool], expected: tuple[int, ...]
) -> None:
    layers, pp, vpp, emb, loss = args
    split = even_split(layers, pp, vpp, embedding_slot=emb, loss_slot=loss)
    assert split.stage_layers == expected
    assert sum(split.stage_layers) == layers


def test_the_engine_rule() -> None:
    arch = MODELS["qwen/qwen3-8b"].architecture
    assert engine_split("megatron", arch, 1) is None
    megatron = engine_split("megatron", arch, 4)
    assert isinstance(megatron, PipelineSplit)
    assert megatron.stage_layers == (7, 11, 11, 7)
    # archon, whatever the rule: 36 + 1 + 1 = 38 effective layers; one stage per rank
    # (1F1B): 38 = 4 × 9 + 2, stages 10 − 1, 10, 9, 9 − 1; two (Interleaved1F1B, its
    # default): 38 = 8 × 4 + 6, stages 5 − 1, 5, 5, 5, 5, 5, 4, 4 − 1
    archon = engine_split("archon", arch, 4, rule="even")
    assert archon is not None
    assert archon.stage_layers == (9, 10, 9, 8)
    interleaved = engine_split("archon", arch, 4, 2)
    assert interleaved is not None
    assert interleaved.stage_layers == (4, 5, 5, 5, 5, 5, 4, 3)
    assert [interleaved.layers_of(r) for r in range(4)] == [4 + 5, 5 + 5, 5 + 4, 5 + 3]
    assert interleaved.rule == ARCHON_RULE
    counted = engine_split("megatron", arch, 4, rule="even-embedding-loss")
    assert counted is not None
    assert counted.stage_layers == (9, 10, 9, 8)
    with pytest.raises(
        AllocationValidationError, match="layer split 'odd': must be one of areal, even"
    ):
        engine_split("megatron", arch, 4, rule="odd")


def test_beyond_the_bound_the_split_is_even_and_says_so() -> None:
    """The reference's programme is not run on absurd sizes (stages × layers² steps): a
    config of four billion layers gets an answer, not a MemoryError."""
    arch = replace(MODELS["qwen/qwen3-8b"].architecture, num_layers=4_040_796_000)
    split = reference_split(arch, 4)
    assert split.stage_layers == (1_010_199_000,) * 4
    assert split.rule == (
        "megatron-core's even split (the reference's split is not computed beyond 512 layers "
        "or stages: 4,040,796,000 layers, 4 stages)"
    )
    assert split.moe_layers_of(3, 0, True) == 1_010_199_000
    assert split.moe_layers_of(0, 1_010_199_001, True) == 0


def _reference_archon(
    num_stages: int, num_layers: int, first_less: int = 1, last_less: int = 1
) -> list[int]:
    """``generate_llm_fqn_per_model_part`` of areal/experimental/models/archon/
    pipeline_parallel.py l.85-197 (AReaL cbff54d645d2cd8ee1f1c358a82f3f473588433d),
    transcribed as the oracle (its module names, then the decoder layers of each stage
    counted); raises ValueError where it does."""
    if num_stages < 1:
        raise ValueError(f"num_stages must be >= 1, got {num_stages}")
    if num_stages == 1:
        names = [[f"layers.{i}" for i in range(num_layers)]]
        return [sum(n.startswith("layers.") for n in stage) for stage in names]
    num_effective_layers = num_layers + first_less + last_less
    if num_stages > num_effective_layers:
        raise ValueError("num_stages cannot exceed effective layers")
    layers_per_stage = num_effective_layers // num_stages
    extra_layers = num_effective_layers % num_stages
    if layers_per_stage == 0:
        raise ValueError("layers_per_stage is 0")
    if first_less > layers_per_stage or last_less > layers_per_stage:
        raise ValueError("less_layers exceeds layers_per_stage")
    module_names_per_stage: list[list[str]] = []
    current_layer = 0
    for stage_idx in range(num_stages):
        stage_modules: list[str] = []
        effective_layers_for_stage = layers_per_stage
        if stage_idx < extra_layers:
            effective_layers_for_stage += 1
        if stage_idx == 0:
            stage_modules.append("tok_embeddings")
            for _ in range(effective_layers_for_stage - first_less):
                if current_layer < num_layers:
                    stage_modules.append(f"layers.{current_layer}")
                    current_layer += 1
        elif stage_idx == num_stages - 1:
            for _ in range(effective_layers_for_stage - last_less):
                if current_layer < num_layers:
                    stage_modules.append(f"layers.{current_layer}")
                    current_layer += 1
            stage_modules.extend(["norm", "output"])
        else:
            for _ in range(effective_layers_for_stage):
                if current_layer < num_layers:
                    stage_modules.append(f"layers.{current_layer}")
                    current_layer += 1
        module_names_per_stage.append(stage_modules)
    return [sum(n.startswith("layers.") for n in stage) for stage in module_names_per_stage]


@settings(max_examples=300, deadline=None)
@given(
    layers=st.integers(1, 200),
    pp=st.integers(1, 64),
    per_rank=st.integers(1, 4),
    first=st.integers(0, 3),
    last=st.integers(0, 3),
)
def test_the_archon_split_is_the_references(
    layers: int, pp: int, per_rank: int, first: int, last: int
) -> None:
    try:
        expected = _reference_archon(pp * per_rank, layers, first, last)
    except ValueError:
        with pytest.raises(AllocationValidationError, match="the archon engine splits"):
            archon_split(layers, pp, per_rank, first, last)
        return
    split = archon_split(layers, pp, per_rank, first, last)
    assert list(split.stage_layers) == expected
    assert (split.pp, split.vpp) == (pp, per_rank)


# the reference's own examples (its docstring, l.107-117) and the reviewer's Qwen3-8B p4
ARCHON = [
    ((4, 2, 1), (2, 2)),
    ((8, 4, 1), (2, 3, 2, 1)),
    ((36, 4, 2), (4, 5, 5, 5, 5, 5, 4, 3)),
    ((36, 4, 1), (9, 10, 9, 8)),
    ((36, 1, 1), (36,)),
]


@pytest.mark.parametrize(("args", "expected"), ARCHON)
def test_archon_splits(args: tuple[int, int, int], expected: tuple[int, ...]) -> None:
    assert archon_split(*args).stage_layers == expected


def test_archon_refuses_more_stages_than_effective_layers() -> None:
    """Qwen3-8B at p32 with the default two stages per rank: 64 > 38 (the reference
    raises "num_stages (64) cannot exceed effective layers (38 = 36 + 1 + 1)")."""
    with pytest.raises(AllocationValidationError) as error:
        archon_split(36, 32, 2)
    assert str(error.value) == (
        "the archon engine splits 36 layers + 1 (embedding) + 1 (output) = 38 over p32 × 2 = "
        "64 virtual stages (generate_llm_fqn_per_model_part): more stages than effective "
        "layers; use a smaller p or fewer stages per rank (archon.pp_schedule=1F1B runs 1)"
    )
