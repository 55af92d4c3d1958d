"""The deprecated multi-component allocation_mode: reading it and migrating it."""

from __future__ import annotations

import pytest

from areal_alloc import AllocationError, AllocationValidationError
from areal_alloc.legacy import migration_overrides, parse_allocation_mode

# text -> [(name, backend, parallel world size, scheduling type, target)], mode world size
LEGACY = [
    (
        "sglang:d4+fsdp:d4",
        [(None, "sglang", 4, "separation", None), (None, "fsdp", 4, "separation", None)],
        8,
    ),
    (
        "sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4",
        [
            ("rollout", "sglang", 2, "separation", None),
            ("actor", "fsdp", 4, "separation", None),
            ("critic", "fsdp", 4, "colocation", "actor"),
        ],
        6,
    ),
    (
        "vllm:d2t4+megatron:d2p2t1",
        [(None, "vllm", 8, "separation", None), (None, "megatron", 4, "separation", None)],
        12,
    ),
    (
        "sglang:d4p1t2+megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)",
        [(None, "sglang", 8, "separation", None), (None, "megatron", 32, "separation", None)],
        40,
    ),
    (
        "vllm[rollout1]:d2t2 + fsdp[actor1]:d4 + vllm[rollout2]:d4 + fsdp[actor2]:d4",
        [
            ("rollout1", "vllm", 4, "separation", None),
            ("actor1", "fsdp", 4, "separation", None),
            ("rollout2", "vllm", 4, "separation", None),
            ("actor2", "fsdp", 4, "separation", None),
        ],
        16,
    ),
]


@pytest.mark.parametrize(("text", "components", "world"), LEGACY)
def test_legacy_strings(text: str, components: list[tuple[object, ...]], world: int) -> None:
    mode = parse_allocation_mode(text)
    got = [
        (
            a.name,
            a.backend,
            a.parallel.world_size,
            a.scheduling_strategy.type,
            a.scheduling_strategy.target,
        )
        for a in mode.allocations
    ]
    assert got == components
    assert mode.world_size == world
    assert parse_allocation_mode(str(mode)) == mode


def test_lookup_by_name_and_compat_properties() -> None:
    mode = parse_allocation_mode("sglang[rollout]:d2t4p2+fsdp[actor]:d4|fsdp[critic]:d4")
    assert mode["actor"].backend == "fsdp"
    assert "critic" in mode
    with pytest.raises(KeyError, match="no allocation named 'ref'"):
        mode["ref"]
    assert mode.gen is not None
    assert mode.gen.tp_size == 4
    assert (mode.gen_backend, mode.gen_instance_size) == ("sglang", 8)
    with pytest.raises(AttributeError, match="Ambiguous: 2 training allocations"):
        _ = mode.train
    with pytest.raises(AttributeError, match="Ambiguous"):
        _ = mode.train_backend
    simple = parse_allocation_mode("vllm:d2t4+megatron:d2p2t1")
    assert simple.train is not None
    assert simple.train.pp_size == 2
    assert (simple.train_backend, simple.gen_backend, simple.gen_instance_size) == (
        "megatron",
        "vllm",
        4,
    )
    training_only = parse_allocation_mode("fsdp:d8")
    assert (training_only.gen, training_only.gen_backend, training_only.gen_instance_size) == (
        None,
        None,
        None,
    )


def test_bar_binds_tighter_than_plus() -> None:
    mode = parse_allocation_mode("sglang[r]:d4+fsdp[a]:d4|fsdp[c]:d4")
    assert [a.world_size for a in mode.allocations] == [4, 4, 0]


