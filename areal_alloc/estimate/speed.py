"""How fast a layout runs: a training step's time and an inference instance's throughput.

An estimate printed with its terms, never a bare number. Training
(:func:`training_step`):

- compute: the model's FLOPs for the step, counted as megatron-core counts them
  (megatron/training/training.py ``num_floating_point_operations``: 6 × the
  token-linear GEMM weights — attention projections, MLP or the top-k experts,
  the output layer — per token, plus 6 × query width × sequence length per token
  and layer for causal attention, :func:`attention_flops`), executed as the kernels
  run them (the flash attention backward is 2.5 forwards; recomputation adds a
  forward), the GEMMs at an achievable fraction of the GPU's dense BF16 peak and the
  attention at its own (:func:`attention_efficiency`);
- the pipeline bubble (p − 1) / (micro-batches × vpp) of the compute;
- tensor/sequence-parallel all-gathers and reduce-scatters (4 per layer forward,
  4 backward), context-parallel KV exchange, expert all-to-all (dispatch and
  combine, forward and backward), pipeline point-to-point, and the data-parallel
  gradient reduce-scatter and parameter all-gather (FSDP: parameter all-gathers
  forward and backward for every micro-batch), each on the link its group
  crosses: NVLink inside a node, the network between nodes (a ring collective
  across nodes through the ports of all its members in each node).

FSDP's collectives overlap compute as FSDP2's prefetch runs them (only the first
gather and the last reduce-scatter wait, unless they outlast the compute); other
communication is assumed not to overlap (its terms add to the step). Every
assumption is printed with the estimate. Inference: a decode step
(:func:`decode_step`) takes the longer of reading the weights and the batch's KV
from HBM and the GEMMs at the batch, plus 2 tensor-parallel all-reduces per layer;
one instance's generation (:func:`generation`) is its prefill at compute and then
its decode steps. A :class:`StepTerm` marked ``hidden`` runs under another and is
shown, not added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate import calibration
from areal_alloc.estimate.system import DEFAULT_INTER_NODE_GBPS, Hardware
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "StepEstimate",
    "StepTerm",
    "attention_efficiency",
    "attention_flops",
    "balance_advice",
    "decode_step",
    "fit_decode",
    "fit_training",
    "generation",
    "model_flops",
    "training_step",
]

#: What a training step can recompute: nothing, Megatron's core attention ("selective"),
#: torchtitan's per-op policy ("op") or every forward ("full").
RECOMPUTATIONS = ("none", "selective", "op", "full")


@dataclass(frozen=True, slots=True)
class StepTerm:
    """One term of a step; a ``hidden`` term runs under another (a max, or a collective
    overlapped with compute) and is printed but not added to the step."""

    name: str
    seconds: float
    formula: str
    hidden: bool = False


@dataclass(frozen=True, slots=True)
class StepEstimate:
    """A training step (or an inference decode step) term by term."""

    terms: tuple[StepTerm, ...]
    tokens: int  # tokens the step processes (training) or produces (decode)
    model_flops: float
    gpus: int
    peak_tflops: float
    assumptions: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        return sum(t.seconds for t in self.terms if not t.hidden)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation: the model's FLOPs over the GPUs' peak for the step."""
        if self.seconds <= 0:
            return 0.0
        return self.model_flops / (self.seconds * self.gpus * self.peak_tflops * 1e12)

    @property
    def bottleneck(self) -> str:
        return max((t for t in self.terms if not t.hidden), key=lambda t: t.seconds).name

    def terms_dict(self) -> list[dict[str, object]]:
        return [
            {"name": t.name, "seconds": t.seconds, "formula": t.formula}
            | ({"hidden": True} if t.hidden else {})
            for t in self.terms
        ]

    def to_dict(self) -> dict[str, object]:
        return {
            "step_seconds": self.seconds,
            "tokens_per_second": self.tokens_per_second,
            "mfu": self.mfu,
            "bottleneck": self.bottleneck,
            "terms": self.terms_dict(),
            "assumptions": list(self.assumptions),
        }


