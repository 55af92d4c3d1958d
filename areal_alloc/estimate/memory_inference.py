"""Per-GPU memory of one inference instance (``sglang``, ``vllm``): the weights over t·p,
the KV bytes per token, the server's memory outside the weights and the KV cache as
each server computes it, and how many tokens (and full-length sequences) the KV cache
holds: ``(fraction × GPU memory − weights − reserve) / bytes per token``.
"""

from __future__ import annotations

import math

from areal_alloc.architecture import Architecture
from areal_alloc.estimate.backends import server_model
from areal_alloc.estimate.execution import (
    GIB,
    InferenceSettings,
)
from areal_alloc.estimate.memory import (
    KVCache,
    MemoryEstimate,
    Phase,
    Term,
    dtype_bytes,
    readable_bytes,
    short_count,
)
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "CUDA_CONTEXT_BYTES",
    "NON_TORCH_BYTES",
    "VLLM_SAMPLER_BYTES",
    "inference_memory",
    "inference_weights",
    "kv_bytes_per_token",
    "non_torch_bytes",
    "pipeline_stages",
    "vllm_default_batched_tokens",
    "vllm_held_allreduce_bytes",
    "vllm_profile_activation",
]


def pipeline_stages(backend: str, layers: int, pp: int) -> list[int]:
    """The decoder layers of each of an inference server's ``pp`` stages. Both split
    unevenly: vLLM 0.19.1 gives the extra layers to the stages before the last
    (vllm/distributed/utils.py ``get_pp_indices`` l.124-129: ``partitions[-i] += 1`` for
    i in 2 .. remainder + 1), SGLang 0.5.10.post1 to the last ``remainder`` stages
    (python/sglang/srt/distributed/utils.py ``get_pp_indices`` l.122-133); each stage
    needs one layer at least."""
    pp = max(pp, 1)
    parts = [layers // pp] * pp
    extra = layers % pp
    if server_model(backend).extra_layers_before_last:
        for i in range(2, extra + 2):
            parts[-i] += 1
    else:
        for i in range(pp - extra, pp):
            parts[i] += 1
    return parts


def inference_weights(
    backend: str, arch: Architecture, tp: int, pp: int, compute: int, dtype: str
) -> tuple[float, str]:
    """One GPU's weights: the largest pipeline stage (:func:`pipeline_stages`; the first
    stage holds the embedding, the last the output head and final norm) over t; a quantized
    checkpoint's layers at its bytes per weight (``Architecture.quantization``), the
    embedding and output head in the activation dtype ``compute``."""
    p = arch.parameters
    quant = arch.quantization
    per_weight = quant.weight_bytes if quant is not None else float(compute)
    per_layer = p.layers / max(arch.num_layers, 1)
    stages = pipeline_stages(backend, arch.num_layers, pp)
    vocab_tail = p.output + p.final_norm

    def stage(i: int) -> float:
        head = p.embedding if i == 0 else 0
        tail = vocab_tail if i == len(stages) - 1 else 0
        return stages[i] * per_layer * per_weight + (head + tail) * compute

    largest = max(range(len(stages)), key=stage)
    weights = stage(largest) / tp
    quant_text = (
        f"{short_count(p.layers)} layer params × {per_weight:.4g} B ({quant.text}) + "
        f"{short_count(p.embedding + vocab_tail)} embedding and output × {compute} B ({dtype})"
        if quant is not None
        else f"{short_count(p.total)} params × {compute} B ({dtype})"
    )
    if pp == 1:
        return weights, f"{quant_text} / t{tp}"
    split = ", ".join(map(str, stages))
    return weights, (
        f"{quant_text}, pipeline stages [{split}] layers ({backend}'s split): the largest, "
        f"stage {largest + 1} of {pp}, / t{tp}"
    )


def kv_bytes_per_token(
    arch: Architecture, tp: int, pp: int, kv_dtype_bytes: int
) -> tuple[int, str]:
    """KV bytes one token takes on one GPU, as vLLM and SGLang allocate them.

    Per layer 2 (k and v) × kv heads on this GPU × head size × dtype bytes; a
    GPU holds ``max(1, kv_heads // t)`` heads (replicated when fewer than t) and
    ``ceil(layers / p)`` layers. MLA caches one latent of kv_lora_rank + rope
    dims per layer, the same on every tensor-parallel rank.
    """
    layers = math.ceil(arch.num_layers / pp)  # the largest stage (pipeline_stages)
    if arch.is_mla:
        width = arch.kv_lora_rank + arch.qk_rope_head_dim
        return (
            width * layers * kv_dtype_bytes,
            f"MLA latent ({arch.kv_lora_rank} + rope {arch.qk_rope_head_dim}) × {layers} layers × "
            f"{kv_dtype_bytes} B (not split by t)",
        )
    heads = max(1, arch.kv_heads // tp)
    return (
        2 * heads * arch.head_size * layers * kv_dtype_bytes,
        f"2 × {heads} kv heads (max(1, {arch.kv_heads}//t{tp})) × head {arch.head_size} × "
        f"{layers} layers × {kv_dtype_bytes} B",
    )


#: Bytes per logit element at the peak of vLLM's profile sampler run. vLLM V1 samples
#: ``max_num_seqs`` dummy requests with temperature, top-k = vocab − 1 and top-p = 0.9
#: (vllm/v1/worker/gpu_model_runner.py ``_dummy_sampler_run``, vllm-project/vllm@
#: 35d5cda123ec28581759b6d34cde8052314fb1e6), so ``apply_top_k_top_p``
#: (vllm/v1/sample/ops/topk_topp_sampler.py) sorts the float32 logits. Live at the sort:
#: the model's bfloat16 logits 2 B, the sampler's float32 copy 4 B, the sorted values 4 B
#: and int64 indices 8 B, and inside torch's segmented sort (aten/src/ATen/native/cuda/
#: SortStable.cu ``segmented_sort_pairs``, pytorch/pytorch) the int64 reverse indices it
#: allocates 8 B and CUB's alternate key/value buffers 4 + 8 B: 38 B.
VLLM_SAMPLER_BYTES = 2 + 4 + 4 + 8 + 8 + 4 + 8


#: Memory outside torch that vLLM's profiler counts (NCCL and the custom all-reduce
#: buffers, created after its start-up snapshot): 0.13 GiB on one GPU, 0.54 GiB at t2, as
#: vLLM 0.11 printed them for Llama-3.1-8B, Qwen3-0.6B and Qwen3-32B on H100
#: (llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md
#: @0fa12aa9788aae02df8307a0305c223949b58cd4, "non-torch memory" per run).
NON_TORCH_BYTES = {1: int(0.13 * GIB), 2: int(0.54 * GIB)}


#: The CUDA context of a PyTorch process under CUDA's lazy module loading (CUDA ≥ 11.7):
#: "the currently used ~300MB ... Starting with 11.7 CUDA implemented lazy kernel/module
#: loading" (ptrblck, pytorch/pytorch#107667, comment of 2023-08-28). Memory a server's rule
#: counts when it measures from the device's total: SGLang's pool is a fraction of the free
#: memory after start-up (model_runner.py ``init_torch_distributed``'s
#: ``get_available_gpu_memory``, the context already taken), and vLLM V0 from vllm#2031 to
#: vllm#10511 took total − free after its profile run (worker.py
#: ``determine_num_available_blocks``: ``non_torch_allocations = (total − free) − torch
#: allocated``, the line its "Memory profiling results: ... non_torch_memory" log prints).
CUDA_CONTEXT_BYTES = 300 << 20


def non_torch_bytes(tp: int) -> int:
    """:data:`NON_TORCH_BYTES` of one GPU of a t-way tensor-parallel instance."""
    return NON_TORCH_BYTES[1 if tp == 1 else 2]


def vllm_default_batched_tokens(device_bytes: int, gpu_name: str = "") -> int:
    """vLLM's server default ``max_num_batched_tokens``: 8,192 on a GPU of ≥ 70 GiB that is
    not an A100, else 2,048 (vllm/engine/arg_utils.py ``_set_default_args``,
    ``UsageContext.OPENAI_API_SERVER``, vllm-project/vllm@99d7eb5d6a512cfcc5a2b104f24ebf2d6cda772b:
    ``if device_memory >= 70 * GiB_bytes and "a100" not in device_name``; the reference's
    vLLMConfig passes no max_num_batched_tokens, areal/api/cli_args.py at cbff54d6)."""
    return 8192 if device_bytes >= 70 * GIB and "a100" not in gpu_name.lower() else 2048


def vllm_held_allreduce_bytes(
    arch: Architecture, compute: int, batched_tokens: int
) -> tuple[int, str]:
    """The tensor-parallel all-reduce inputs vLLM's profile run kept before vllm#2151
    (:attr:`InferenceSettings.vllm_allreduce_inputs_held`): the vocabulary-parallel
    embedding's and, per layer, the attention output projection's and the MLP down
    projection's (row-parallel linears, vllm/model_executor/layers/linear.py), each the
    [batched tokens, h] hidden states: (2·layers + 1) × tokens × h × dtype bytes."""
    count = 2 * arch.num_layers + 1
    held = count * batched_tokens * arch.hidden_size * compute
    return held, (
        f"{count} tensor-parallel all-reduce inputs held (before vllm#2151): "
        f"{batched_tokens:,} tokens × h {arch.hidden_size} × {compute} B each"
    )


def vllm_profile_activation(
    arch: Architecture, tp: int, compute: int, max_num_seqs: int, batched_tokens: int
) -> tuple[int, str]:
    """The activation peak of vLLM's profile run: the larger of its forward over
    ``max_num_batched_tokens`` tokens (``_dummy_run(self.max_num_tokens)``) and its sampler
    over ``max_num_seqs`` requests (``_dummy_sampler_run``, :data:`VLLM_SAMPLER_BYTES` per
    logit of the whole vocabulary: vLLM gathers the logits on every tensor-parallel rank).
    The forward's peak is a layer's MLP down projection: its output (h) is allocated while
    the residual and the normed input (2h) and the gate-up output and its product (3f/t,
    the top-k experts' for an MoE layer) are alive: ``LlamaMLP.forward`` keeps ``gate_up``
    bound while ``self.down_proj(x)`` runs and the decoder layer keeps the normed
    ``hidden_states`` it passed in (vllm/model_executor/models/llama.py, vllm-project/vllm@
    0035bdf2b1ac243ef6f31eef27411b022461df8e): 3h + 3f/t per token. vllm#10517's V0 logs
    of Llama-3.1-8B at 20,000 and 29,000 profile tokens print activation peaks of 2.07 and
    2.99 GiB (peak_torch_memory − the weights' 14.99), 20,000 and 29,000 × 110,592 B."""
    h = arch.hidden_size
    if arch.is_moe:
        width = arch.experts_per_token * arch.moe_intermediate_size
        width += arch.shared_expert_intermediate_size
    else:
        width = arch.intermediate_size
    forward = batched_tokens * (3 * h + 3 * width / tp) * compute
    sampler = max_num_seqs * arch.vocab_size * VLLM_SAMPLER_BYTES
    if sampler >= forward:
        return int(sampler), (
            f"profile sampler run: {max_num_seqs} seqs × vocab {arch.vocab_size:,} × "
            f"{VLLM_SAMPLER_BYTES} B (bf16 + float32 logits, top-k/top-p sort)"
        )
    return int(forward), (
        f"profile forward: {batched_tokens:,} batched tokens × (3·{h} + 3·{width}/t{tp}) × "
        f"{compute} B"
    )


def inference_memory(
    key: str,
    backend: str,
    arch: Architecture,
    parallel: ParallelStrategy,
    settings: InferenceSettings,
    capacity: int | None,
) -> MemoryEstimate:
    """One GPU of one inference instance: weights, KV cache and its capacity.

    vLLM (vllm/v1/worker/gpu_worker.py ``determine_available_memory``, vllm-project/vllm@
    35d5cda123ec28581759b6d34cde8052314fb1e6): KV = gpu_memory_utilization × the
    device's total − (weights + the profile run's activation peak + non-torch memory);
    CUDA graphs are captured after the KV cache is sized.

    SGLang (python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py
    ``profile_max_num_token``, sgl-project/sglang@226149ac457bd1a1b5d450f55c01f72f604320d6):
    ``rest_memory = available_gpu_memory - total_gpu_memory * (1 - mem_fraction_static)``,
    the free memory after loading the weights less (1 − fraction) of the free memory
    before: KV = fraction × (device total − non-torch) − weights. Its activations and
    CUDA graphs live in the share it leaves free.
    """
    server_model(backend)  # a backend without a model is refused here, by name
    tp, pp = parallel.tp_size, parallel.pp_size
    compute = dtype_bytes(settings.dtype, f"{key}.dtype")
    kv_dtype = (
        compute
        if settings.kv_cache_dtype == "auto"
        else dtype_bytes(settings.kv_cache_dtype, f"{key}.kv_cache_dtype")
    )
    weights, weights_text = inference_weights(backend, arch, tp, pp, compute, settings.dtype)
    if settings.cpu_offload_gb:
        offloaded = min(weights, settings.cpu_offload_gb * GIB)
        weights -= offloaded
        weights_text += (
            f" − cpu_offload_gb {settings.cpu_offload_gb:g} GiB kept on the host "
            f"(SGLang and vLLM: cpu_offload_max_bytes = cpu_offload_gb × 1024³)"
        )
    per_token, formula = kv_bytes_per_token(arch, tp, pp, kv_dtype)
    device = settings.device_bytes if settings.device_bytes is not None else capacity
    terms = [Term("weights", int(weights), weights_text)]
    vllm = server_model(backend).profiled
    activations = 0
    if vllm:
        batched = settings.max_num_batched_tokens or vllm_default_batched_tokens(device or 0)
        activations, act_text = vllm_profile_activation(
            arch, tp, compute, settings.max_num_seqs, batched
        )
        if settings.vllm_allreduce_inputs_held and tp > 1:
            held, held_text = vllm_held_allreduce_bytes(arch, compute, batched)
            activations += held
            act_text += f" + {held_text}"
        terms.append(Term("activations", activations, act_text))
    if settings.reserve_bytes is not None:
        reserve = settings.reserve_bytes
        reserve_text = (
            f"{readable_bytes(reserve)} outside the weights and KV cache (--memory-reserve-gib)"
        )
    else:
        reserve = non_torch_bytes(tp)
        reserve_text = (
            f"{readable_bytes(reserve)} non-torch memory at t{tp} (NCCL, all-reduce buffers; "
            f"as vLLM's profiler measures it)"
        )
        if not vllm or settings.vllm_counts_cuda_context:
            reserve += CUDA_CONTEXT_BYTES
            reserve_text += f" + the CUDA context {readable_bytes(CUDA_CONTEXT_BYTES)} " + (
                "(taken before SGLang measures)" if not vllm else "(counted by this vLLM)"
            )
    terms.append(Term("reserve", reserve, reserve_text))
    tokens: int | None = None
    claimed: float | None = None
    if capacity is not None and device is not None:
        fraction = settings.memory_fraction
        if vllm:
            pool = fraction * device - weights - activations - reserve
            rule = f"{fraction:g} × {readable_bytes(device)} − weights − activations − reserve"
        else:
            pool = fraction * (device - reserve) - weights
            rule = f"{fraction:g} × ({readable_bytes(device)} − reserve) − weights"
        tokens = max(0, int(pool // per_token))
        terms.append(
            Term(
                "kv_cache",
                max(0, int(pool)),
                f"{rule} = {tokens:,} tokens × {per_token:,} B"
                + (
                    f" ({readable_bytes(device)}: what the device reports)"
                    if device != capacity
                    else ""
                ),
            )
        )
        # the claim is shown as the fraction of the capacity the user wrote (the plan's
        # colocation rules read it); the pool above uses what the device reports
        claimed = fraction
    kv = KVCache(per_token, formula, tokens, settings.context_length, settings.concurrency)
    assumptions = (f"{backend} claims {settings.memory_fraction:g} of each GPU",)
    estimate = MemoryEstimate(key, backend, tuple(terms), capacity, assumptions, kv, claimed)
    # the server loads its weights first; SGLang sizes its pool after loading them and
    # vLLM after its profile run (the rules above), so the claim is the generation phase's
    loading = tuple(t for t in terms if t.name in ("weights", "reserve"))
    return estimate.with_phases((Phase("load", loading), Phase("generation", tuple(terms))))
