"""Two pieces of MoE training physics in ``speed_training.training_step``: how the token
dispatcher moves tokens (alltoall: a copy per selected expert; DeepEP: a copy per GPU
and per node reached, under balanced routing, :func:`expected_groups_reached`), and what
Megatron's selective recomputation modules (``megatron.recompute_modules``) run again;
and the reading of ``recompute_modules``."""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from areal_alloc.architecture import Architecture
from areal_alloc.catalogue import find_gpu, find_model
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.execution import TrainingSettings, training_settings
from areal_alloc.estimate.speed import StepEstimate
from areal_alloc.estimate.speed_training import expected_groups_reached, training_step
from areal_alloc.estimate.system import Hardware
from areal_alloc.experiment import read_experiment
from areal_alloc.experiment.records import RunConfig
from areal_alloc.model import ModelAllocation

#: these experiments name the GPU or the model with areal-alloc's own keys (cluster.gpu,
#: model_shape), which the reference's loader refuses: the strict-key check is off here
#: (tests/cli/test_reference_keys.py tests it)
pytestmark = pytest.mark.usefixtures("reference_off")


H100 = Hardware.from_gpu(find_gpu("H100-80GB"), 8)  # 989 TFLOP/s, 3.35 TB/s, 8 per node
GEMM = 989e12 * 0.5  # the GEMMs' (and Megatron's attention's) efficiency
HBM = 3.35e12 * 0.7
QWEN_MOE = find_model("Qwen3-30B-A3B")  # 48 MoE layers, 128 experts, top-8, h 2048
LLAMA = find_model("meta-llama/Llama-3.1-8B")  # 32 dense layers, h 4096, f 14336
DEEPSEEK = find_model("DeepSeek-V3")  # MLA, 3 dense + 58 MoE layers, 1 shared expert
TOKENS = 1 << 20


def _missed(experts: int, group: int, k: int) -> float:
    """P(a group of ``group`` experts holds none of a token's k distinct experts), as the
    product of the k draws without replacement (not the binomials the code uses)."""
    return math.prod((experts - group - i) / (experts - i) for i in range(k))


def _brute_force(experts: int, k: int, sizes: tuple[int, ...]) -> float:
    """The mean number of groups reached over every k-subset of the experts."""
    owner = [g for g, size in enumerate(sizes) for _ in range(size)]
    owner += [-1] * (experts - len(owner))  # experts in no group
    subsets = list(itertools.combinations(range(experts), k))
    reached = sum(len({owner[e] for e in subset} - {-1}) for subset in subsets)
    return reached / len(subsets)


# --- the expected count -------------------------------------------------------------------

EXPECTED_COUNTS = [
    # (E, k, groups, expected): R·(1 − C(E − E/R, k)/C(E, k)) written out
    (4, 2, (2, 2), 2 * (1 - 1 / 6)),  # 6 pairs, 2 inside one group: (2·1 + 4·2)/6
    (4, 1, (1, 1, 1, 1), 1.0),  # top-1 reaches exactly one group
    (8, 8, (2, 2, 2, 2), 4.0),  # every expert: every group
    (6, 2, (3, 3), 2 * (1 - 3 / 15)),  # C(3, 2)/C(6, 2)
    (8, 3, (4, 4), 2 * (1 - 4 / 56)),  # C(4, 3)/C(8, 3)
    (9, 2, (3, 3, 3), 3 * (1 - 15 / 36)),  # C(6, 2)/C(9, 2)
    # one group of a GPU's 4 of 128 experts at top-8 (the ep32 ModelZoo run)
    (128, 8, (4,), 1 - _missed(128, 4, 8)),
]


