"""The models built directly: ParallelStrategy, SchedulingStrategy, ModelAllocation."""

from __future__ import annotations

import pytest

from areal_alloc import (
    AllocationValidationError,
    ModelAllocation,
    ParallelStrategy,
    SchedulingStrategy,
    SchedulingStrategyType,
)

# ParallelStrategy / SchedulingStrategy built directly
STRATEGY_ERRORS = [
    ({"tensor_parallel_size": 0}, "tensor_parallel_size (t) must be ≥ 1, got 0"),
    ({"data_parallel_size": -2}, "data_parallel_size (d) must be ≥ 1, got -2"),
    ({"pipeline_parallel_size": 2.0}, "pipeline_parallel_size (p) must be an integer ≥ 1, got 2.0"),
    ({"context_parallel_size": True}, "context_parallel_size (c) must be an integer ≥ 1, got True"),
    (
        {"data_parallel_size": 4, "expert_parallel_size": 3},
        "expert model-parallel size p1·etp1·e3 = 3 does not divide world size d4·t1·p1·c1 = 4",
    ),
]


@pytest.mark.parametrize(("kwargs", "message"), STRATEGY_ERRORS)
def test_parallel_strategy_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        ParallelStrategy(**kwargs)  # type: ignore[arg-type]
    assert info.value.message == message


def test_parallel_strategy_properties() -> None:
    p = ParallelStrategy(
        tensor_parallel_size=2,
        pipeline_parallel_size=2,
        data_parallel_size=4,
        context_parallel_size=2,
        expert_parallel_size=2,
        expert_tensor_parallel_size=4,
    )
    assert (p.tp_size, p.pp_size, p.dp_size, p.cp_size, p.ep_size, p.etp_size) == (2, 2, 4, 2, 2, 4)
    assert (p.world_size, p.edp_size, p.expert_model_parallel_size) == (32, 2, 16)
    assert ParallelStrategy().world_size == 1
    # without experts the expert data-parallel size is the data-parallel size
    assert ParallelStrategy(data_parallel_size=4, tensor_parallel_size=2).edp_size == 4


SCHEDULING_ERRORS = [
    (("gang",), "scheduling type 'gang' is not allowed; use 'separation' or 'colocation'"),
    (
        ("colocation",),
        "colocation needs a target: the engine whose GPUs are shared, e.g. "
        "SchedulingStrategy('colocation', target='actor')",
    ),
    (
        ("separation", "actor"),
        "separation takes no target, got target='actor'; use type='colocation' to share "
        "'actor''s GPUs",
    ),
]


@pytest.mark.parametrize(("args", "message"), SCHEDULING_ERRORS)
def test_scheduling_errors(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        SchedulingStrategy(*args)
    assert info.value.message == message


def test_scheduling_type_is_a_str_enum() -> None:
    s = SchedulingStrategy("colocation", "actor")
    assert s.type == "colocation"
    assert str(s.type) == "colocation"
    assert SchedulingStrategy().type == "separation"
    assert hash(SchedulingStrategy("colocation", "a")) == hash(
        SchedulingStrategy(SchedulingStrategyType.colocation, "a")
    )


MODEL_ERRORS = [
    (
        ("fdsp", None, ParallelStrategy()),
        "unknown backend 'fdsp'; did you mean 'fsdp'? backends are fsdp, megatron, archon "
        "(training); sglang, vllm (inference)",
    ),
    (
        ("tpu", None, ParallelStrategy()),
        "unknown backend 'tpu'; backends are fsdp, megatron, archon (training); sglang, "
        "vllm (inference)",
    ),
    (
        ("fsdp", "a b", ParallelStrategy()),
        "allocation name 'a b' is not an identifier: use letters, digits and '_', not "
        "starting with a digit",
    ),
    (
        ("sglang", None, ParallelStrategy(context_parallel_size=2)),
        "sglang does not support context parallelism (c2); inference backends take d, t, p",
    ),
    (
        (
            "fsdp",
            None,
            ParallelStrategy(
                expert_tensor_parallel_size=1,
                expert_parallel_size=1,
                tensor_parallel_size=2,
                data_parallel_size=2,
                pipeline_parallel_size=2,
            ),
        ),
        "FSDP backend only supports data/tensor/context parallelism (d, t, c), got "
        "pipeline parallelism (p2); use megatron or archon for p",
    ),
    (
        ("fsdp", None, ParallelStrategy(data_parallel_size=2, expert_tensor_parallel_size=2)),
        "fsdp does not support expert tensor parallelism (etp2); only megatron, archon "
        "take hybrid attn/ffn layouts",
    ),
]


@pytest.mark.parametrize(("args", "message"), MODEL_ERRORS)
def test_model_allocation_errors(args: tuple[object, ...], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        ModelAllocation(*args)  # type: ignore[arg-type]
    assert info.value.message == message


def test_inference_instances() -> None:
    rollout = ModelAllocation.from_str("sglang:d2t4")
    assert (rollout.is_inference, rollout.n_instances, rollout.instance_size) == (True, 2, 4)
    actor = ModelAllocation.from_str("megatron:d2p2t4")
    assert (actor.is_training, actor.n_instances, actor.instance_size) == (True, 1, 16)


def test_removed_allocation_mode_class_explains_the_migration() -> None:
    import areal_alloc

    with pytest.raises(AttributeError, match=r"per-engine|backend field") as info:
        areal_alloc.AllocationMode  # noqa: B018
    assert "rollout.backend=sglang:d4 actor.backend=fsdp:d4" in str(info.value)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        areal_alloc.nothing  # noqa: B018
