"""Model-shape checks: the numbers Megatron and the inference servers would reject."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from areal_alloc import AllocationValidationError, ModelAllocation, validate
from areal_alloc.model_shape import ModelShape, check_shape, shape_problems

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


QWEN = ModelShape(num_layers=28, num_attention_heads=16, num_key_value_heads=8)
MOE = ModelShape(num_layers=48, num_attention_heads=32, num_key_value_heads=4, num_experts=128)

# (spec, shape) -> problems
PROBLEMS = [
    ("fsdp:d4t2", QWEN, []),
    ("megatron:d1p4t4", QWEN, []),
    (
        "megatron:d1t16",
        QWEN,
        ["num_key_value_heads=8 is not divisible by tensor parallel size t16: 8 % 16 = 8"],
    ),
    # the reference's Megatron engine splits layers unevenly over the stages
    # (areal/engine/megatron_utils/pipeline_parallel.py, AReaL cbff54d6)
    ("megatron:d2p8", QWEN, []),
    (
        "megatron:d1p8",
        ModelShape(num_layers=5),
        [
            "num_layers=5 cannot fill p8·vpp1 = 8 pipeline stages: every stage but the first "
            "and last needs a layer, so at least 6 layers"
        ],
    ),
    # the inference servers split layers unevenly ([3, 3, 4, …]): one layer a stage at least
    ("vllm:d1p8", QWEN, []),
    ("sglang:d1p8", ModelShape(num_layers=8), []),
    (
        "vllm:d1p8",
        ModelShape(num_layers=4),
        [
            "num_layers=4 cannot fill p8 pipeline stages: vllm gives each stage at least one "
            "layer (4 < 8)"
        ],
    ),
    (
        "megatron:d1t3",
        ModelShape(num_attention_heads=16, num_key_value_heads=4),
        [
            "num_attention_heads=16 is not divisible by tensor parallel size t3: 16 % 3 = 1",
            "num_key_value_heads=4 is not divisible by tensor parallel size t3: 4 % 3 = 1",
        ],
    ),
    # inference replicates KV heads when tp is a multiple of them
    ("sglang:d1t8", MOE, []),
    (
        "sglang:d1t8",
        ModelShape(num_attention_heads=24, num_key_value_heads=3),
        [
            "num_key_value_heads=3 and tensor parallel size t8: neither divides the other, so "
            "sglang cannot shard or replicate the KV heads",
        ],
    ),
    ("megatron:d8e8", MOE, []),
    (
        "megatron:d6e3",
        ModelShape(num_experts=64),
        ["num_experts=64 is not divisible by expert parallel size e3: 64 % 3 = 1"],
    ),
    ("megatron:d2p4", ModelShape(num_layers=32, virtual_pipeline_size=3), []),
    (
        "megatron:d2p4",
        ModelShape(num_layers=8, virtual_pipeline_size=3),
        [
            "num_layers=8 cannot fill p4·vpp3 = 12 pipeline stages: every stage but the first "
            "and last needs a layer, so at least 10 layers"
        ],
    ),
    (
        "megatron:d4e4",
        QWEN,
        [
            "expert parallel size e4 needs a mixture-of-experts model, but "
            "model_shape gives no number of experts"
        ],
    ),
]


@pytest.mark.parametrize(("spec", "shape", "problems"), PROBLEMS)
def test_shape_problems(spec: str, shape: ModelShape, problems: list[str]) -> None:
    assert shape_problems(ModelAllocation.from_str(spec), shape) == problems


def test_check_shape_message_names_the_key() -> None:
    with pytest.raises(AllocationValidationError) as info:
        check_shape(ModelAllocation.from_str("megatron:d2t16"), QWEN, "actor.backend")
    assert info.value.message == (
        "actor.backend='megatron:d2t16' does not fit the model (model_shape): "
        "num_key_value_heads=8 is not divisible by tensor parallel size t16: 8 % 16 = 8"
    )


def test_hugging_face_config(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3MoeForCausalLM"],
                "num_hidden_layers": 48,
                "num_attention_heads": 32,
                "num_key_value_heads": 4,
                "num_experts": 128,
                "vocab_size": 151936,
            }
        )
    )
    shape = ModelShape.from_hf_config(tmp_path)
    assert (
        shape.num_layers,
        shape.num_attention_heads,
        shape.num_key_value_heads,
        shape.num_experts,
        shape.vocab_size,
    ) == (48, 32, 4, 128, 151936)
    no_kv = tmp_path / "no_kv"
    no_kv.mkdir()
    (no_kv / "config.json").write_text(json.dumps({"n_layer": 12, "n_head": 12}))
    assert ModelShape.from_hf_config(no_kv).num_key_value_heads == 12


SHAPE_ERRORS = [
    ("missing", "does not exist"),
    ("bad_json", "is not valid JSON: Expecting property name"),
    ("list_json", "is not a JSON object"),
]


@pytest.mark.parametrize(("case", "message"), SHAPE_ERRORS)
def test_bad_hugging_face_config(tmp_path: Path, case: str, message: str) -> None:
    path = tmp_path / "config.json"
    if case == "bad_json":
        path.write_text("{nope")
    elif case == "list_json":
        path.write_text("[1, 2]")
    with pytest.raises(AllocationValidationError, match=message):
        ModelShape.from_hf_config(path)


def test_shape_values_are_checked() -> None:
    with pytest.raises(AllocationValidationError) as info:
        ModelShape(num_layers=0)
    assert info.value.message == (
        "model_shape: num_layers=0: must be an integer from 1 to 1,099,511,627,776"
    )


def _experiment(**extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8},
        "rollout": {"backend": "sglang:d2t4"},
        "actor": {"backend": "megatron:d1p8"},
    }
    config.update(extra)
    return config


def test_the_hook_checks_the_experiment_shape() -> None:
    with pytest.raises(AllocationValidationError) as info:
        validate(_experiment(model_shape={"num_layers": 5}))
    assert info.value.message.startswith(
        "actor.backend='megatron:d1p8' does not fit the model (model_shape): num_layers=5"
    )
    assert validate(_experiment(model_shape={"num_layers": 28})).total_gpus == 16


def test_the_hook_reads_a_local_model_path(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps({"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4})
    )
    config = _experiment()
    config["actor"] = {"backend": "megatron:d1t8", "path": str(tmp_path)}
    with pytest.raises(AllocationValidationError, match=r"\(.*config\.json\): num_attention_h"):
        validate(config)
    # the rollout serves the same model: t4 with 4 KV heads and 28 heads is fine
    config["actor"] = {"backend": "megatron:d2p4", "path": str(tmp_path)}
    assert validate(config).total_gpus == 16
    # a catalogue name is checked as well (28 heads); an unknown hub id cannot be
    config["actor"] = {"backend": "megatron:d1t8", "path": "Qwen/Qwen2.5-7B"}
    with pytest.raises(AllocationValidationError, match=r"\(actor.path='Qwen/Qwen2.5-7B'\)"):
        validate(config)
    config["actor"] = {"backend": "megatron:d1t8", "path": "some-org/not-a-known-model"}
    assert validate(config).total_gpus == 16


def test_a_teacher_has_its_own_shape() -> None:
    config = _experiment(
        model_shape={"num_layers": 32},
        teacher={
            "backend": "vllm:d1t8",
            "model_shape": {"num_attention_heads": 12, "num_key_value_heads": 12},
        },
    )
    config["cluster"] = {"n_nodes": 3, "n_gpus_per_node": 8}
    with pytest.raises(AllocationValidationError) as info:
        validate(config)
    assert info.value.message.startswith(
        "teacher.backend='vllm:d1t8' does not fit the model (teacher.model_shape): "
        "num_attention_heads=12 is not divisible by tensor parallel size t8"
    )


@pytest.mark.parametrize(
    ("model_type", "refused"),
    [
        ("qwen3", True),  # apply_cp's validate_cp_constraints: 16 heads % c3
        (None, True),
        # parallelize_qwen3_5 ignores t, c and e with a warning (archon/qwen3_5/infra/
        # parallelize.py l.95-111 at cbff54d6): no head check runs
        ("qwen3_5_moe_text", False),
        ("qwen3_5", False),
    ],
)
def test_archon_checks_no_heads_of_a_model_it_builds_data_parallel_only(
    tmp_path: Path, model_type: str | None, refused: bool
) -> None:
    config: dict[str, object] = {
        "num_hidden_layers": 8,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
    }
    if model_type is not None:
        config["model_type"] = model_type
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = ModelShape.from_hf_config(tmp_path)
    assert shape.model_type == model_type
    for spec in ("archon:d2c3", "archon:d2t3"):
        problems = shape_problems(ModelAllocation.from_str(spec), shape)
        assert bool(problems) is refused, (spec, problems)
    # the FSDP engine's Ulysses patch checks every model's heads
    assert shape_problems(ModelAllocation.from_str("fsdp:d2c3"), shape)
