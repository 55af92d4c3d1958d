"""One engine's backend string: what parses to what, and every rejection with its message."""

from __future__ import annotations

import dataclasses

import pytest

from areal_alloc import (
    AllocationError,
    AllocationSyntaxError,
    AllocationValidationError,
    InvalidAllocationModeError,
    ModelAllocation,
    ParallelStrategy,
    SchedulingStrategy,
    SchedulingStrategyType,
)

# spec -> (backend, name, (dp, tp, pp, cp, ep, etp), world_size, canonical string)
VALID = [
    ("fsdp:d4t2", ("fsdp", None, (4, 2, 1, 1, 1, 1), 8, "fsdp:d4t2")),
    ("sglang:d2t4", ("sglang", None, (2, 4, 1, 1, 1, 1), 8, "sglang:d2t4")),
    ("vllm:d2t2p2", ("vllm", None, (2, 2, 2, 1, 1, 1), 8, "vllm:d2p2t2")),
    ("megatron:d2p2t4e4", ("megatron", None, (2, 4, 2, 1, 4, 1), 16, "megatron:d2p2t4e4")),
    ("archon:d2c2t2", ("archon", None, (2, 2, 1, 2, 1, 1), 8, "archon:d2t2c2")),
    (
        "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)",
        ("megatron", None, (4, 2, 2, 2, 2, 4), 32, "megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)"),
    ),
    (
        "megatron:(attn:d1p12t4|ffn:d1p12e4)",
        ("megatron", None, (1, 4, 12, 1, 4, 1), 48, "megatron:d1p12t4e4"),
    ),
    # ffn may omit p (inherits attn's) and d (derived: 32 / (e2·t4·p2) = 2)
    (
        "archon:(attn:d4p2t2c2|ffn:t4e2)",
        ("archon", None, (4, 2, 2, 2, 2, 4), 32, "archon:(attn:d4p2t2c2|ffn:d2p2t4e2)"),
    ),
    ("fsdp[actor]:d4", ("fsdp", "actor", (4, 1, 1, 1, 1, 1), 4, "fsdp[actor]:d4")),
    ("fsdp[actor_2]:d8", ("fsdp", "actor_2", (8, 1, 1, 1, 1, 1), 8, "fsdp[actor_2]:d8")),
    # a dimension of size 1 is always accepted, even one the backend does not take
    ("fsdp:d4p1t1", ("fsdp", None, (4, 1, 1, 1, 1, 1), 4, "fsdp:d4")),
    ("sglang:d4p1t1", ("sglang", None, (4, 1, 1, 1, 1, 1), 4, "sglang:d4")),
    ("sglang:d4c1e1", ("sglang", None, (4, 1, 1, 1, 1, 1), 4, "sglang:d4")),
    ("fsdp:t1", ("fsdp", None, (1, 1, 1, 1, 1, 1), 1, "fsdp:d1")),
    ("vllm:t4", ("vllm", None, (1, 4, 1, 1, 1, 1), 4, "vllm:d1t4")),
    ("fsdp:c2d2", ("fsdp", None, (2, 1, 1, 2, 1, 1), 4, "fsdp:d2c2")),
    ("  fsdp : d4 t2  ", ("fsdp", None, (4, 2, 1, 1, 1, 1), 8, "fsdp:d4t2")),
    (
        "megatron: ( attn : d2 | ffn : e2 )",
        ("megatron", None, (2, 1, 1, 1, 2, 1), 2, "megatron:d2e2"),
    ),
]


@pytest.mark.parametrize(("spec", "expected"), VALID)
def test_valid(spec: str, expected: tuple[object, ...]) -> None:
    backend, name, sizes, world, canonical = expected
    alloc = ModelAllocation.from_str(spec)
    p = alloc.parallel
    assert (alloc.backend, alloc.name) == (backend, name)
    assert (p.dp_size, p.tp_size, p.pp_size, p.cp_size, p.ep_size, p.etp_size) == sizes
    assert alloc.world_size == p.world_size == world
    assert alloc.scheduling_strategy == SchedulingStrategy()
    assert str(alloc) == canonical
    assert ModelAllocation.from_str(canonical) == alloc


def test_hybrid_sizes_from_the_issue() -> None:
    p = ModelAllocation.from_str("megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)").parallel
    assert (p.dp_size, p.pp_size, p.tp_size, p.cp_size, p.ep_size, p.etp_size) == (4, 2, 2, 2, 2, 4)
    assert (p.world_size, p.edp_size) == (32, 2)
    q = ModelAllocation.from_str("megatron:(attn:d1p12t4|ffn:d1p12e4)").parallel
    assert (q.pp_size, q.tp_size, q.ep_size, q.world_size) == (12, 4, 4, 48)