@pytest.mark.parametrize(("experts", "k", "sizes", "expected"), EXPECTED_COUNTS)
def test_the_expected_groups_a_token_reaches(
    experts: int, k: int, sizes: tuple[int, ...], expected: float
) -> None:
    assert expected_groups_reached(experts, k, sizes) == pytest.approx(expected)
    if math.comb(experts, k) <= 5000:
        assert _brute_force(experts, k, sizes) == pytest.approx(expected)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_the_expected_count_is_the_mean_over_every_routing(data: st.DataObject) -> None:
    experts = data.draw(st.integers(1, 10))
    k = data.draw(st.integers(1, experts))
    sizes = tuple(data.draw(st.lists(st.integers(0, experts), max_size=4)))
    if sum(sizes) > experts:
        sizes = ()
    assert expected_groups_reached(experts, k, sizes) == pytest.approx(
        _brute_force(experts, k, sizes)
    )


@pytest.mark.parametrize(
    ("experts", "k", "sizes", "message"),
    [
        (
            8,
            0,
            (4, 4),
            "top-0 of 8 experts in groups [4, 4]: need 1 ≤ k ≤ E and groups of ≥ 0 experts "
            "totalling ≤ E (sum 8)",
        ),
        (
            8,
            2,
            (8, 4),
            "top-2 of 8 experts in groups [8, 4]: need 1 ≤ k ≤ E and groups of ≥ 0 experts "
            "totalling ≤ E (sum 12)",
        ),
    ],
)
def test_an_impossible_grouping_is_one_line(
    experts: int, k: int, sizes: tuple[int, ...], message: str
) -> None:
    with pytest.raises(AllocationValidationError) as info:
        expected_groups_reached(experts, k, sizes)
    assert info.value.message == message


# --- the dispatcher's traffic ---------------------------------------------------------------


def _step(spec: str, arch: Architecture = QWEN_MOE, **kwargs: Any) -> StepEstimate:
    alloc = ModelAllocation.from_str(spec)
    return training_step(
        alloc.backend,
        arch,
        alloc.parallel,
        H100,
        tokens_per_step=TOKENS,
        tokens_per_micro_batch=16384,
        sequence_length=8192,
        **kwargs,
    )


def _seconds(step: StepEstimate, name: str) -> float:
    return sum(t.seconds for t in step.terms if t.name == name)


NVLINK = H100.link_bytes_per_second(True)
PORT = H100.link_bytes_per_second(False)  # one GPU's network port
HIDDEN = 16384 * 2048 * 2  # one micro-batch's bf16 hidden states, t 1
P_GPU_8 = 1 - _missed(128, 16, 8)  # a GPU of e8 holds 16 of the 128 experts
P_GPU_16 = 1 - _missed(128, 8, 8)  # of e16: 8
P_NODE_2 = 1 - _missed(128, 64, 8)  # a node of e16's two: 64

EXPERT_TRAFFIC = [
    # d8e8: 8 micro-batches of 16,384 tokens; the group inside one node, over NVLink
    ("megatron:d8e8", "alltoall", 4 * 48 * 8 * HIDDEN * 8 * 7 / 8 / NVLINK),
    # DeepEP: a copy per other GPU reached, 7 × P(16 of 128 experts among the top-8)
    ("megatron:d8e8", "deepep", 4 * 48 * 8 * HIDDEN * 7 * P_GPU_8 / NVLINK),
    # d16e16: 4 micro-batches; the group spans two nodes. alltoall: every copy over the port
    ("megatron:d16e16", "alltoall", 4 * 48 * 4 * HIDDEN * 8 * 15 / 16 / PORT),
    # DeepEP: 15 × P_GPU over NVLink, pipelined with the other node's one copy over RDMA
    (
        "megatron:d16e16",
        "deepep",
        max(
            4 * 48 * 4 * HIDDEN * 15 * P_GPU_16 / NVLINK,
            4 * 48 * 4 * HIDDEN * 1 * P_NODE_2 / PORT,
        ),
    ),
    # allgather: every token of the group's other 7 GPUs, gathered and reduce-scattered
    ("megatron:d8e8", "allgather", 4 * 48 * 8 * HIDDEN * 7 / NVLINK),
]


