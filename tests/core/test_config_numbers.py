"""Every numeric setting of an experiment and of a config.json: a number inside its bound,
or one line naming the key, quoting the value and stating what is allowed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from areal_alloc import validate
from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import MODELS
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.model_shape import ModelShape
from areal_alloc.plan import plan_config

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


BIG = "1" * 400
COUNT = "must be an integer from 1 to 1,099,511,627,776"
LIMIT = "the limit is 1,099,511,627,776"
SECTION = "must be a section (a mapping of keys), not"


def _cfg(**extra: Any) -> dict[str, Any]:
    """A run whose memory and pace are estimated (a catalogue model on a catalogue GPU),
    with ``a__b=value`` keys set."""
    cfg: dict[str, Any] = {
        "cluster": {"n_nodes": 2, "n_gpus_per_node": 8, "gpu": "H100-80GB"},
        "actor": {
            "backend": "fsdp:d8",
            "path": "Qwen/Qwen3-8B",
            "gradient_checkpointing": True,
            "mb_spec": {"max_tokens_per_mb": 16384},
        },
        "rollout": {"backend": "sglang:d4t2"},
    }
    for dotted, value in extra.items():
        node = cfg
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return cfg


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        # floats: finite, bounded, no booleans; 400 digits answered without OverflowError
        ({"actor__kl_ctl": BIG}, "actor.kl_ctl=a 400-digit number: the limit is 1,000,000"),
        (
            {"actor__kl_ctl": int(BIG)},
            "actor.kl_ctl=a 400-digit number: the limit is 1,000,000",
        ),
        (
            {"actor__kl_ctl": "abc"},
            "actor.kl_ctl='abc': must be a number from -1,000,000 to 1,000,000",
        ),
        (
            {"actor__kl_ctl": float("nan")},
            "actor.kl_ctl=nan: must be a number from -1,000,000 to 1,000,000",
        ),
        (
            {"sglang__mem_fraction_static": BIG},
            "sglang.mem_fraction_static=a 400-digit number: the limit is 1",
        ),
        (
            {"sglang__mem_fraction_static": True},
            "sglang.mem_fraction_static=true: must be a number above 0 and at most 1, "
            "not a boolean",
        ),
        (
            {"cluster__gpu_memory_gib": True},
            "cluster.gpu_memory_gib=true: must be a number of GiB above 0 and at most 65,536, "
            "not a boolean",
        ),
        (
            {"cluster__gpu_memory_gib": int(BIG)},
            "cluster.gpu_memory_gib=a 400-digit number: the limit is 65,536 GiB",
        ),
        (
            {"cluster__memory_reserve_gib": float("inf")},
            "cluster.memory_reserve_gib=inf: the limit is 1,024 GiB",
        ),
        (  # once ignored: the default network was used instead
            {"cluster__inter_node_gbps": "abc"},
            "cluster.inter_node_gbps='abc': must be a number of Gb/s above 0 and at most "
            "1,000,000",
        ),
        (
            {"cluster__peak_tflops": 0},
            "cluster.peak_tflops=0: must be a number of TFLOP/s above 0 and at most 1,000,000",
        ),
        # counts: integers by type, ASCII digits, the bound named
        (
            {"actor__mb_spec__max_tokens_per_mb": True},
            f"actor.mb_spec.max_tokens_per_mb=true: {COUNT}, not a boolean",
        ),
        (
            {"actor__mb_spec__max_tokens_per_mb": BIG},
            f"actor.mb_spec.max_tokens_per_mb=a 400-digit number: {LIMIT}",
        ),
        ({"gconfig__n_samples": int(BIG)}, f"gconfig.n_samples=a 400-digit number: {LIMIT}"),
        ({"gconfig__n_samples": True}, f"gconfig.n_samples=true: {COUNT}, not a boolean"),
        ({"train_dataset__batch_size": "٤"}, f"train_dataset.batch_size='٤': {COUNT}"),
        ({"train_dataset__batch_size": 2**41}, f"train_dataset.batch_size=2,199,023,255,552: {LIMIT}"),  # noqa: E501
        (
            {"sglang__context_length": 10**5000},
            f"sglang.context_length=a 5001-digit number: {LIMIT}",
        ),
        ({"rollout__max_concurrent_rollouts": 2.5}, f"rollout.max_concurrent_rollouts=2.5: {COUNT}"),  # noqa: E501
        (
            {"cluster__n_nodes": True},
            "cluster.n_nodes=true: must be an integer from 1 to 131,072, not a boolean, "
            "e.g. cluster.n_nodes=32",
        ),
        # sections of the wrong type are named, not ignored
        ({"actor__mb_spec": "abc"}, f"actor.mb_spec='abc': {SECTION} str"),
        ({"gconfig": "abc"}, f"gconfig='abc': {SECTION} str"),
        ({"actor__megatron": [1]}, f"actor.megatron=[1]: {SECTION} list"),
        ({"actor__optimizer": "sgd"}, f"actor.optimizer='sgd': {SECTION} str"),
        ({"sglang": 3}, f"sglang=3: {SECTION} int"),
    ],
)  # fmt: skip
def test_a_bad_setting_is_one_line_naming_its_key(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        plan_config(_cfg(**extra))
    assert info.value.message == message


@pytest.mark.parametrize(("value", "active"), [("0", False), ("0.1", True), (0, False), (1, True)])
def test_kl_ctl_written_as_a_string_reads_as_the_number(value: object, active: bool) -> None:
    cfg = _cfg(ref={"backend": "fsdp:d8"}, cluster__n_nodes=4)
    cfg["actor"]["kl_ctl"] = value
    assert plan_config(cfg, on_memory="off")["ref"].active is active


def test_a_mandatory_backend_left_unset_is_named() -> None:
    cfg = OmegaConf.create({"actor": {"backend": "???"}, "rollout": {"backend": "sglang:d4"}})
    with pytest.raises(AllocationValidationError) as info:
        validate(cfg)
    assert info.value.message == (
        "actor.backend=???: a mandatory value (OmegaConf MISSING) that is not set; give it a value"
    )
    # other mandatory keys of a section (experiment_name: ???) configure nothing
    quiet = OmegaConf.create(
        {"actor": {"experiment_name": "???"}, "rollout": {"backend": "sglang:d4"}}
    )
    assert [e.key for e in validate(quiet).engines] == ["rollout"]


# --- config.json ----------------------------------------------------------------------

QWEN3 = MODELS["qwen/qwen3-8b"].config
MOE = MODELS["qwen/qwen3-30b-a3b"].config
DEEPSEEK = MODELS["deepseek-ai/deepseek-v3"].config
NO_HEAD_DIM = {k: v for k, v in QWEN3.items() if k != "head_dim"}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (  # once ZeroDivisionError in every inference estimate
            {**QWEN3, "num_attention_heads": 8192},
            "config.json: num_attention_heads=8,192 is more than hidden_size=4,096: a head "
            "needs at least one dimension",
        ),
        (
            {**NO_HEAD_DIM, "hidden_size": 4097},
            "config.json: hidden_size=4,097 is not divisible by num_attention_heads=32 "
            "(4,097 % 32 = 1); give head_dim when heads are not hidden_size / "
            "num_attention_heads wide",
        ),
        (
            {**QWEN3, "num_key_value_heads": 5},
            "config.json: num_key_value_heads=5 must divide num_attention_heads=32 (32 % 5 = 2)",
        ),
        (
            {**QWEN3, "num_key_value_heads": 64},
            "config.json: num_key_value_heads=64 must divide num_attention_heads=32 "
            "(32 % 64 = 32)",
        ),
        (
            {**DEEPSEEK, "n_shared_experts": "abc"},
            "config.json: n_shared_experts='abc': must be an integer from 0 to "
            "1,099,511,627,776",
        ),
        (
            {**DEEPSEEK, "n_shared_experts": [1]},
            "config.json: n_shared_experts=[1]: must be an integer from 0 to 1,099,511,627,776",
        ),
        (
            {**MOE, "shared_expert_intermediate_size": float("inf")},
            "config.json: shared_expert_intermediate_size=inf: must be an integer from 0 to "
            "1,099,511,627,776",
        ),
        (
            {**QWEN3, "tie_word_embeddings": "false"},
            "config.json: tie_word_embeddings='false': must be true or false (a JSON boolean)",
        ),
        (
            {**QWEN3, "attention_bias": 1},
            "config.json: attention_bias=1: must be true or false (a JSON boolean)",
        ),
        (
            {**QWEN3, "hidden_size": True},
            f"config.json: hidden_size=true: {COUNT}, not a boolean",
        ),
        ({**QWEN3, "hidden_size": 4096.0}, f"config.json: hidden_size=4096.0: {COUNT}"),
        ({**QWEN3, "hidden_size": 0}, f"config.json: hidden_size=0: {COUNT}"),
        (
            {**QWEN3, "intermediate_size": -1},
            "config.json: intermediate_size=-1: must be an integer from 0 to 1,099,511,627,776",
        ),
        (
            {**QWEN3, "vocab_size": 10**5000},
            f"config.json: vocab_size=a 5001-digit number: {LIMIT}",
        ),
        ({**QWEN3, "num_attention_heads": "٣٢"}, f"config.json: num_attention_heads='٣٢': {COUNT}"),
    ],
)  # fmt: skip
def test_a_bad_config_json_value_is_one_line(config: dict[str, Any], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        Architecture.from_mapping(config, source="config.json")
    assert info.value.message == message


def test_config_json_numbers_written_as_strings_convert() -> None:
    given = Architecture.from_mapping({**QWEN3, "num_hidden_layers": "36"}, source="m")
    assert given == Architecture.from_mapping(QWEN3, source="m")
    assert Architecture.from_mapping({**QWEN3, "tie_word_embeddings": True}).tie_word_embeddings


def test_a_config_json_file_with_a_bad_value_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**QWEN3, "num_attention_heads": 8192}))
    with pytest.raises(AllocationValidationError) as info:
        Architecture.from_file(tmp_path)
    assert info.value.message.startswith(f"{tmp_path / 'config.json'}: num_attention_heads=8,192")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"num_attention_heads": 32, "num_key_value_heads": 5},
            "model_shape: num_key_value_heads=5 must divide num_attention_heads=32 (32 % 5 = 2)",
        ),
        ({"num_layers": True}, f"model_shape: num_layers=true: {COUNT}, not a boolean"),
        ({"num_hidden_layers": "٤"}, f"model_shape: num_hidden_layers='٤': {COUNT}"),
        ({"n_layer": 10**30}, f"model_shape: n_layer=a 31-digit number: {LIMIT}"),
        ({"num_experts": 0}, f"model_shape: num_experts=0: {COUNT}"),
    ],
)
def test_a_bad_model_shape_value_is_one_line(data: dict[str, Any], message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        ModelShape.from_mapping(data)
    assert info.value.message == message


def test_a_model_shape_number_written_as_a_string_converts() -> None:
    assert ModelShape.from_mapping({"num_layers": "28"}).num_layers == 28
    assert ModelShape(num_layers="28").num_layers == 28  # type: ignore[arg-type]


# --- any value of any numeric setting: a plan or one line ------------------------------

NUMERIC_KEYS = [
    "actor__kl_ctl",
    "actor__mb_spec__max_tokens_per_mb",
    "actor__megatron__virtual_pipeline_parallel_size",
    "gconfig__n_samples",
    "gconfig__max_new_tokens",
    "train_dataset__batch_size",
    "train_dataset__max_length",
    "sglang__mem_fraction_static",
    "sglang__context_length",
    "rollout__max_concurrent_rollouts",
    "cluster__n_nodes",
    "cluster__n_gpus_per_node",
    "cluster__gpu_memory_gib",
    "cluster__memory_reserve_gib",
    "cluster__peak_tflops",
    "cluster__inter_node_gbps",
    "cluster__compute_efficiency",
    "actor__mb_spec",
    "gconfig",
]

VALUES = st.one_of(
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**5000), max_value=10**5000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=50),
    st.text(alphabet="0123456789+-._eEinfa ", max_size=120),
    st.from_regex(r"\A[0-9]{1,5000}\Z"),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(NUMERIC_KEYS), VALUES)
def test_any_value_of_a_numeric_setting_plans_or_is_one_line(key: str, value: object) -> None:
    try:
        plan_config(_cfg(**{key: value}), on_memory="warn")
    except AllocationError as error:
        text = str(error)
        assert "\n" not in text
        assert len(text) < 1000


CONFIG_KEYS = [
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "kv_lora_rank",
    "tie_word_embeddings",
    "attention_bias",
]


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([QWEN3, MOE, DEEPSEEK]),
    st.sampled_from(CONFIG_KEYS),
    st.one_of(VALUES, st.none(), st.integers(min_value=0, max_value=1 << 41)),
)
def test_any_config_json_value_estimates_or_is_one_line(
    base: dict[str, Any], key: str, value: object
) -> None:
    from areal_alloc.estimate.engines import estimate_allocation
    from areal_alloc.estimate.execution import GIB
    from areal_alloc.model import ModelAllocation

    try:
        arch = Architecture.from_mapping({**base, key: value}, source="config.json")
        for spec in ("sglang:d1t2", "fsdp:d2", "megatron:d1p2"):
            estimate_allocation(ModelAllocation.from_str(spec), arch, 80 * GIB)
    except AllocationError as error:
        text = str(error)
        assert "\n" not in text
        assert len(text) < 1000