LEGACY_ERRORS = [
    # a bare hybrid layout is one layout missing its backend, with or without parentheses
    (
        "attn:d4p2t2c2|ffn:d2p2t4e2",
        "Backend must be explicitly specified in '(attn:d4p2t2c2|ffn:d2p2t4e2)': hybrid "
        "attn/ffn layouts run on megatron or archon; write e.g. "
        "'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'",
    ),
    (
        "(attn:d4p2t2c2|ffn:d2p2t4e2)",
        "Backend must be explicitly specified in '(attn:d4p2t2c2|ffn:d2p2t4e2)': hybrid "
        "attn/ffn layouts run on megatron or archon; write e.g. "
        "'megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'",
    ),
    (
        "sglang:d4+d4",
        "Backend must be explicitly specified in 'd4': the backend says which "
        "engine runs the layout; write e.g. 'fsdp:d4'",
    ),
    (
        "fsdp[a]:d4|fsdp:d4",
        "colocated components need names in 'fsdp[a]:d4|fsdp:d4': write e.g. "
        "'fsdp[actor]:d4|fsdp[critic]:d4'",
    ),
    (
        "sglang[r]:d4+fsdp[a]:d4|fsdp[c]:d8",
        "fsdp[c]:d8: colocated with fsdp[a]:d4 it must span the same GPUs, but its world size "
        "is 8 and fsdp[a]:d4's is 4",
    ),
    (
        "sglang[r]:d4+fsdp:d4+fsdp[c]:d4",
        "with 3 components every component needs a name in 'sglang[r]:d4+fsdp:d4+fsdp[c]:d4', "
        "e.g. 'sglang[rollout]:d2+fsdp[actor]:d4'",
    ),
    (
        "sglang[a]:d4+fsdp[a]:d4",
        "name 'a' is used twice in 'sglang[a]:d4+fsdp[a]:d4'; names must be unique",
    ),
    (
        "sglang:d4+",
        "unexpected end of input at column 11 of 'sglang:d4+'; expected '(', "
        "'[', a backend such as fsdp or a dimension such as d4",
    ),
]


@pytest.mark.parametrize(("text", "message"), LEGACY_ERRORS)
def test_legacy_errors(text: str, message: str) -> None:
    with pytest.raises(AllocationError) as info:
        parse_allocation_mode(text)
    assert info.value.message == message


MIGRATIONS = [
    ("sglang:d4+fsdp:d4", ("++rollout.backend=sglang:d4", "++actor.backend=fsdp:d4"), False),
    (
        "sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4",
        (
            "++rollout.backend=sglang:d2",
            "++actor.backend=fsdp:d4",
            "++critic.backend=fsdp:d4",
            "++critic.scheduling_strategy.type=colocation",
            "++critic.scheduling_strategy.target=actor",
        ),
        False,
    ),
    (
        "sglang:d4p1t2+megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)",
        (
            "++rollout.backend=sglang:d4t2",
            "\"++actor.backend='megatron:(attn:d4p2t2c2|ffn:d2p2t4e2)'\"",
        ),
        False,
    ),
    ("sglang:d1+d1", ("++rollout.backend=sglang:d1", "++actor.backend=fsdp:d1"), True),
    ("vllm:d4p1t2+d4p1t1c2", ("++rollout.backend=vllm:d4t2", "++actor.backend=fsdp:d4c2"), True),
    ("vllm:d4+d2p2", ("++rollout.backend=vllm:d4", "++actor.backend=megatron:d2p2"), True),
]


@pytest.mark.parametrize(("text", "overrides", "suggested"), MIGRATIONS)
def test_migration(text: str, overrides: tuple[str, ...], suggested: bool) -> None:
    migration = migration_overrides(text)
    assert migration.overrides == overrides
    assert any(a.suggested_backend for a in migration.assignments) is suggested
    assert any("suggestion" in note for note in migration.notes) is suggested


def test_migration_yaml() -> None:
    text = migration_overrides("sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4").yaml()
    assert text == (
        "rollout:\n  backend: sglang:d2\nactor:\n  backend: fsdp:d4\ncritic:\n"
        "  backend: fsdp:d4\n  scheduling_strategy:\n    type: colocation\n    target: actor\n"
    )


def test_migration_of_unknown_engine_names_says_so() -> None:
    migration = migration_overrides("vllm[rollout1]:d2t2+fsdp[actor1]:d4+vllm[rollout2]:d4")
    assert migration.overrides[0] == "++rollout1.backend=vllm:d2t2"
    assert any("'rollout1' is not one of the engines" in note for note in migration.notes)


def test_migration_of_too_many_unnamed_inference_components() -> None:
    with pytest.raises(AllocationValidationError, match="cannot tell which engine"):
        migration_overrides("sglang:d4+vllm:d4")