@pytest.mark.parametrize(("spec", "dispatcher", "seconds"), EXPERT_TRAFFIC)
def test_the_dispatcher_sets_the_expert_traffic(spec: str, dispatcher: str, seconds: float) -> None:
    step = _step(spec, token_dispatcher=dispatcher)
    name = "expert all-gather" if dispatcher == "allgather" else "expert all-to-all"
    assert _seconds(step, name) == pytest.approx(seconds)


def test_deepep_says_which_link_sets_the_time() -> None:
    (term,) = (
        t
        for t in _step("megatron:d16e16", token_dispatcher="deepep").terms
        if t.name == "expert all-to-all"
    )
    assert "under balanced routing" in term.formula
    assert "NVLink and RDMA pipelined: the slower sets the time" in term.formula
    # by hand: P(a node of 64 of 128 experts is reached by top-8) = 1 − 0.00344 = 0.997
    assert "the other nodes: 0.997 of 2" in term.formula


# --- selective recomputation's modules --------------------------------------------------------

T = float(TOKENS)
RECOMPUTED = [
    # (model, module, term, the extra seconds the module adds over recomputing nothing)
    # the dense MLP's GEMMs: 2 FLOPs × 3·4096·14336 weights × 32 layers per token
    (LLAMA, "mlp", "compute", 2 * T * 176_160_768 * 32 / (8 * GEMM)),
    # the attention core's forward: 2 matmuls × 2 FLOPs × q 4096 × s 8192 per token and
    # layer, halved by the causal mask (megatron-core's count, speed.attention_flops)
    (LLAMA, "core_attn", "compute", T * 2 * 2 * 4096 * 8192 / 2 * 32 / (8 * GEMM)),
    # Transformer Engine fuses a dense layer's two norms into the next linears: none again
    (LLAMA, "layernorm", "element-wise", 0.0),
    # a MoE layer's pre-MLP norm is its own module: 2h bytes, 48 MoE layers
    (QWEN_MOE, "layernorm", "element-wise", 2 * 2048 * 48 * T / (8 * HBM)),
    # MLA's input norm too: 2h × (61 layers + 58 MoE layers)
    (DEEPSEEK, "layernorm", "element-wise", 2 * 7168 * (61 + 58) * T / (8 * HBM)),
    (LLAMA, "moe_act", "element-wise", 0.0),  # a dense model has no MoE activation
    (LLAMA, "moe", "compute", 0.0),
    # router 2048·128 + top-8 × 3·2048·768, 48 MoE layers
    (QWEN_MOE, "moe", "compute", 2 * T * (262_144 + 37_748_736) * 48 / (8 * GEMM)),
    # the activation's 8h bytes, every MoE layer
    (QWEN_MOE, "moe_act", "element-wise", 8 * 2048 * 48 * T / (8 * HBM)),
    (QWEN_MOE, "shared_experts", "compute", 0.0),  # none
    (QWEN_MOE, "mla_up_proj", "compute", 0.0),  # not MLA
    # one shared expert 3·7168·2048, 58 MoE layers
    (DEEPSEEK, "shared_experts", "compute", 2 * T * 44_040_192 * 58 / (8 * GEMM)),
    # kv_b 512 → 128 × (128 + 128), q_b 1536 → 128 × (128 + 64), 61 layers
    (
        DEEPSEEK,
        "mla_up_proj",
        "compute",
        2 * T * (512 * 128 * 256 + 1536 * 128 * 192) * 61 / (8 * GEMM),
    ),
    # router 7168·256 + top-8 × 3·7168·2048 + the shared expert, 58 MoE layers
    (
        DEEPSEEK,
        "moe",
        "compute",
        2 * T * (1_835_008 + 352_321_536 + 44_040_192) * 58 / (8 * GEMM),
    ),
    (DEEPSEEK, "mlp", "compute", 2 * T * 396_361_728 * 3 / (8 * GEMM)),  # 3 dense layers
]


