"""Memory rules that differ by engine version: how a loss holds the logits (compiled or
not, chunked), vLLM's profile run before vllm#2151, and the capacity a device reports."""

from __future__ import annotations

import pytest

from areal_alloc.catalogue import find_gpu, find_model, reported_bytes
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.execution import GIB, InferenceSettings, TrainingSettings
from areal_alloc.model import ModelAllocation

LLAMA = find_model("meta-llama/Llama-3.1-8B")  # vocabulary 128,256, h 4,096, 32 layers
TOKENS = 2 * 8192


def _logits(mode: str) -> int:
    settings = TrainingSettings(logits=mode, tokens_per_micro_batch=TOKENS, recompute="full")
    estimate = estimate_allocation(
        ModelAllocation.from_str("fsdp:d8"), LLAMA, 96 * GIB, settings, None
    )
    backward = next(p for p in estimate.phases if p.name == "backward")  # the loss's phase
    return sum(t.bytes for t in backward.terms if t.name == "logits")


@pytest.mark.parametrize(
    ("mode", "bytes_per_logit"),
    [
        ("float32", 12),  # eager: log-softmax saved, nll's gradient, log-softmax's gradient
        ("float32_compiled", 4),  # torchtitan's compiled loss: bf16 logits + bf16 gradient
        ("chunked_compiled", 3),  # torchtune's chunked loss: bf16 chunks + one chunk upcast
    ],
)
def test_the_logits_as_each_loss_holds_them(mode: str, bytes_per_logit: int) -> None:
    assert _logits(mode) == TOKENS * 128256 * bytes_per_logit


def _vllm(spec: str, held: bool) -> tuple[int, str]:
    settings = InferenceSettings(
        dtype="float16",
        memory_fraction=0.9,
        max_num_batched_tokens=4096,
        device_bytes=reported_bytes(find_gpu("A100-80GB")),
        vllm_allreduce_inputs_held=held,
    )
    estimate = estimate_allocation(ModelAllocation.from_str(spec), LLAMA, 80 * GIB, None, settings)
    term = next(t for t in estimate.terms if t.name == "activations")
    return term.bytes, term.formula


def test_vllm_before_2151_holds_every_tensor_parallel_all_reduce_input() -> None:
    plain, _ = _vllm("vllm:t4", held=False)
    held, formula = _vllm("vllm:t4", held=True)
    # the embedding's and two per layer (attention output, MLP down projection):
    # (2 × 32 + 1) × 4,096 tokens × h 4,096 × 2 B = 65 × 32 MiB = 2,080 MiB
    assert held - plain == 65 * 4096 * 4096 * 2 == 2080 * (1 << 20)
    assert "65 tensor-parallel all-reduce inputs held (before vllm#2151)" in formula


def test_one_gpu_has_no_all_reduce_to_hold() -> None:
    assert _vllm("vllm:d1", held=True) == _vllm("vllm:d1", held=False)


def test_an_a100_80gb_reports_less_than_its_nameplate() -> None:
    # deviceQuery: "Total amount of global memory: 81251 MBytes (85198045184 bytes)"
    assert reported_bytes(find_gpu("A100-80GB")) == 85198045184
    assert reported_bytes(find_gpu("A100-80GB")) < find_gpu("A100-80GB").memory_bytes


def _torchtune(*, in_backward: bool = False, offload: bool = False) -> dict[str, int]:
    settings = TrainingSettings(
        tokens_per_micro_batch=TOKENS,
        recompute="full",
        optimizer_dtype="bfloat16",
        reserve_bytes=0,
        optimizer_in_backward=in_backward,
        activation_offload=offload,
    )
    estimate = estimate_allocation(
        ModelAllocation.from_str("fsdp:d1"), LLAMA, 80 * GIB, settings, None
    )
    backward = next(p for p in estimate.phases if p.name == "backward")
    return {t.name: t.bytes for t in backward.terms}


def test_the_optimizer_in_the_backward_holds_one_parameters_gradient() -> None:
    plain, fused = _torchtune(), _torchtune(in_backward=True)
    assert plain["gradients"] == LLAMA.parameters.total * 2  # every bf16 gradient
    # the largest parameter, the 128,256 × 4,096 embedding (untied: the output's is as large)
    assert fused["gradients"] == 128256 * 4096 * 2
    assert fused["optimizer"] == plain["optimizer"]


def test_offloaded_checkpoints_leave_one_layer_on_the_gpu() -> None:
    plain, offloaded = _torchtune(), _torchtune(offload=True)
    # full recomputation keeps each of the 32 layers' 2h = 8,192 B input per token; offloaded,
    # one layer's: 31 × 8,192 B × 16,384 tokens fewer
    assert plain["activations"] - offloaded["activations"] == 31 * 8192 * TOKENS


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_dtensor_tensor_parallelism_keeps_the_linears_gathered_inputs(tp: int) -> None:
    from areal_alloc.estimate.activations import activation_bytes_per_token

    def per_token(gathered: bool) -> float:
        return activation_bytes_per_token(
            LLAMA,
            moe=False,
            tp=tp,
            sequence_parallel=True,
            recompute="none",
            flash_attention=True,
            dropout=False,
            sequence_length=8192,
            gathered_inputs=gathered,
        )[0]

    # the attention's and the MLP's inputs, 2h + 2h = 16,384 B, whole instead of split by t
    assert per_token(True) - per_token(False) == pytest.approx(16384 * (1 - 1 / tp))


