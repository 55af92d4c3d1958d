"""Layout search: every valid layout, the constraints, and the errors."""

from __future__ import annotations

import pytest

from areal_alloc import AllocationValidationError, ModelAllocation
from areal_alloc.search.layouts import LayoutConstraints, enumerate_layouts, parse_constraints

C = LayoutConstraints

LAYOUTS = [
    (
        "fsdp",
        4,
        C(),
        ["fsdp:d4", "fsdp:d2t2", "fsdp:d2c2", "fsdp:d1t4", "fsdp:d1t2c2", "fsdp:d1c4"],
    ),
    (
        "vllm",
        4,
        C(),
        ["vllm:d4", "vllm:d2t2", "vllm:d2p2", "vllm:d1t4", "vllm:d1p2t2", "vllm:d1p4"],
    ),
    (
        "sglang",
        16,
        C(max_pp=1, gpus_per_node=8),
        # tensor parallelism stays inside a node: no t16 on 8-GPU nodes (issue 16)
        ["sglang:d16", "sglang:d8t2", "sglang:d4t4", "sglang:d2t8"],
    ),
    ("megatron", 4, C(max_cp=1, max_pp=1), ["megatron:d4", "megatron:d2t2", "megatron:d1t4"]),
    (
        "megatron",
        4,
        C(max_cp=1, max_pp=1, max_tp=1, experts=True),
        ["megatron:d4", "megatron:d4e2", "megatron:d4e4"],
    ),
    # hybrid: the experts' own tensor parallel size etp, also bounded by max_tp
    (
        "megatron",
        4,
        C(max_cp=1, max_pp=1, max_tp=2, hybrid=True),
        [
            "megatron:d4",
            "megatron:d4e2",
            "megatron:(attn:d4|ffn:d1t2e2)",
            "megatron:d4e4",
            "megatron:d2t2",
            "megatron:d2t2e2",
            "megatron:(attn:d2t2|ffn:d1t2e2)",
            "megatron:d2t2e4",
        ],
    ),
    (
        "megatron",
        4,
        C(max_cp=1, max_pp=1, max_tp=1, hybrid=True),
        ["megatron:d4", "megatron:d4e2", "megatron:d4e4"],
    ),
    # training shards KV heads: t8 needs kv % 8 = 0; inference may replicate them
    (
        "megatron",
        8,
        C(max_cp=1, max_pp=1, num_key_value_heads=4),
        ["megatron:d8", "megatron:d4t2", "megatron:d2t4"],
    ),
    (
        "sglang",
        8,
        C(max_pp=1, num_key_value_heads=4),
        ["sglang:d8", "sglang:d4t2", "sglang:d2t4", "sglang:d1t8"],
    ),
    # Megatron splits 6 layers unevenly over up to 6 + 2 stages (the first and last may
    # hold none: model_shape.layout_problems); archon fills p × 2 virtual stages (its default
    # Interleaved1F1B) from 6 layers + embedding + output = 8: p2 (4 stages) and p4 (8), not
    # p8 (16 > 8)
    (
        "megatron",
        16,
        C(max_cp=1, max_tp=1, num_layers=6),
        ["megatron:d16", "megatron:d8p2", "megatron:d4p4", "megatron:d2p8"],
    ),
    (
        "archon",
        8,
        C(max_cp=1, max_tp=1, num_layers=6),
        ["archon:d8", "archon:d4p2", "archon:d2p4"],
    ),
    ("archon", 8, C(max_cp=1, max_tp=1, max_pp=1, num_experts=6), ["archon:d8", "archon:d8e2"]),
    ("fsdp", 6, C(min_dp=3), ["fsdp:d6", "fsdp:d3t2", "fsdp:d3c2"]),
    # Ulysses context parallelism scatters the heads over c (model_shape.layout_problems):
    # FSDP's 12 heads refuse c8 (the 2 KV heads, c4 repeats); archon's heads after t2, 14,
    # refuse c4, and after t4, 7, c2; Megatron's c splits the sequence
    (
        "fsdp",
        8,
        C(num_attention_heads=12, num_key_value_heads=2),
        ["fsdp:d8", "fsdp:d4t2", "fsdp:d4c2", "fsdp:d2t2c2", "fsdp:d2c4", "fsdp:d1t2c4"],
    ),
    (
        "archon",
        8,
        C(max_pp=1, num_attention_heads=28, num_key_value_heads=4),
        ["archon:d8", "archon:d4t2", "archon:d4c2", "archon:d2t4", "archon:d2t2c2", "archon:d2c4"],
    ),
    (
        "megatron",
        8,
        C(max_pp=1, max_tp=1, num_attention_heads=28, num_key_value_heads=4),
        ["megatron:d8", "megatron:d4c2", "megatron:d2c4", "megatron:d1c8"],
    ),
    # the archon engine's mesh (model_shape.archon_mesh_problem): with etp1, e a multiple of
    # c·t (no d1t4e2, d1t2c2e2, d1c4e2); a hybrid's etp is 1 or t (no attn:d1t4|ffn:d1t2e2)
    (
        "archon",
        4,
        C(max_pp=1, experts=True),
        [
            "archon:d4",
            "archon:d4e2",
            "archon:d4e4",
            "archon:d2t2",
            "archon:d2t2e2",
            "archon:d2t2e4",
            "archon:d2c2",
            "archon:d2c2e2",
            "archon:d2c2e4",
            "archon:d1t4",
            "archon:d1t4e4",
            "archon:d1t2c2",
            "archon:d1t2c2e4",
            "archon:d1c4",
            "archon:d1c4e4",
        ],
    ),
    (
        "archon",
        4,
        C(max_pp=1, max_cp=1, hybrid=True),
        [
            "archon:d4",
            "archon:d4e2",
            "archon:d4e4",
            "archon:d2t2",
            "archon:d2t2e2",
            "archon:(attn:d2t2|ffn:d1t2e2)",
            "archon:d2t2e4",
            "archon:d1t4",
            "archon:d1t4e4",
        ],
    ),
]