@pytest.mark.parametrize(("arch", "module", "term", "extra"), RECOMPUTED)
def test_each_recomputed_module_adds_its_forward(
    arch: Architecture, module: str, term: str, extra: float
) -> None:
    nothing = _step("megatron:d8", arch, recompute="selective", recompute_modules=())
    step = _step("megatron:d8", arch, recompute="selective", recompute_modules=(module,))
    assert _seconds(step, term) - _seconds(nothing, term) == pytest.approx(extra, abs=1e-12)
    others = {t.name for t in step.terms} - {term, "pipeline imbalance", "pipeline bubble"}
    for name in others:  # no other term moves
        assert _seconds(step, name) == pytest.approx(_seconds(nothing, name))


def test_recomputing_the_moe_layer_repeats_its_all_to_alls() -> None:
    # moe_layer.py l.599-612 checkpoints the MoE forward, dispatch and combine included
    plain = _step("megatron:d8e8", recompute="selective", recompute_modules=("core_attn",))
    again = _step("megatron:d8e8", recompute="selective", recompute_modules=("moe",))
    assert _seconds(again, "expert all-to-all") == pytest.approx(
        _seconds(plain, "expert all-to-all") * 6 / 4
    )


def test_the_modules_count_only_under_selective_recomputation() -> None:
    assert _step("megatron:d8", recompute="selective", recompute_modules=()).seconds == (
        pytest.approx(_step("megatron:d8", recompute="none").seconds)
    )
    assert _step("megatron:d8", recompute="full", recompute_modules=("moe",)).seconds == (
        pytest.approx(_step("megatron:d8", recompute="full").seconds)
    )
    # megatron-core's default: the core attention
    assert _step("megatron:d8", recompute="selective").seconds == pytest.approx(
        _step("megatron:d8", recompute="selective", recompute_modules=("core_attn",)).seconds
    )


def test_an_unknown_module_or_dispatcher_is_refused() -> None:
    with pytest.raises(AllocationValidationError) as info:
        _step("megatron:d8", recompute="selective", recompute_modules=("attn",))
    # the settings' one rule (sections.megatron.recompute_module_names), the same line as a config's
    assert info.value.message == (
        "recompute_modules: 'attn' not among megatron-core's core_attn, moe_act, layernorm, "
        "mla_up_proj, mlp, moe, shared_experts (its TransformerConfig refuses it at start-up)"
    )
    with pytest.raises(AllocationValidationError) as info:
        _step("megatron:d8", token_dispatcher="flex")
    assert info.value.message == (
        "token_dispatcher='flex': must be one of alltoall, allgather, deepep"
    )


# TrainingSettings (the API's entry) and the reader (a config's) share one rule and its
# message (sections.megatron.recompute_module_names): a text is refused whole, not letter by letter
SETTINGS_MODULES: list[tuple[object, str]] = [
    (
        ("norm",),
        "recompute_modules: 'norm' not among megatron-core's core_attn, moe_act, layernorm, "
        "mla_up_proj, mlp, moe, shared_experts (its TransformerConfig refuses it at start-up)",
    ),
    (
        "moe_act",
        "recompute_modules='moe_act': must be a list of module names among core_attn, "
        "moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, e.g. [core_attn, layernorm]",
    ),
    (
        None,
        "recompute_modules=None: must be a list of module names among core_attn, moe_act, "
        "layernorm, mla_up_proj, mlp, moe, shared_experts, e.g. [core_attn, layernorm]",
    ),
]