def balance_advice(balance: float | None) -> str:
    """What to do about a balance of generation rate over training rate."""
    if balance is None:
        return "one side has no estimate"
    if 0.9 <= balance <= 1.1:
        return "balanced"
    if balance > 1:
        return f"rollout produces {balance:.1f}× what training consumes: move GPUs to training"
    return f"training could consume {1 / balance:.1f}× what rollout produces: move GPUs to rollout"


def model_flops(arch: Architecture, tokens: int, sequence_length: int) -> float:
    """FLOPs of one forward and backward pass over ``tokens`` packed in sequences of
    ``sequence_length``, as megatron-core's ``num_floating_point_operations`` counts them."""
    p = arch.parameters
    per_token_gemm = (
        p.attention * (p.dense_layers + p.moe_layers)
        + p.dense_mlp * p.dense_layers
        + (p.shared_experts + p.active_routed_experts + p.router) * p.moe_layers
        + arch.vocab_size * arch.hidden_size  # the output layer (logits)
    )
    return float(tokens) * 6 * per_token_gemm + attention_flops(arch, tokens, sequence_length)


def attention_flops(
    arch: Architecture, tokens: int, sequence_length: int, passes: int = 3
) -> float:
    """The causal attention core (QKᵀ and its product with V) over ``tokens`` in sequences of
    ``sequence_length``: 2 matmuls × 2 FLOPs × query width × s per token, layer and pass,
    halved by the causal mask (megatron-core's count; torchtitan's ``get_num_flop_per_token``
    and PaLM's MFU formula, 12·L·h·s per token over 3 passes, count the full square). It
    grows with the sequence: at s = 6h it equals the dense GEMMs (arXiv:2104.04473 eq. 3's
    ``s/(6h)``). ``passes``: 3 for forward and backward, 1 for a forward (prefill)."""
    return float(tokens) * 2 * passes * arch.query_width * sequence_length * arch.num_layers


#: "FlashAttention-2 achieving only 35% utilization on the H100 GPU" (Shah et al.,
#: FlashAttention-3, arXiv:2407.08608, abstract): the FSDP engines run FlashAttention-2
#: (the reference's FSDP engine and torchtitan's SDPA flash backend); Megatron's
#: Transformer Engine runs cuDNN's Hopper kernels, taken at the GEMMs' efficiency.
FLASH_ATTENTION_2_HOPPER = 0.35
_HOPPER = ("H100", "H200", "H800", "H20")
#: The attention kernels a training step can run, each as its speed relative to
#: FlashAttention-2's. FlashAttention-1 and its Triton port (flash_attn/flash_attn_triton.py:
#: "Overall Triton forward + backward is slightly slower than CUDA forward + backward")
#: run at half of it: FlashAttention-2 "yield[s] around 2× speedup compared to
#: FlashAttention, reaching 50-73% of the theoretical maximum FLOPs/s on A100", where
#: FlashAttention reached "only 25-40%" (Dao, arXiv:2307.08691, abstract and §1).
ATTENTION_KERNELS: dict[str, float] = {"flash-attention-2": 1.0, "flash-attention-1": 0.5}
DEFAULT_ATTENTION_KERNEL = "flash-attention-2"


def attention_efficiency(
    backend: str, hardware: Hardware, kernel: str = DEFAULT_ATTENTION_KERNEL
) -> float:
    """The fraction of peak the attention core reaches: FlashAttention-2's on a Hopper GPU
    under FSDP (or the GEMMs' if lower), else the GEMMs' efficiency; times the ``kernel``'s
    speed relative to FlashAttention-2 (:data:`ATTENTION_KERNELS`)."""
    if kernel not in ATTENTION_KERNELS:
        raise AllocationValidationError(
            f"attention kernel {kernel!r}: must be one of {', '.join(ATTENTION_KERNELS)}"
        )
    if backend == "fsdp" and hardware.name.upper().startswith(_HOPPER):
        base = min(hardware.compute_efficiency, FLASH_ATTENTION_2_HOPPER)
    else:
        base = hardware.compute_efficiency
    return base * ATTENTION_KERNELS[kernel]


def _inside(group_span: int, gpus_per_node: int) -> bool:
    return group_span <= gpus_per_node