def test_name_and_scheduling_arguments_override_the_string() -> None:
    colocated = SchedulingStrategy("colocation", target="actor")
    alloc = ModelAllocation.from_str("fsdp[x]:d4", name="ref", scheduling_strategy=colocated)
    assert alloc.name == "ref"
    assert alloc.scheduling_strategy.type == "colocation"
    assert alloc.scheduling_strategy.type is SchedulingStrategyType.colocation
    assert alloc.world_size == 0
    assert alloc.parallel.world_size == 4
    assert ModelAllocation.from_str(str(alloc), scheduling_strategy=colocated) == alloc


def test_memo_returns_the_same_immutable_object() -> None:
    first = ModelAllocation.from_str("fsdp:d4t2")
    assert ModelAllocation.from_str("fsdp:d4t2") is first
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.name = "actor"  # type: ignore[misc]
    changed = dataclasses.replace(first, name="actor")
    assert (changed.name, first.name) == ("actor", None)


def test_replace_validates_again() -> None:
    alloc = ModelAllocation.from_str("fsdp:d4")
    with pytest.raises(AllocationValidationError, match="FSDP backend only supports"):
        dataclasses.replace(alloc, parallel=ParallelStrategy(pipeline_parallel_size=2))


# spec -> (error type, exact first line, caret column or None)
ERRORS: list[tuple[object, type[AllocationError], str, int | None]] = [
    (
        "d4t2",
        AllocationValidationError,
        "Backend must be explicitly specified in 'd4t2': the backend says which engine "
        "runs the layout; write e.g. 'fsdp:d4t2'",
        1,
    ),
    (
        "d2p2",
        AllocationValidationError,
        "Backend must be explicitly specified in 'd2p2': the backend says which engine "
        "runs the layout; write e.g. 'megatron:d2p2'",
        1,
    ),
    (
        "[actor]:d4",
        AllocationValidationError,
        "Backend must be explicitly specified in '[actor]:d4': the backend comes before "
        "the name; write e.g. 'fsdp[actor]:d4'",
        1,
    ),
    (
        "(attn:d4|ffn:d2e2)",
        AllocationValidationError,
        "Backend must be explicitly specified in '(attn:d4|ffn:d2e2)': hybrid attn/ffn "
        "layouts run on megatron or archon; write e.g. 'megatron:(attn:d4|ffn:d2e2)'",
        1,
    ),
    (
        "attn:d4|ffn:d2e2",
        AllocationValidationError,
        "Backend must be explicitly specified in '(attn:d4|ffn:d2e2)': hybrid attn/ffn "
        "layouts run on megatron or archon; write e.g. 'megatron:(attn:d4|ffn:d2e2)'",
        1,
    ),
    # the reference rejects ffn before attn, so a config passing here would fail there
    (
        "megatron:(ffn:d2p2t4e2|attn:d4p2t2c2)",
        AllocationValidationError,
        "attn comes first in a hybrid layout: write megatron:(attn:d4p2t2c2|ffn:d2p2t4e2), "
        "not ffn before attn",
        11,
    ),
    # odd characters are named, with their column
    (
        "fsdp:d\uff14t2",
        AllocationSyntaxError,
        "allocation string 'fsdp:d\uff14t2' holds '\uff14' (FULLWIDTH DIGIT FOUR) at column 7; "
        "only plain ASCII letters, digits and ':[]()|+' are allowed; write '4'",
        7,
    ),
    (
        "fsdp:d4\x00",
        AllocationSyntaxError,
        "allocation string 'fsdp:d4\\x00' holds '\\x00' (U+0000) at column 8; only plain ASCII "
        "letters, digits and ':[]()|+' are allowed",
        8,
    ),
    # sizes beyond the documented bound (areal_alloc.limits.MAX_GPUS)
    (
        "fsdp:d99999999999999999999",
        AllocationValidationError,
        "data parallel size d99999999999999999999 is over the limit of 1,048,576 GPUs",
        6,
    ),
    (
        "megatron:d100000000t8",
        AllocationValidationError,
        "data parallel size d100000000 is over the limit of 1,048,576 GPUs",
        10,
    ),
    (
        "fsdp:d1048576t2",
        AllocationValidationError,
        "world size d1048576·t2·p1·c1 = 2,097,152 GPUs is over the limit of 1,048,576 in "
        "'fsdp:d1048576t2'",
        None,
    ),
    (
        "fsdp:d4p2",
        AllocationValidationError,
        "FSDP backend only supports data/tensor/context parallelism (d, t, c), got "
        "pipeline parallelism (p2); use megatron or archon for p",
        8,
    ),
    (
        "fsdp:d4e2",
        AllocationValidationError,
        "FSDP backend only supports data/tensor/context parallelism (d, t, c), got "
        "expert parallelism (e2); use megatron or archon for e",
        8,
    ),
    (
        "sglang:d2c2",
        AllocationValidationError,
        "sglang does not support context parallelism (c2); inference backends take d, t, p",
        10,
    ),
    (
        "vllm:e4",
        AllocationValidationError,
        "vllm does not support expert parallelism (e4); inference backends take d, t, p",
        6,
    ),
    (
        "fdsp:d4",
        AllocationValidationError,
        "unknown backend 'fdsp'; did you mean 'fsdp'? backends are fsdp, megatron, archon "
        "(training); sglang, vllm (inference)",
        1,
    ),
    (
        "megatorn:d4",
        AllocationValidationError,
        "unknown backend 'megatorn'; did you mean 'megatron'? backends are fsdp, megatron, "
        "archon (training); sglang, vllm (inference)",
        1,
    ),
    (
        "tpu:d4",
        AllocationValidationError,
        "unknown backend 'tpu'; backends are fsdp, megatron, archon (training); sglang, "
        "vllm (inference)",
        1,
    ),
    (
        "FSDP:d4",
        AllocationValidationError,
        "backend names are lower case: write 'fsdp', not 'FSDP'",
        1,
    ),
    (
        "fsdp:D4",
        AllocationValidationError,
        "dimension letters are lower case: write 'd4', not 'D4'",
        6,
    ),
    (
        "fsdp:x4",
        AllocationValidationError,
        "unknown dimension 'x' in 'x4'; dimensions are d (data), t (tensor), p (pipeline), "
        "c (context), e (expert)",
        6,
    ),
    (
        "fsdp:d2d4",
        AllocationValidationError,
        "data parallelism (d) is given twice in fsdp: 'd2' at column 6 and 'd4' at "
        "column 8; write each dimension once",
        8,
    ),
    ("fsdp:d0", AllocationValidationError, "data parallel size must be ≥ 1, got 'd0'", 6),
    ("fsdp:d4t00", AllocationValidationError, "tensor parallel size must be ≥ 1, got 't00'", 8),
    ("fsdp:d04", AllocationValidationError, "size '04' of d has a leading zero; write 'd4'", 7),
    (
        "fsdp.d4",
        AllocationSyntaxError,
        "unexpected '.' at column 5 of 'fsdp.d4': use ':' between the backend and its "
        "dimensions, e.g. 'fsdp:d4'",
        5,
    ),
    (
        "",
        AllocationValidationError,
        "allocation string is empty; write BACKEND:DIMS, e.g. 'fsdp:d4t2' or 'sglang:d2t4'",
        None,
    ),
    (
        "   ",
        AllocationValidationError,
        "allocation string is empty; write BACKEND:DIMS, e.g. 'fsdp:d4t2' or 'sglang:d2t4'",
        None,
    ),
    (
        "megatron:(attn:d2|ffn:d2",
        AllocationSyntaxError,
        "unbalanced parentheses in 'megatron:(attn:d2|ffn:d2': the '(' at column 10 is "
        "never closed; add ')' after the ffn part",
        10,
    ),
    (
        "megatron:attn:d2|ffn:d2)",
        AllocationSyntaxError,
        "a hybrid layout needs parentheses at column 10 of 'megatron:attn:d2|ffn:d2)': "
        "write BACKEND:(attn:DIMS|ffn:DIMS), e.g. 'megatron:(attn:d4t2|ffn:d2e4)'",
        10,
    ),
    (
        "fsdp:d4)",
        AllocationSyntaxError,
        "unbalanced parentheses: the ')' at column 8 of 'fsdp:d4)' has no matching '('; "
        "hybrid layouts are written BACKEND:(attn:DIMS|ffn:DIMS)",
        8,
    ),
    (
        "fsdp:(attn:d2|ffn:d2)",
        AllocationValidationError,
        "hybrid attn/ffn layouts are for megatron and archon only; fsdp takes d, t, c",
        1,
    ),
    (
        "sglang:(attn:d2|ffn:d2)",
        AllocationValidationError,
        "hybrid attn/ffn layouts are for megatron and archon only; sglang takes d, t, p",
        1,
    ),
    (
        "megatron:(attn:d2e2|ffn:d2)",
        AllocationValidationError,
        "attn does not take expert parallelism (e2); attn takes d, t, p, c; put e in the ffn part",
        18,
    ),
    (
        "megatron:(attn:d2|ffn:c2)",
        AllocationValidationError,
        "ffn does not take context parallelism (c2); ffn takes d, t, p, e; put c in the attn part",
        23,
    ),
    (
        "megatron:(atn:d2|ffn:d2)",
        AllocationValidationError,
        "unknown part 'atn' in a hybrid layout; did you mean 'attn'? write "
        "BACKEND:(attn:DIMS|ffn:DIMS)",
        11,
    ),
    (
        "megatron:(attn:d2|attn:d2)",
        AllocationValidationError,
        "part 'attn' is given twice; a hybrid layout has one attn part and one ffn part",
        19,
    ),
    (
        "megatron:(attn:d4p2|ffn:d2p4)",
        AllocationValidationError,
        "Pipeline parallel size of attn and ffn must be identical: attn p2 ≠ ffn p4 in "
        "'megatron:(attn:d4p2|ffn:d2p4)'",
        21,
    ),
    (
        "megatron:(attn:d4t2|ffn:d2e2)",
        InvalidAllocationModeError,
        "World size of attn and ffn must be identical: attn d4·t2·p1·c1 = 8 ≠ ffn "
        "d2·e2·t1·p1 = 4 in 'megatron:(attn:d4t2|ffn:d2e2)'",
        21,
    ),
    (
        "megatron:(attn:d3|ffn:e2)",
        InvalidAllocationModeError,
        "cannot derive ffn d: attn world d3·t1·p1·c1 = 3 is not divisible by ffn "
        "e2·t1·p1 = 2 in 'megatron:(attn:d3|ffn:e2)'",
        19,
    ),
    (
        "megatron:d4e3",
        AllocationValidationError,
        "expert model-parallel size p1·etp1·e3 = 3 does not divide world size "
        "d4·t1·p1·c1 = 4 in 'megatron:d4e3'",
        None,
    ),
    (
        "sglang:d4+fsdp:d4",
        AllocationSyntaxError,
        "unexpected '+' at column 10 of 'sglang:d4+fsdp:d4': one backend field holds one "
        "component; give each engine its own backend field",
        10,
    ),
    (
        "fsdp:d4|fsdp:d4",
        AllocationSyntaxError,
        "unexpected '|' at column 8 of 'fsdp:d4|fsdp:d4': an engine's backend field holds "
        "one component; to share another engine's GPUs set its scheduling_strategy to "
        "colocation with that target",
        8,
    ),
    (
        "fsdp:d4,t2",
        AllocationSyntaxError,
        "unexpected ',' at column 8 of 'fsdp:d4,t2'; expected a dimension such as d4",
        8,
    ),
    (
        "fsdp:",
        AllocationSyntaxError,
        "unexpected end of input at column 6 of 'fsdp:'; expected '(' or a dimension such as d4",
        6,
    ),
    (
        "fsdp",
        AllocationSyntaxError,
        "unexpected end of input at column 5 of 'fsdp'; expected ':' or '['",
        5,
    ),
    (
        "fsdp[]:d4",
        AllocationSyntaxError,
        "unexpected ']' at column 6 of 'fsdp[]:d4'; expected a name",
        6,
    ),
    (
        "fsdp[1a]:d4",
        AllocationValidationError,
        "name '1a' is not an identifier: use letters, digits and '_', not starting with a digit",
        6,
    ),
    (
        "megatron:()",
        AllocationSyntaxError,
        "unexpected ')' at column 11 of 'megatron:()'; expected 'attn:' or 'ffn:'",
        11,
    ),
    (
        "megatron:(attn:d2|ffn:d2)5",
        AllocationSyntaxError,
        "unexpected '5' at column 26 of 'megatron:(attn:d2|ffn:d2)5'; expected the end",
        26,
    ),
    (
        4,
        AllocationValidationError,
        "allocation string must be a string such as 'fsdp:d4t2', got int 4",
        None,
    ),
    (
        None,
        AllocationValidationError,
        "allocation string must be a string such as 'fsdp:d4t2', got NoneType None",
        None,
    ),
    (
        "fsdp:" + "d1" * 600,
        AllocationValidationError,
        "allocation string is 1205 characters long; the limit is 1000",
        None,
    ),
]


@pytest.mark.parametrize(("spec", "error", "message", "column"), ERRORS)
def test_errors(
    spec: object, error: type[AllocationError], message: str, column: int | None
) -> None:
    with pytest.raises(AllocationError) as info:
        ModelAllocation.from_str(spec)  # type: ignore[arg-type]
    assert type(info.value) is error
    assert isinstance(info.value, ValueError)
    assert info.value.message == message
    assert info.value.column == column


def test_syntax_error_renders_a_caret_under_the_column() -> None:
    with pytest.raises(AllocationSyntaxError) as info:
        ModelAllocation.from_str("fsdp.d4")
    assert str(info.value).splitlines()[1:] == ["    fsdp.d4", "        ^"]
    assert (info.value.text, info.value.column) == ("fsdp.d4", 5)


def test_errors_pickle() -> None:
    import pickle

    with pytest.raises(AllocationError) as info:
        ModelAllocation.from_str("fsdp:d4p2")
    again = pickle.loads(pickle.dumps(info.value))
    assert (type(again), str(again)) == (type(info.value), str(info.value))