@pytest.mark.parametrize(("modules", "message"), SETTINGS_MODULES)
def test_the_settings_refuse_what_the_reader_refuses(modules: object, message: str) -> None:
    with pytest.raises(AllocationValidationError) as info:
        TrainingSettings(recompute_modules=modules)  # type: ignore[arg-type]
    assert info.value.message == message
    config = {"recompute_granularity": "selective", "recompute_modules": modules}
    actor = {"backend": "megatron:d8", "gradient_checkpointing": True, "megatron": config}
    if modules is None:  # null in a config: megatron-core's default
        training = read_experiment({"actor": actor})["actor"].training
        assert training is not None
        assert training.recompute_modules == ("core_attn",)
        return
    with pytest.raises(AllocationValidationError) as info:
        read_experiment({"actor": actor})
    assert info.value.message == f"actor.megatron.{message}"


def test_the_settings_keep_a_list_as_its_tuple_once() -> None:
    listed = TrainingSettings(recompute_modules=["moe_act", "moe_act", "layernorm"])  # type: ignore[arg-type]
    assert listed.recompute_modules == ("moe_act", "layernorm")
    assert hash(listed) == hash(TrainingSettings(recompute_modules=("moe_act", "layernorm")))


def test_each_dispatcher_name_means_one_thing() -> None:
    """The config's moe_token_dispatcher_type values (sections.megatron.DISPATCHER_TYPES) and
    the estimate's dispatchers (execution.TOKEN_DISPATCHERS, flex being DeepEP) under two
    names; each config value maps to one estimate dispatcher."""
    from areal_alloc.estimate import execution
    from areal_alloc.experiment.sections import megatron as section

    assert section.DISPATCHER_TYPES == ("allgather", "alltoall", "flex")
    assert execution.TOKEN_DISPATCHERS == ("alltoall", "allgather", "deepep")
    assert not hasattr(section, "TOKEN_DISPATCHERS")
    mapped = {}
    for written in section.DISPATCHER_TYPES:
        megatron = {"moe_token_dispatcher_type": written}
        engine = read_experiment({"actor": {"backend": "megatron:d8", "megatron": megatron}})
        mapped[written] = execution.token_dispatcher(engine["actor"])
    assert mapped == {"allgather": "allgather", "alltoall": "alltoall", "flex": "deepep"}


# --- reading megatron.recompute_modules ---------------------------------------------------

MODULE_READINGS: list[tuple[bool, dict[str, Any], str, tuple[str, ...]]] = [
    # selective: the list as written; unset or null: megatron-core's ["core_attn"]
    (
        True,
        {"recompute_granularity": "selective", "recompute_modules": ["moe_act", "layernorm"]},
        "selective",
        ("moe_act", "layernorm"),
    ),
    (True, {"recompute_granularity": "selective"}, "selective", ("core_attn",)),
    (
        True,
        {"recompute_granularity": "selective", "recompute_modules": None},
        "selective",
        ("core_attn",),
    ),
    # an empty list: nothing recomputed (megatron-core checks only a non-empty list)
    (True, {"recompute_granularity": "selective", "recompute_modules": []}, "selective", ()),
    (
        True,
        {"recompute_granularity": "selective", "recompute_modules": ["moe", "moe"]},
        "selective",
        ("moe",),
    ),
    # full recomputation, or none: megatron-core does not look at the list
    (True, {"recompute_modules": ["bogus"]}, "full", ("core_attn",)),
    (
        False,
        {"recompute_granularity": "selective", "recompute_modules": ["bogus"]},
        "none",
        ("core_attn",),
    ),
]