@pytest.mark.parametrize(("backend", "gpus", "constraints", "expected"), LAYOUTS)
def test_layouts(
    backend: str, gpus: int, constraints: LayoutConstraints, expected: list[str]
) -> None:
    assert enumerate_layouts(backend, gpus, constraints) == expected


@pytest.mark.parametrize("backend", ["fsdp", "sglang", "vllm", "megatron", "archon"])
@pytest.mark.parametrize("gpus", [1, 6, 12, 16, 24])
def test_every_layout_is_valid_spans_the_gpus_and_round_trips(backend: str, gpus: int) -> None:
    found = enumerate_layouts(backend, gpus, C(hybrid=True))
    assert len(found) == len(set(found))
    for spec in found:
        alloc = ModelAllocation.from_str(spec)
        assert alloc.parallel.world_size == gpus
        assert str(alloc) == spec


ERRORS = [
    (("fdsp", 8, None), "unknown backend 'fdsp'; did you mean 'fsdp'?"),
    (("fsdp", 0, None), "GPU count must be an integer ≥ 1, got 0"),
    (("fsdp", "8", None), "GPU count must be an integer ≥ 1, got '8'"),
]


@pytest.mark.parametrize(("args", "message"), ERRORS)
def test_errors(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        enumerate_layouts(*args)  # type: ignore[arg-type]
    assert info.value.message.startswith(message)


CONSTRAINTS = [
    (["max_tp=4", "hybrid=true"], C(max_tp=4, hybrid=True)),
    (["gpus-per-node=8", "experts=no"], C(gpus_per_node=8, experts=False)),
    ([], C()),
]


@pytest.mark.parametrize(("options", "expected"), CONSTRAINTS)
def test_parse_constraints(options: list[str], expected: LayoutConstraints) -> None:
    assert parse_constraints(options) == expected


CONSTRAINT_ERRORS = [
    (["max_xx=2"], "unknown layout constraint 'max_xx=2'; use key=value with key one of"),
    (["max_tp"], "unknown layout constraint 'max_tp'"),
    (["max_tp=0"], "max_tp='0': must be an integer from 1 to 1,099,511,627,776"),
    (["max_tp=٤"], "max_tp='٤': must be an integer from 1 to 1,099,511,627,776"),
    (["max_tp=" + "9" * 5000], "max_tp=a 5000-digit number: the limit is 1,099,511,627,776"),
    (["hybrid=maybe"], "hybrid='maybe': must be true or false"),
]


@pytest.mark.parametrize(("options", "message"), CONSTRAINT_ERRORS)
def test_parse_constraint_errors(options: list[str], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        parse_constraints(options)
    assert info.value.message.startswith(message)