def _members_per_node(size: int, stride: int, gpus_per_node: int) -> int:
    """How many ranks of a group of ``size`` ranks, ``stride`` apart, share a node."""
    if stride >= gpus_per_node:
        return 1
    return max(1, min(size, gpus_per_node // stride))


def training_step(
    backend: str,
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    *,
    tokens_per_step: int,
    tokens_per_micro_batch: int,
    sequence_length: int,
    recompute: str = "none",
    virtual_pipeline: int = 1,
    attention_kernel: str = DEFAULT_ATTENTION_KERNEL,
) -> StepEstimate:
    """One optimizer step of a training engine over ``tokens_per_step`` tokens;
    ``attention_kernel`` names the kernel that runs the attention core
    (:data:`ATTENTION_KERNELS`)."""
    tp, pp, dp, cp = parallel.tp_size, parallel.pp_size, parallel.dp_size, parallel.cp_size
    ep = parallel.ep_size
    world = parallel.world_size
    node = hardware.gpus_per_node
    if tokens_per_step < 1 or tokens_per_micro_batch < 1 or sequence_length < 1:
        raise AllocationValidationError(
            "tokens per step, per micro-batch and sequence length must be ≥ 1"
        )
    if recompute not in RECOMPUTATIONS:
        raise AllocationValidationError(
            f"recompute {recompute!r}: must be one of {', '.join(RECOMPUTATIONS)}"
        )
    micro_batches = max(1, math.ceil(tokens_per_step / (dp * tokens_per_micro_batch)))
    tokens_mb = min(tokens_per_micro_batch, math.ceil(tokens_per_step / dp))
    seq = min(sequence_length, tokens_mb)
    flops = model_flops(arch, tokens_per_step, seq)
    # in forward passes: the GEMMs' backward is 2 (3 in all), the flash attention kernels'
    # 2.5, as they compute QKᵀ again in the backward (Dao-AILab/flash-attention
    # benchmarks/benchmark_flash_attention.py@c082294e0f6c01d46318694a6f3e0274225a9683,
    # flops(): "return f if mode == "fwd" else (2.5 * f if mode == "bwd" else 3.5 * f)");
    # recomputation adds one forward: full to both, selective (Megatron's core attention)
    # to the attention only, "op" (torchtitan's per-op policy: "Saves output of all compute
    # ops, except every second mm", pytorch/torchtitan torchtitan/distributed/
    # activation_checkpoint.py; the attention kernel's output is saved) half the GEMMs'
    model_attention = attention_flops(arch, tokens_per_step, seq)
    gemm_again = {"full": 1.0, "op": 0.5}.get(recompute, 0.0)
    attn_again = 1.0 if recompute in ("full", "selective") else 0.0
    gemms = (flops - model_attention) * (3 + gemm_again) / 3
    attention = model_attention * (3.5 + attn_again) / 3
    peak = hardware.peak_tflops * 1e12
    attn_eff = attention_efficiency(backend, hardware, attention_kernel)
    compute = gemms / (world * peak * hardware.compute_efficiency) + attention / (
        world * peak * attn_eff
    )
    terms = [
        StepTerm(
            "compute",
            compute,
            f"(GEMMs {gemms:.3g} FLOPs at {hardware.compute_efficiency:g} + causal "
            f"attention {attention:.3g} FLOPs (s {seq:,}; the backward 2.5 forwards) at "
            f"{attn_eff:g} efficiency) / ({world} GPUs × {hardware.peak_tflops:g} TFLOP/s)"
            + {
                "full": " (full recomputation: every forward again)",
                "selective": " (selective recomputation: the attention's forward again)",
                "op": " (per-op recomputation: every second matmul's forward again)",
            }.get(recompute, ""),
        )
    ]
    # The memory-bound kernels between the GEMMs (norms, activation functions, dropout,
    # residual adds, rotary): each layer writes the 34·s·b·h bytes of activations it keeps
    # for the backward (Korthikanti et al. 2022, arXiv:2205.05198 §4.1, eq. 1 without the
    # 5as/h of a materialised attention matrix, which flash attention never stores) and the
    # backward reads them; full recomputation writes them once more. Their time grows with
    # h while the GEMMs' grows with h²: why small models reach less of peak.
    passes = 3 if recompute == "full" else 2
    moved = passes * 34 * arch.hidden_size * arch.num_layers * tokens_per_step
    hbm = hardware.hbm_tbps * 1e12 * hardware.hbm_efficiency
    elementwise = moved / (world * hbm)
    terms.append(
        StepTerm(
            "element-wise",
            elementwise,
            f"{passes} passes (forward writes, backward reads"
            + (", recomputation writes again" if recompute == "full" else "")
            + f") × 34 × h {arch.hidden_size} × {arch.num_layers} layers × "
            f"{tokens_per_step:,} tokens × 1 B / ({world} GPUs × {hardware.hbm_tbps:g} TB/s × "
            f"{hardware.hbm_efficiency:g})",
        )
    )
    assumptions = [
        f"{hardware.compute_efficiency:.3g} of peak compute and {hardware.comm_efficiency:.3g} of "
        f"link bandwidth are reached (--compute-efficiency, --comm-efficiency)",
        "FSDP's parameter all-gathers and gradient reduce-scatters overlap compute (FSDP2 "
        "prefetches the next layer's gather): the first gather and the last reduce-scatter "
        "are exposed; other communication does not overlap compute (its terms add)"
        if backend == "fsdp"
        else "communication does not overlap compute (its terms add to the step)",
    ]
    if attention_kernel != DEFAULT_ATTENTION_KERNEL:
        assumptions.append(
            f"attention at {attn_eff:g} of peak: {attention_kernel} runs at "
            f"{ATTENTION_KERNELS[attention_kernel]:g}× FlashAttention-2's speed (arXiv:2307.08691)"
        )
    elif attn_eff != hardware.compute_efficiency:
        assumptions.append(
            f"attention at {attn_eff:g} of peak: FlashAttention-2 on a Hopper GPU "
            f"(arXiv:2407.08608)"
        )
    if hardware.inter_node_gbps == DEFAULT_INTER_NODE_GBPS:
        assumptions.append(
            f"{DEFAULT_INTER_NODE_GBPS:g} Gb/s of network per GPU between nodes (--inter-node-gbps)"
        )
    if pp > 1:
        bubble = (pp - 1) / (micro_batches * virtual_pipeline) * (compute + elementwise)
        terms.append(
            StepTerm(
                "pipeline bubble",
                bubble,
                f"(p{pp} − 1) / ({micro_batches} micro-batches × vpp {virtual_pipeline}) × "
                f"(compute + element-wise)",
            )
        )
    h = arch.hidden_size
    layers_here = arch.num_layers / pp
    act = tokens_mb / cp * h * 2  # one micro-batch's hidden states on this GPU, bf16
    if tp > 1:
        inside = _inside(tp, node)
        members = _members_per_node(tp, 1, node)
        volume = 8 * layers_here * micro_batches * act * (tp - 1) / tp
        terms.append(
            StepTerm(
                "tensor parallel",
                volume / hardware.link_bytes_per_second(inside, members),
                f"8 all-gathers/reduce-scatters × {layers_here:g} layers × {micro_batches} "
                f"micro-batches × {act / 2**20:.1f} MiB × (t{tp} − 1)/t{tp} over "
                f"{hardware.link_name(inside, members)}",
            )
        )
    if cp > 1:
        inside = _inside(tp * cp, node)
        kv = tokens_mb / cp * arch.kv_width * 2 * 2  # k and v, bf16
        volume = 3 * layers_here * micro_batches * kv * (cp - 1)
        terms.append(
            StepTerm(
                "context parallel",
                volume / hardware.link_bytes_per_second(inside),
                f"KV ring: 3 passes (forward, backward k/v and their gradients) × "
                f"{layers_here:g} layers × {micro_batches} micro-batches × "
                f"{kv / 2**20:.1f} MiB × (c{cp} − 1) over {hardware.link_name(inside)}",
            )
        )
    if ep > 1 and arch.is_moe:
        # the expert group lies within a stage: never wider than its world // pp GPUs
        inside = _inside(min(tp * cp * ep, world // pp), node)
        moe_here = arch.moe_layer_count / pp
        volume = 4 * moe_here * micro_batches * act * arch.experts_per_token * (ep - 1) / ep
        terms.append(
            StepTerm(
                "expert all-to-all",
                volume / hardware.link_bytes_per_second(inside),
                f"4 all-to-alls (dispatch, combine; forward, backward) × {moe_here:g} MoE "
                f"layers × {micro_batches} micro-batches × {act / 2**20:.1f} MiB × top-"
                f"{arch.experts_per_token} × (e{ep} − 1)/e{ep} over {hardware.link_name(inside)}",
            )
        )
    if pp > 1:
        inside = _inside(world // pp, node) and world // pp < node
        volume = 2 * micro_batches * act / tp
        terms.append(
            StepTerm(
                "pipeline p2p",
                volume / hardware.link_bytes_per_second(inside),
                f"2 sends (activation, gradient) × {micro_batches} micro-batches × "
                f"{act / tp / 2**20:.1f} MiB over {hardware.link_name(inside)}",
            )
        )
    p = arch.parameters
    params_here = (
        p.total / (tp * pp)
        if not arch.is_moe
        else (
            (p.total - p.expert_sharded) / (tp * pp)
            + p.expert_sharded / (pp * ep * parallel.etp_size)
        )
    )
    shards = dp * cp
    if shards > 1:
        inside = _inside(world // pp, node)
        members = _members_per_node(shards, tp, node)  # the dp·cp group: ranks t apart
        link = hardware.link_bytes_per_second(inside, members)
        if backend == "fsdp":
            # FSDP2 (torch.distributed.fsdp fully_shard): the next layer's all-gather is issued
            # before the current layer computes (implicit forward/backward prefetch), so only
            # the first layer's gather and the last layer's reduce-scatter wait; the rest hides
            # under compute unless the collectives take longer than it (PyTorch's FSDP2
            # tutorial, pytorch/tutorials intermediate_source/FSDP_tutorial.rst: "Implicit
            # Prefetching: CPU thread issues all-gather i before layer i. All-gathers are
            # queued into its own cuda stream while layer i computation happens").
            volume = (2 * micro_batches * 2 + 4) * params_here * (shards - 1) / shards
            exposed = (2 + 4) * params_here / layers_here * (shards - 1) / shards / link
            total = volume / link
            hidden_under = compute + elementwise
            seconds = exposed + max(0.0, total - exposed - hidden_under)
            terms.append(
                StepTerm(
                    "data parallel",
                    seconds,
                    f"exposed: one layer's gather (2 B) and reduce-scatter (4 B) × "
                    f"{params_here / layers_here / 1e6:.3g}M params × (dp·cp {shards} − 1)/{shards}"
                    f" = {exposed:.3g} s, + max(0, all (2 parameter all-gathers × "
                    f"{micro_batches} micro-batches × 2 B + gradient reduce-scatter × 4 B) × "
                    f"{params_here / 1e9:.3g}B params = {total:.3g} s − exposed − compute "
                    f"{hidden_under:.3g} s) over {hardware.link_name(inside, members)}",
                )
            )
        else:
            volume = (4 + 2) * params_here * (shards - 1) / shards
            formula = (
                f"(gradient reduce-scatter × 4 B + parameter all-gather × 2 B) × "
                f"{params_here / 1e9:.3g}B params × (dp·cp {shards} − 1)/{shards} over "
                f"{hardware.link_name(inside, members)}"
            )
            terms.append(StepTerm("data parallel", volume / link, formula))
    if hardware.calibration:
        assumptions.append(f"calibrated: {hardware.calibration}")
    return StepEstimate(
        tuple(terms), tokens_per_step, flops, world, hardware.peak_tflops, tuple(assumptions)
    )


def decode_step(
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    *,
    batch: int,
    context: int,
    kv_bytes_per_token: int,
) -> StepEstimate:
    """One decode step of one inference instance with ``batch`` sequences (those in flight
    on it) of ``context`` tokens: the longer of reading every weight and the batch's KV from
    HBM and the GEMMs' compute at the batch (the roofline: a step is memory-bound until
    2 × active params × batch FLOPs outlast the reads, arXiv:2402.16363 "LLM Inference
    Unveiled: Survey and Roofline Model Insights"), plus 2 tensor-parallel all-reduces
    per layer (Megatron's row-parallel attention output and MLP, arXiv:1909.08053 §3)."""
    tp, pp = parallel.tp_size, parallel.pp_size
    p = arch.parameters
    weights = p.total * 2 / (tp * pp)
    kv = batch * context * kv_bytes_per_token
    hbm = hardware.hbm_tbps * 1e12 * hardware.hbm_efficiency
    reads = (weights + kv) / hbm * pp
    flops = 2.0 * p.active * batch
    gemm = flops / (tp * hardware.peak_tflops * 1e12 * hardware.compute_efficiency)
    terms = [
        StepTerm(
            "HBM reads",
            reads,
            f"(weights {weights / 2**30:.1f} GiB + KV {batch} × {context:,} × "
            f"{kv_bytes_per_token:,} B) / ({hardware.hbm_tbps:g} TB/s × "
            f"{hardware.hbm_efficiency:g}) × p{pp} stages",
            hidden=gemm > reads,
        ),
        StepTerm(
            "GEMM compute",
            gemm,
            f"2 × {p.active / 1e9:.3g}B active params × batch {batch} / (t{tp} × "
            f"{hardware.peak_tflops:g} TFLOP/s × {hardware.compute_efficiency:g}); the step "
            f"takes the longer of this and the HBM reads",
            hidden=gemm <= reads,
        ),
    ]
    if tp > 1:
        inside = _inside(tp, hardware.gpus_per_node)
        members = _members_per_node(tp, 1, hardware.gpus_per_node)
        volume = 2 * arch.num_layers * batch * arch.hidden_size * 2 * 2 * (tp - 1) / tp
        terms.append(
            StepTerm(
                "tensor parallel",
                volume / hardware.link_bytes_per_second(inside, members),
                f"2 all-reduces × {arch.num_layers} layers × {batch} tokens × h "
                f"{arch.hidden_size} × 2 B × 2(t{tp} − 1)/t{tp} over "
                f"{hardware.link_name(inside, members)}",
            )
        )
    bound = "compute-bound" if gemm > reads else "memory-bound"
    return StepEstimate(
        tuple(terms),
        batch,
        flops,
        tp * pp,
        hardware.peak_tflops,
        (f"decode is {bound} at batch {batch}: max(weights + KV read, GEMM compute)",)
        + ((f"calibrated: {hardware.calibration}",) if hardware.calibration else ()),
    )


def generation(
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    *,
    batch: int,
    prompt_len: int,
    gen_len: int,
    kv_bytes_per_token: int,
) -> StepEstimate:
    """One instance generating ``gen_len`` tokens for each of ``batch`` sequences of
    ``prompt_len`` prompt tokens: the prefill at compute (2 × active params + the causal
    attention's forward, 2 × query width × s per layer, per prompt token; the stages of a
    pipeline run one after another), then ``gen_len`` decode steps at the mean context
    ``prompt_len + gen_len / 2`` (the KV read grows linearly, so its mean is exact).
    ``tokens_per_second`` is the generated tokens over the whole time, prefill included."""
    if batch < 1 or prompt_len < 0 or gen_len < 1:
        raise AllocationValidationError(
            f"batch {batch}, prompt length {prompt_len}, generation length {gen_len}: the "
            f"batch and the generation length must be ≥ 1, the prompt length ≥ 0"
        )
    tp = parallel.tp_size
    p = arch.parameters
    prompt_tokens = batch * prompt_len
    attention = attention_flops(arch, prompt_tokens, prompt_len, passes=1)
    prefill_flops = 2.0 * p.active * prompt_tokens + attention
    peak = hardware.peak_tflops * 1e12
    terms = [
        StepTerm(
            "prefill compute",
            prefill_flops / (tp * peak * hardware.compute_efficiency),
            f"(2 × {p.active / 1e9:.3g}B active params × {prompt_tokens:,} prompt tokens + "
            f"causal attention {attention:.3g} FLOPs) / (t{tp} × {hardware.peak_tflops:g} "
            f"TFLOP/s × {hardware.compute_efficiency:g})",
        )
    ]
    if tp > 1 and prompt_tokens:
        inside = _inside(tp, hardware.gpus_per_node)
        members = _members_per_node(tp, 1, hardware.gpus_per_node)
        volume = 2 * arch.num_layers * prompt_tokens * arch.hidden_size * 2 * 2 * (tp - 1) / tp
        terms.append(
            StepTerm(
                "prefill tensor parallel",
                volume / hardware.link_bytes_per_second(inside, members),
                f"2 all-reduces × {arch.num_layers} layers × {prompt_tokens:,} tokens × h "
                f"{arch.hidden_size} × 2 B × 2(t{tp} − 1)/t{tp} over "
                f"{hardware.link_name(inside, members)}",
            )
        )
    context = prompt_len + gen_len // 2
    one = decode_step(
        arch,
        parallel,
        hardware,
        batch=batch,
        context=context,
        kv_bytes_per_token=kv_bytes_per_token,
    )
    terms.extend(
        StepTerm(
            f"decode {t.name}",
            t.seconds * gen_len,
            f"{gen_len:,} steps × ({t.formula}) at mean context {context:,}",
            t.hidden,
        )
        for t in one.terms
    )
    return StepEstimate(
        tuple(terms),
        batch * gen_len,
        prefill_flops + one.model_flops * gen_len,
        one.gpus,
        hardware.peak_tflops,
        (
            f"{batch} sequences in flight on the instance for the whole generation",
            "the prefill runs at compute before the decode steps",
            *one.assumptions,
        ),
    )


# --- calibration: the efficiency that makes an estimate match a measurement ------------


def fit_training(measured_seconds: float, estimate: StepEstimate, hardware: Hardware) -> float:
    """The compute efficiency that makes ``estimate`` take ``measured_seconds``."""
    calibration.check_measured(measured_seconds, "--step-seconds", calibration.MAX_STEP_SECONDS)
    compute = sum(t.seconds for t in estimate.terms if t.name in ("compute", "pipeline bubble"))
    rest = estimate.seconds - compute
    if measured_seconds <= rest:
        raise AllocationValidationError(
            f"the measured {measured_seconds:g} s is less than the estimated communication "
            f"alone ({rest:.3g} s): give the cluster's real network (--inter-node-gbps) or a "
            f"higher --comm-efficiency"
        )
    efficiency = hardware.compute_efficiency * compute / (measured_seconds - rest)
    return calibration.check_efficiency(
        efficiency,
        f"the measured {measured_seconds:g} s",
        "peak compute",
        "check the measurement, the layout, the tokens per step and the GPU",
    )


def fit_decode(
    measured_tokens_per_second: float,
    estimate: StepEstimate,
    hardware: Hardware,
    instances: int = 1,
) -> float:
    """The HBM efficiency that makes ``estimate`` (one instance's decode step) generate
    ``measured`` tokens per second over ``instances`` instances; messages quote the
    measurement as given."""
    calibration.check_measured(
        measured_tokens_per_second, "--tokens-per-second", calibration.MAX_TOKENS_PER_SECOND
    )
    measured_seconds = estimate.tokens * instances / measured_tokens_per_second
    hbm = sum(t.seconds for t in estimate.terms if t.name == "HBM reads" and not t.hidden)
    rest = estimate.seconds - hbm
    if measured_seconds <= rest:
        raise AllocationValidationError(
            f"{measured_tokens_per_second:g} tokens/s is faster than the estimated "
            f"tensor-parallel traffic alone allows ({estimate.tokens * instances / rest:,.0f} "
            f"tokens/s)"
        )
    efficiency = hardware.hbm_efficiency * hbm / (measured_seconds - rest)
    return calibration.check_efficiency(
        efficiency,
        f"{measured_tokens_per_second:g} tokens/s",
        "the HBM bandwidth",
        "check the measurement, the layout, the batch and the GPU",
    )