@pytest.mark.parametrize(("checkpointing", "megatron", "recompute", "modules"), MODULE_READINGS)
def test_the_recompute_modules_are_read_and_carried(
    checkpointing: bool, megatron: dict[str, Any], recompute: str, modules: tuple[str, ...]
) -> None:
    actor = {
        "backend": "megatron:d8",
        "gradient_checkpointing": checkpointing,
        "megatron": megatron,
    }
    engine = read_experiment({"actor": actor})["actor"]
    assert engine.training is not None
    assert (engine.training.recompute, engine.training.recompute_modules) == (recompute, modules)
    carried = training_settings(engine, RunConfig(), None, [])
    assert (carried.recompute, carried.recompute_modules) == (recompute, modules)


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        (
            ["core_attn", "attn"],
            "actor.megatron.recompute_modules: 'attn' not among megatron-core's core_attn, "
            "moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts (its TransformerConfig "
            "refuses it at start-up)",
        ),
        (
            "layernorm",
            "actor.megatron.recompute_modules='layernorm': must be a list of module names among "
            "core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, e.g. "
            "[core_attn, layernorm]",
        ),
        (
            {"layernorm": True},
            "actor.megatron.recompute_modules={'layernorm': True}: must be a list of module "
            "names among core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, "
            "e.g. [core_attn, layernorm]",
        ),
    ],
)
def test_an_unknown_recompute_module_is_one_line(modules: object, message: str) -> None:
    actor = {
        "backend": "megatron:d8",
        "gradient_checkpointing": True,
        "megatron": {"recompute_granularity": "selective", "recompute_modules": modules},
    }
    with pytest.raises(AllocationValidationError) as info:
        read_experiment({"actor": actor})
    assert info.value.message == message


# --- what the recomputed modules no longer store --------------------------------------------

# one layer's bytes per token at t 1, flash attention, no dropout (activations.py: norm
# inputs 4h + attention and MLP inputs 2h + 2h, 2·(q + k + v + o), the MLP's)
QWEN_MOE_LAYER = 8 * 2048 + 2 * (4096 + 512 + 512 + 4096) + 8 * (2 * 2048 + 6 * 768) + 4 * 128
LLAMA_LAYER = 8 * 4096 + 2 * (4096 + 1024 + 1024 + 4096) + 6 * 14336
DEEPSEEK_MOE_LAYER = (
    8 * 7168
    + 2 * (24576 + 24576 + 16384 + 16384)  # MLA: q, k 128 × 192; v, o 128 × 128
    + 8 * (2 * 7168 + 6 * 2048)
    + 6 * 2048  # the shared expert
    + 4 * 256
)
STORED = [
    (QWEN_MOE, True, ("core_attn",), QWEN_MOE_LAYER),  # flash: no scores to drop (104,960)
    (QWEN_MOE, True, ("moe_act",), QWEN_MOE_LAYER - 8 * 2 * 768),  # fc2's input, 8 copies
    (QWEN_MOE, True, ("layernorm",), QWEN_MOE_LAYER - 2 * 2048),  # the pre-MLP norm's output
    # the MoE layer's copies, their SwiGLU and the router logits; its input kept
    (QWEN_MOE, True, ("moe",), QWEN_MOE_LAYER - 8 * (2 * 2048 + 6 * 768) - 4 * 128),
    (QWEN_MOE, True, ("moe_act", "layernorm"), 104_960 - 12_288 - 4_096),  # ModelZoo's
    (LLAMA, False, ("mlp",), LLAMA_LAYER - 6 * 14336),
    (LLAMA, False, ("layernorm",), LLAMA_LAYER),  # fused into the linears: nothing
    (LLAMA, False, ("moe", "moe_act", "shared_experts"), LLAMA_LAYER),  # a dense layer
    (DEEPSEEK, True, ("mla_up_proj",), DEEPSEEK_MOE_LAYER - 2 * (24576 + 24576 + 16384)),
    (DEEPSEEK, True, ("shared_experts",), DEEPSEEK_MOE_LAYER - 6 * 2048),
    # MLA's input norm and the pre-MLP norm
    (DEEPSEEK, True, ("layernorm",), DEEPSEEK_MOE_LAYER - 2 * 2 * 7168),
]


@pytest.mark.parametrize(("arch", "moe", "modules", "stored"), STORED)
def test_a_recomputed_module_keeps_only_its_input(
    arch: Architecture, moe: bool, modules: tuple[str, ...], stored: int
) -> None:
    from areal_alloc.estimate.activations import activation_bytes_per_token

    per_token, _ = activation_bytes_per_token(
        arch,
        moe=moe,
        tp=1,
        sequence_parallel=False,
        recompute="selective",
        flash_attention=True,
        dropout=False,
        sequence_length=4096,
        recompute_modules=modules,
    )
    assert per_token == stored


