"""From a composed config to the plan: engines, run rules, capacity, placement, errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

import areal_alloc
from areal_alloc import AllocationError, AllocationValidationError, validate

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


DATA = Path(__file__).parents[1] / "data"


def cfg(**sections: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"cluster": {"n_nodes": 2, "n_gpus_per_node": 8}}
    out.update(sections)
    return out


def colocated(target: str, backend: str = "") -> dict[str, Any]:
    return {"backend": backend, "scheduling_strategy": {"type": "colocation", "target": target}}


# config -> {engine: (gpus, active, scheduling target)}, total
PLANS = [
    (
        cfg(
            rollout={"backend": "sglang:d2t4"},
            actor={"backend": "fsdp:d4t2"},
            ref=colocated("actor"),
        ),
        {"rollout": (8, True, None), "actor": (8, True, None), "ref": (0, True, "actor")},
        16,
    ),
    (  # an empty critic/ref backend takes the actor's; an explicit one is kept
        cfg(
            rollout={"backend": "sglang:d4"},
            actor={"backend": "fsdp:d4"},
            critic={"backend": ""},
            ref={"backend": "fsdp:d2t2"},
        ),
        {
            "rollout": (4, True, None),
            "actor": (4, True, None),
            "critic": (4, True, None),
            "ref": (4, True, None),
        },
        16,
    ),
    (  # ref is not created when actor.kl_ctl is 0
        cfg(
            rollout={"backend": "sglang:d4"},
            actor={"backend": "fsdp:d4", "kl_ctl": 0.0},
            ref={"backend": "fsdp:d8"},
        ),
        {"rollout": (4, True, None), "actor": (4, True, None), "ref": (0, False, None)},
        8,
    ),
    (  # awex weight updates with the v1 controller colocate rollout on the actor
        cfg(
            rollout={"backend": "sglang:d2t4"},
            actor={"backend": "megatron:d8", "weight_update_mode": "awex"},
        ),
        {"rollout": (0, True, "actor"), "actor": (8, True, None)},
        8,
    ),
    (  # ... but not with another controller version
        cfg(
            rollout={"backend": "sglang:d2t4", "_version": "v2"},
            actor={"backend": "fsdp:d8", "weight_update_mode": "awex", "_version": "v2"},
        ),
        {"rollout": (8, True, None), "actor": (8, True, None)},
        16,
    ),
    (  # teacher as a training engine
        cfg(
            rollout={"backend": "sglang:d4"},
            actor={"backend": "fsdp:d4"},
            teacher={"backend": "fsdp:d1t4"},
        ),
        {"rollout": (4, True, None), "teacher": (4, True, None), "actor": (4, True, None)},
        12,
    ),
    (  # teacher as an inference engine, the nested spelling
        cfg(
            rollout={"backend": "sglang:d4"},
            actor={"backend": "fsdp:d4"},
            teacher={"engine_type": "rollout", "rollout": {"backend": "vllm:d1t2"}},
        ),
        {"rollout": (4, True, None), "teacher": (2, True, None), "actor": (4, True, None)},
        10,
    ),
    (
        cfg(
            actor={"backend": "fsdp:d4"},
            teacher={"engine_type": "train", "train": {"backend": "megatron:d2p2"}},
        ),
        {"teacher": (4, True, None), "actor": (4, True, None)},
        8,
    ),
    (  # CPU-only: no capacity check
        {
            "cluster": {"n_nodes": 1, "n_gpus_per_node": 0},
            "rollout": {"backend": "sglang:d64"},
            "actor": {"backend": "fsdp:d64"},
        },
        {"rollout": (64, True, None), "actor": (64, True, None)},
        128,
    ),
]


@pytest.mark.parametrize(("config", "engines", "total"), PLANS)
def test_plans(config: dict[str, Any], engines: dict[str, tuple[Any, ...]], total: int) -> None:
    plan = validate(config)
    got = {e.key: (e.gpus, e.active, e.allocation.scheduling_strategy.target) for e in plan.engines}
    assert got == engines
    assert plan.total_gpus == total
    assert validate(OmegaConf.create(config)).total_gpus == total


def test_plan_notes_say_why() -> None:
    plan = validate(
        cfg(
            rollout={"backend": "sglang:d2t4"},
            actor={"backend": "megatron:d8", "weight_update_mode": "awex", "kl_ctl": 0},
            ref={"backend": ""},
            critic={"backend": ""},
        )
    )
    assert plan["ref"].note == "inactive: actor.kl_ctl=0, so the run creates no reference model"
    assert plan["critic"].note == "backend from actor.backend"
    assert plan["rollout"].note == (
        "colocated with actor: actor.weight_update_mode=awex with the v1 controller shares "
        "the actor's GPUs"
    )


# config -> exact message
PLAN_ERRORS = [
    (
        cfg(actor={"backend": "fsdp:d4p2"}),
        "actor.backend='fsdp:d4p2': FSDP backend only supports data/tensor/context "
        "parallelism (d, t, c), got pipeline parallelism (p2); use megatron or archon for p",
    ),
    (
        cfg(actor={"backend": "fsdp.d4"}),
        "actor.backend='fsdp.d4': unexpected '.' at column 5 of 'fsdp.d4': use ':' between "
        "the backend and its dimensions, e.g. 'fsdp:d4'",
    ),
    (
        cfg(actor={"backend": 4}),
        "actor.backend=4: must be a string such as 'fsdp:d4'",
    ),
    (
        cfg(actor={"backend": ""}),
        "actor.backend is empty: set it, e.g. ++actor.backend=fsdp:d4",
    ),
    (
        cfg(rollout={"backend": "fsdp:d4"}, actor={"backend": "fsdp:d4"}),
        "rollout.backend='fsdp:d4': rollout is an inference engine; use sglang or vllm "
        "(fsdp, megatron and archon train)",
    ),
    (
        cfg(rollout={"backend": "sglang:d4"}, actor={"backend": "vllm:d4"}),
        "actor.backend='vllm:d4': actor is a training engine; use fsdp, megatron or archon "
        "(sglang and vllm serve the rollout)",
    ),
    (
        cfg(actor={"backend": "fsdp:d4"}, ref=colocated("critic")),
        "ref.scheduling_strategy.target='critic': no such engine; configured engines: actor",
    ),
    (
        cfg(actor={"backend": "fsdp:d4"}, ref=colocated("")),
        "ref.scheduling_strategy.target is empty: colocation needs a target: the engine whose "
        "GPUs are shared, e.g. ref.scheduling_strategy.target=actor",
    ),
    (
        cfg(actor={"backend": "fsdp:d4", "scheduling_strategy": {"type": "gang"}}),
        "actor.scheduling_strategy.type='gang': scheduling type 'gang' is not allowed; use "
        "'separation' or 'colocation'",
    ),
    (
        cfg(actor={"backend": "fsdp:d4"}, critic=colocated("actor"), ref=colocated("critic")),
        "ref.scheduling_strategy.target='critic': critic is itself colocated onto 'actor'; "
        "colocate onto an engine with its own GPUs",
    ),
    (
        cfg(actor={"backend": "fsdp:d4"}, ref=colocated("actor", "fsdp:d8")),
        "ref.backend='fsdp:d8' (actor.backend='fsdp:d4'): colocated with actor it must span "
        "the same GPUs, but its world size is 8 and actor's is 4",
    ),
    (
        cfg(
            actor={"backend": "fsdp:d4", "kl_ctl": 0.0},
            ref={"backend": ""},
            critic=colocated("ref"),
        ),
        "critic.scheduling_strategy.target='ref': ref is inactive (inactive: actor.kl_ctl=0.0, "
        "so the run creates no reference model), so there are no GPUs to share",
    ),
    (
        cfg(rollout={"backend": "sglang:d2t4"}, actor={"backend": "fsdp:d8t2"}),
        "the engines need 24 GPUs but the cluster has cluster.n_nodes=2 × "
        "cluster.n_gpus_per_node=8 = 16: rollout sglang:d2t4 8 + actor fsdp:d8t2 16 = 24",
    ),
    (
        cfg(rollout={"backend": "sglang:d1t12"}, actor={"backend": "fsdp:d4"}),
        "rollout.backend='sglang:d1t12': one sglang instance spans t12·p1 = 12 GPUs, more "
        "than cluster.n_gpus_per_node=8 and not whole nodes (12 % 8 = 4); a server wider "
        "than a node takes whole nodes: use 8 or 16 GPUs per instance",
    ),
    (
        {"cluster": {"n_nodes": 0}, "actor": {"backend": "fsdp:d4"}},
        "cluster.n_nodes=0: must be an integer from 1 to 131,072, e.g. cluster.n_nodes=32",
    ),
    (
        {"cluster": {"n_gpus_per_node": "eight"}, "actor": {"backend": "fsdp:d4"}},
        "cluster.n_gpus_per_node='eight': must be an integer from 0 to 1,024, e.g. "
        "cluster.n_gpus_per_node=8",
    ),
    (
        {"cluster": {}, "trainer": {"backend": "fsdp:d4"}},
        "no engine found: the config needs at least one of rollout, teacher, actor, critic, "
        "ref with a backend field, e.g. actor.backend=fsdp:d4",
    ),
    (
        cfg(actor={"backend": "fsdp:d4"}, teacher={"engine_type": "judge"}),
        "teacher.engine_type='judge': must be 'rollout' or 'train'",
    ),
    (
        cfg(actor="fsdp:d4"),
        "actor='fsdp:d4': actor must be a mapping (a section with a backend field), not str; "
        "e.g. actor.backend=fsdp:d4",
    ),
    (
        cfg(allocation_mode="sglang:d4+fsdp:d4", actor={"backend": "fsdp:d4"}),
        "allocation_mode='sglang:d4+fsdp:d4' is deprecated: the single-controller scheduler "
        "ignores it and only the legacy SPMD launchers (areal.infra.launcher.local, ray, slurm) "
        "still read it; remove it and give each engine its own backend field: "
        "++rollout.backend=sglang:d4 "
        "++actor.backend=fsdp:d4",
    ),
    (
        cfg(allocation_mode="sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4"),
        "allocation_mode='sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4' is deprecated: "
        "the single-controller scheduler ignores it and only the legacy SPMD launchers "
        "(areal.infra.launcher.local, ray, slurm) still read it; remove it and give each engine "
        "its own backend field: "
        "++rollout.backend=sglang:d2 ++actor.backend=fsdp:d4 ++critic.backend=fsdp:d4 "
        "++critic.scheduling_strategy.type=colocation ++critic.scheduling_strategy.target=actor",
    ),
    (
        cfg(allocation_mode="vllm:d4p1t2+d4p1t1c2"),
        "allocation_mode='vllm:d4p1t2+d4p1t1c2' is deprecated: the single-controller scheduler "
        "ignores it and only the legacy SPMD launchers (areal.infra.launcher.local, ray, slurm) "
        "still read it; remove it and give each engine its own backend field: "
        "++rollout.backend=vllm:d4t2 "
        "++actor.backend=fsdp:d4c2 (bare dimensions 'd4p1t1c2' get 'fsdp', the backend the old "
        "automatic choice took (fsdp unless p or e > 1, else megatron); this is a suggestion, "
        "check it)",
    ),
]


@pytest.mark.parametrize(("config", "message"), PLAN_ERRORS)
def test_plan_errors(config: dict[str, Any], message: str) -> None:
    for form in (config, OmegaConf.create(config)):
        with pytest.raises(AllocationValidationError) as info:
            validate(form)
        assert info.value.message == message


def test_placement_of_the_default_experiment() -> None:
    plan = validate(
        cfg(
            rollout={"backend": "sglang:d2t4"},
            actor={"backend": "fsdp:d4t2"},
            ref=colocated("actor"),
        )
    )
    placed = {p.key: (p.gpus, p.shared_with) for p in plan.placements}
    assert placed == {
        "rollout": (tuple(range(8)), ()),
        "actor": (tuple(range(8, 16)), ("ref",)),
    }
    assert plan.warnings == ()
    as_dict = plan.to_dict()
    assert as_dict["placements"][1]["gpu_ranges"] == [
        {"start": 8, "stop": 16, "first_node": 1, "last_node": 1}
    ]


def test_inference_instances_do_not_straddle_nodes() -> None:
    # rollout takes 6 GPUs of node 0; the teacher's 4-GPU instance starts on node 1
    plan = validate(
        cfg(
            rollout={"backend": "sglang:d3t2"},
            teacher={"backend": "vllm:d1t4"},
            actor={"backend": "fsdp:d4"},
        )
    )
    placed = {p.key: p.gpus for p in plan.placements}
    assert placed["rollout"] == (0, 1, 2, 3, 4, 5)
    assert placed["teacher"] == (8, 9, 10, 11)
    assert placed["actor"] == (12, 13, 14, 15)


def test_placement_that_cannot_fit_after_alignment() -> None:
    with pytest.raises(AllocationValidationError, match="does not fit"):
        validate(
            cfg(
                rollout={"backend": "sglang:d3t2"},
                teacher={"backend": "vllm:d1t4"},
                actor={"backend": "fsdp:d6"},
            )
        )


def test_tensor_parallel_group_crossing_nodes_is_flagged() -> None:
    plan = validate(cfg(rollout={"backend": "sglang:d1t2"}, actor={"backend": "megatron:d1t8"}))
    assert plan.warnings == (
        "actor: 1 tensor-parallel group(s) cross nodes, e.g. GPUs 2-9 on nodes 0 and 1; "
        "tensor-parallel traffic would go over the network",
    )


def test_real_experiment_file_with_many_unrelated_keys() -> None:
    loaded = OmegaConf.load(DATA / "real_grpo.yaml")
    plan = areal_alloc.validate(loaded)
    assert [(e.key, e.spec, e.gpus, e.active) for e in plan.engines] == [
        ("rollout", "sglang:d4t2", 8, True),
        ("actor", "fsdp:d8", 8, True),
        ("ref", "fsdp:d8", 0, False),
    ]
    # t of rollout.backend sets the servers' tp_size: the reference's SGLangConfig has no
    # such key (areal_alloc.experiment.reference_keys), so the file does not write it
    assert "tp_size" not in loaded.sglang


@pytest.mark.parametrize(
    ("backend", "message"),
    [
        (
            "${nothing.here}",
            "actor.backend: cannot be resolved: Interpolation key 'nothing.here' not found",
        ),
        (
            "${alloc.world_size:fsdp:d4p2}",
            "actor.backend: cannot be resolved: FSDP backend "
            "only supports data/tensor/context parallelism (d, t, c), got pipeline parallelism "
            "(p2); use megatron or archon for p",
        ),
    ],
)
def test_unresolvable_interpolations_name_the_key(backend: str, message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate(OmegaConf.create({"actor": {"backend": backend}}))
    assert info.value.message == message


def test_validate_rejects_non_mappings() -> None:
    with pytest.raises(AllocationError, match="expected a config mapping"):
        validate(["actor"])