def test_fsdp_tensor_parallelism_saves_more_than_megatrons() -> None:
    # the same layer on both (a framework's own fused layer under FSDP, as torchtitan's):
    # only the tensor-parallel plans differ
    settings = TrainingSettings(tokens_per_micro_batch=8192, recompute="none", modeling="fused")
    acts = {
        engine: estimate_allocation(
            ModelAllocation.from_str(f"{engine}:d4t2"), LLAMA, 96 * GIB, settings, None
        ).term("activations")
        for engine in ("fsdp", "megatron")
    }
    # 32 layers × 8,192 tokens × 16,384 B × (1 − 1/2) more on the DTensor engine
    assert acts["fsdp"] - acts["megatron"] == 32 * 8192 * 16384 // 2


@pytest.mark.parametrize(
    ("spec", "micro_batches", "gradients_in_backward"),
    [
        ("fsdp:d8", 1, False),  # set to None before the step, grown as activations free
        ("fsdp:d8", 2, True),  # the second micro-batch's backward finds the first's
        ("fsdp:d8", None, True),  # not known: as many as the step needs
        ("megatron:d8", 1, True),  # Megatron's gradient buffer lives with the model
        # archon at p2 runs p × 2 stages = 4 micro-batches whatever n_mbs (archon_engine.py
        # l.1209-1227): the later backwards find the first's gradients
        ("archon:d4p2", 1, True),
    ],
)
def test_a_lone_micro_batch_starts_its_backward_without_gradients(
    spec: str, micro_batches: int | None, gradients_in_backward: bool
) -> None:
    vpp = 2 if spec.startswith("archon") else 1  # archon's default stages per rank
    settings = TrainingSettings(
        tokens_per_micro_batch=TOKENS, micro_batches=micro_batches, virtual_pipeline=vpp
    )
    estimate = estimate_allocation(ModelAllocation.from_str(spec), LLAMA, 96 * GIB, settings, None)
    phases = {p.name: {t.name for t in p.terms} for p in estimate.phases}
    assert ("gradients" in phases["backward"]) is gradients_in_backward
    assert "gradients" in phases["optimizer_step"]  # the step holds them all


def test_an_fp8_checkpoint_keeps_its_embedding_and_output_in_bf16() -> None:
    from areal_alloc.architecture import Architecture
    from areal_alloc.catalogue import MODELS

    config = {
        **MODELS["meta-llama/llama-3.1-8b"].config,
        "quantization_config": {"quant_method": "fp8"},
    }
    fp8 = Architecture.from_mapping(config, source="an fp8 checkpoint of Llama-3.1-8B")
    settings = InferenceSettings(kv_cache_dtype="bfloat16", memory_fraction=0.9)
    estimate = estimate_allocation(
        ModelAllocation.from_str("vllm:t4"), fp8, 80 * GIB, None, settings
    )
    p = LLAMA.parameters
    vocab = p.embedding + p.output  # 2 × 128,256 × 4,096, untied
    assert vocab == 2 * 128256 * 4096
    kept = vocab + p.final_norm  # the embedding, the output head and the final norm
    assert estimate.term("weights") == int(((p.total - kept) * 1 + kept * 2) / 4)


def _reserve(backend: str, **settings: object) -> int:
    estimate = estimate_allocation(
        ModelAllocation.from_str(f"{backend}:d1t2"),
        LLAMA,
        80 * GIB,
        None,
        InferenceSettings(memory_fraction=0.9, **settings),  # type: ignore[arg-type]
    )
    return estimate.term("reserve")


@pytest.mark.parametrize(
    ("backend", "settings", "context"),
    [
        ("sglang", {}, True),  # its pool is a fraction of the free memory after start-up
        ("vllm", {}, False),  # V1 and V0 from vllm#10511: a snapshot after the context
        ("vllm", {"vllm_counts_cuda_context": True}, True),  # V0, vllm#2031 to #10511
        ("sglang", {"reserve_bytes": GIB}, False),  # --memory-reserve-gib replaces the rule
    ],
)
def test_the_cuda_context_is_counted_where_the_rule_measures_from_the_total(
    backend: str, settings: dict[str, object], context: bool
) -> None:
    from areal_alloc.estimate.memory_inference import CUDA_CONTEXT_BYTES, non_torch_bytes

    base = GIB if "reserve_bytes" in settings else non_torch_bytes(2)
    assert CUDA_CONTEXT_BYTES == 300 << 20  # pytorch#107667: "~300MB" under lazy loading
    assert _reserve(backend, **settings) == base + (CUDA_CONTEXT_BYTES if context else 0)