def test_the_memory_estimate_drops_the_recomputed_modules() -> None:
    from areal_alloc.estimate.memory_training import training_memory

    alloc = ModelAllocation.from_str("megatron:d8")

    def activations(modules: tuple[str, ...]) -> float:
        settings = TrainingSettings(
            recompute="selective", recompute_modules=modules, tokens_per_micro_batch=4096
        )
        estimate = training_memory("actor", "megatron", QWEN_MOE, alloc.parallel, settings, None)
        return sum(t.bytes for t in estimate.terms if t.name == "activations")

    # 48 MoE layers × 4,096 tokens × (12,288 + 4,096) bytes fewer
    assert activations(()) - activations(("moe_act", "layernorm")) == pytest.approx(
        48 * 4096 * 16_384
    )


def test_deepep_states_its_routing_assumption() -> None:
    line = (
        "DeepEP's traffic under balanced routing: each token's top-8 distinct experts uniformly "
        "among the 128 (the balance the auxiliary loss and forced balancing aim at; skewed "
        "routing sends more)"
    )
    assert line in _step("megatron:d8e8", token_dispatcher="deepep").assumptions
    assert line not in _step("megatron:d8e8").assumptions
    assert line not in _step("megatron:d8", token_dispatcher="deepep").assumptions  # e1


# --- the tensor-parallel collectives of an MoE layer ------------------------------------

NVLINK = 900e9 / 2 * 0.7  # one direction, at the achievable fraction


def _tp_seconds(arch: Architecture, spec: str) -> float:
    allocation = ModelAllocation.from_str(spec)
    step = training_step(
        allocation.backend,
        arch,
        allocation.parallel,
        H100,
        tokens_per_step=TOKENS,
        tokens_per_micro_batch=16384,
        sequence_length=4096,
    )
    return next(t.seconds for t in step.terms if t.name == "tensor parallel")


# (model, layout, collectives of a micro-batch over the layers): every layer's attention
# all-gathers and reduce-scatters 4 times (forward, backward); a dense MLP 4 more; an MoE
# layer's routed experts only at etp > 1 (megatron-core 0.17.0 token_dispatcher.py
# l.72-76: their group is expt_tp), a shared expert (a tensor-parallel MLP) always
TP_COLLECTIVES = [
    (LLAMA, "megatron:d4t2", 8 * 32),  # 32 dense layers
    (QWEN_MOE, "megatron:d4t2e8", 4 * 48),  # 48 MoE layers, etp 1, no shared expert
    (DEEPSEEK, "megatron:d4t2e8", 8 * 61),  # 3 dense + 58 MoE with a shared expert
    # the reference's FSDP plan leaves qwen3_moe's MLPs out (areal/engine/fsdp_utils/
    # parallel.py l.279-293): the attention's 4 in each of the 48 layers
    (QWEN_MOE, "fsdp:d4t2", 4 * 48),
    (LLAMA, "fsdp:d4t2", 8 * 32),  # a dense model's MLP is in the plan
    # a listed type with dense layers and a shared expert: none of its 61 MLPs is in the
    # plan (DeepSeek-V3's shape under qwen3_5_moe's name), where megatron counts 8 × 61
    (dataclasses.replace(DEEPSEEK, model_type="qwen3_5_moe"), "fsdp:d4t2", 4 * 61),
]


@pytest.mark.parametrize(("arch", "spec", "collectives"), TP_COLLECTIVES)
def test_the_tensor_parallel_collectives_of_each_layer(
    arch: Architecture, spec: str, collectives: int
) -> None:
    # d4: 2^20 tokens / 4 ranks / 16,384 = 16 micro-batches of 16,384 tokens, h × 2 B each,
    # (t2 − 1)/t2 of them over NVLink
    act = 16384 * arch.hidden_size * 2
    expected = collectives * 16 * act / 2 / NVLINK
    assert _tp_seconds(arch, spec) == pytest.approx(expected, rel=1e-12)


def test_fsdp_keeps_the_listed_moe_models_mlps_whole_over_t() -> None:
    """qwen3_moe under the reference's FSDP with t2: its MLP blocks (routed experts here) are
    sharded over d only, so against the same model under a type the plan splits, each GPU
    stores the routed experts' other half: 48 layers × 128 experts × 3 × 2,048 × 768 =
    28,991,029,248 params × (1 − 1/2) / d4 = 3,623,878,656 params × 4 B (float32 storage),
    and gathers two whole layers' MLP blocks where the split one gathers 1/t of each layer:
    2 × (routed 603,979,776 + router 2,048 × 128 = 262,144 + norms 2 × 2,048 + 2 × 128 =
    4,352) / 2 × 2 B (bfloat16)."""
    from dataclasses import replace

    from areal_alloc.estimate.engines import estimate_allocation

    settings = TrainingSettings(tokens_per_micro_batch=4096, recompute="full")
    alloc = ModelAllocation.from_str("fsdp:d4t2")

    def weights(arch: Architecture) -> int:
        found = estimate_allocation(alloc, arch, 80 * 2**30, settings, None)
        backward = next(phase for phase in found.phases if phase.name == "backward")
        return next(t.bytes for t in backward.terms if t.name == "weights")

    split = replace(QWEN_MOE, model_type="qwen3_moe_not_listed")
    gathered = 2 * (603_979_776 + 262_144 + 4_352) // 2 * 2
    assert weights(QWEN_MOE) - weights(split) == 3_623_878_656 * 4 + gathered


def test_fsdp_gathers_only_the_attentions_input_where_it_keeps_the_mlps_whole() -> None:
    # without an MLP in the plan no PrepareModuleInput all-gathers the MLP's input: of the
    # 2h + 2h gathered inputs only the attention's 2h stays whole, the MLP's 2h is sharded
    # over t: 2 × 2,048 × (1 − 1/2) = 2,048 B less a token of one MoE layer at t2
    from areal_alloc.estimate.activations import activation_bytes_per_token

    def per_token(mlp_gathered: bool) -> float:
        found, _ = activation_bytes_per_token(
            QWEN_MOE,
            moe=True,
            tp=2,
            sequence_parallel=True,
            recompute="none",
            flash_attention=True,
            dropout=False,
            sequence_length=4096,
            gathered_inputs=True,
            mlp_gathered=mlp_gathered,
        )
        return found

    assert per_token(True) - per_token(False) == 2048


def test_fsdp_keeps_the_routed_experts_lora_adapters_whole_too() -> None:
    # LoRA r16 on the routed experts' gate, up and down projections: 3 × (2,048 + 768) × 16
    # = 135,168 a expert × 128 experts × 48 layers = 830,472,192 adapter params, whole over
    # t2 where the plan keeps the MLPs whole: 830,472,192 × (1 − 1/2) / d4 = 103,809,024
    # more a GPU, × 4 B of float32 gradients
    from areal_alloc.estimate.engines import estimate_allocation

    settings = TrainingSettings(
        tokens_per_micro_batch=4096, recompute="full", lora_rank=16, memory_efficient_load=True
    )
    alloc = ModelAllocation.from_str("fsdp:d4t2")

    def gradients(arch: Architecture) -> int:
        found = estimate_allocation(alloc, arch, 80 * 2**30, settings, None)
        return found.term("gradients")

    split = dataclasses.replace(QWEN_MOE, model_type="qwen3_moe_not_listed")
    assert gradients(QWEN_MOE) - gradients(split) == 103_809_024 * 4
