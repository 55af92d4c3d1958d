"""How long one optimizer step of a training engine takes, term by term (:func:`training_step`).

- compute: the model's FLOPs for the step (``speed.model_flops``, counted as megatron-core
  counts them), executed as the kernels run them (the flash attention backward is 2.5
  forwards; recomputation adds a forward), the GEMMs at an achievable fraction of the
  GPU's dense BF16 peak and the attention at its own (``speed.attention_efficiency``);
- the memory-bound element-wise kernels between the GEMMs;
- pipeline imbalance: a pipeline engine waits for its slowest rank on every micro-batch,
  whose layers (as ``pipeline_split.engine_split`` places them, the output layer on the
  last rank) may hold more FLOPs than the mean rank's;
- the pipeline bubble (p − 1) / (micro-batches × vpp) of the slowest rank's compute;
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
assumption is printed with the estimate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.backends import training_model
from areal_alloc.estimate.execution import (
    DEFAULT_RECOMPUTE_MODULES,
    RECOMPUTE,
    TOKEN_DISPATCHERS,
    TrainingSettings,
    fsdp_keeps_mlp_whole,
    one_of,
)
from areal_alloc.estimate.memory_sharding import pipeline_ranks
from areal_alloc.estimate.pipeline_split import PipelineSplit
from areal_alloc.estimate.speed import (
    ATTENTION_KERNELS,
    DEFAULT_ATTENTION_KERNEL,
    LayerFlops,
    StepEstimate,
    StepTerm,
    attention_efficiency,
    attention_flops,
    layer_flops,
    members_per_node,
    model_flops,
    within_node,
)
from areal_alloc.estimate.speed_host import UNMEASURED, host_term
from areal_alloc.estimate.system import DEFAULT_INTER_NODE_GBPS, Hardware
from areal_alloc.experiment.sections.megatron import recompute_module_names
from areal_alloc.model_shape import engine_micro_batches, packed_groups
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "RECOMPUTATIONS",
    "expected_groups_reached",
    "settings_step",
    "training_step",
]


#: What a training step can recompute: nothing, Megatron's core attention ("selective"),
#: every forward ("full") or torchtitan's per-op policy ("op"): the one list of the engines'
#: settings (:data:`areal_alloc.estimate.execution.RECOMPUTE`).
RECOMPUTATIONS = RECOMPUTE


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
    layer_split: str = "areal",
    token_dispatcher: str = "alltoall",
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES,
    packed_count: int | None = None,
    least_count: int = 1,
    pad_to_maximum: bool = False,
    forward_only: bool = False,
) -> StepEstimate:
    """One optimizer step of a training engine over ``tokens_per_step`` tokens;
    ``packed_count``: the micro-batches a rank's share is packed into by count
    (``mb_spec.max_tokens_per_mb`` unset: ``mb_spec.n_mbs``, ``TrainingSettings.
    micro_batches``), raised to the engine's own minimum; None: as many as the tokens
    budget needs, at least ``least_count`` (``mb_spec.n_mbs``);
    ``attention_kernel`` names the kernel that runs the attention core
    (:data:`ATTENTION_KERNELS`), ``layer_split`` the rule that splits the layers over the
    pipeline stages (``TrainingSettings.layer_split``, ``pipeline_split.engine_split``),
    ``token_dispatcher`` how the MoE layers move tokens (``TrainingSettings.
    token_dispatcher``) and ``recompute_modules`` what ``recompute="selective"`` recomputes
    (``TrainingSettings.recompute_modules``, megatron-core's names); ``pad_to_maximum``: by
    a budget, every micro-batch is padded to it and computed whole (areal/utils/data.py
    ``pad_mb_list`` l.1011-1022 at cbff54d6; by count the reference pads nothing). Each
    term is one function below, written from the step's :class:`_TrainingShape`; the
    tokens per second and the MFU count the step's own tokens. ``forward_only``: one
    no-grad forward pass (a ref's, a teacher's, ``compute_logp``): the forward's FLOPs and
    element-wise writes, the forward's half of the collectives (:data:`_FORWARD_SHARE`),
    nothing recomputed, no optimizer step. Engines running Hugging Face modeling code add
    their host time (``speed_host.host_term``): the step takes the longer of host and GPU."""
    training_model(backend)  # a backend without a model is refused here, by name
    if forward_only:
        recompute = "none"
    if tokens_per_step < 1 or tokens_per_micro_batch < 1 or sequence_length < 1:
        raise AllocationValidationError(
            "tokens per step, per micro-batch and sequence length must be ≥ 1"
        )
    # the settings' own checks (TrainingSettings), for callers that pass them directly
    one_of(recompute, RECOMPUTATIONS, "recompute")
    one_of(token_dispatcher, TOKEN_DISPATCHERS, "token_dispatcher")
    recompute_modules = recompute_module_names(recompute_modules, "recompute_modules")
    dp = parallel.dp_size
    by_tokens = max(1, math.ceil(tokens_per_step / (dp * tokens_per_micro_batch)))
    # by a budget, at least mb_spec.n_mbs (least_count); by count, exactly packed_count
    wanted = max(by_tokens, least_count) if packed_count is None else max(1, packed_count)
    # the reference's engines run at least 2·pp (megatron) or pp × stages per rank (archon)
    micro_batches = engine_micro_batches(backend, parallel.pp_size, virtual_pipeline, wanted)
    micro_batches = wanted if micro_batches is None else micro_batches
    tokens_mb = min(tokens_per_micro_batch, math.ceil(tokens_per_step / (dp * micro_batches)))
    computed = tokens_per_step  # the tokens the GPUs run: with padding, every budget whole
    padding: tuple[str, ...] = ()
    if pad_to_maximum and packed_count is None:
        # seqpack puts whole sequences in a micro-batch (TrainingSettings.groups): as many
        # as the budget holds, in at least the engine's count, each padded to the budget
        micro_batches = packed_groups(
            backend,
            parallel.pp_size,
            virtual_pipeline,
            least_count,
            math.ceil(tokens_per_step / (dp * sequence_length)),
            tokens_per_micro_batch // sequence_length,
        )
        computed = max(tokens_per_step, dp * micro_batches * tokens_per_micro_batch)
        tokens_mb = tokens_per_micro_batch
    if computed > tokens_per_step:
        padding = (
            f"pad_to_maximum: each of a rank's {micro_batches:,} micro-batches is padded to the "
            f"budget of {tokens_per_micro_batch:,} tokens and computed whole, {computed:,} "
            f"tokens run for the step's {tokens_per_step:,} (areal/utils/data.py pad_mb_list "
            f"l.1011-1022 at cbff54d6)",
        )
    step = _TrainingShape(
        backend,
        arch,
        parallel,
        hardware,
        computed,
        micro_batches,
        tokens_mb,
        min(sequence_length, tokens_mb),
        recompute,
        token_dispatcher,
        tuple(recompute_modules) if recompute == "selective" else (),
        forward_only,
    )
    flops = model_flops(arch, tokens_per_step, step.seq)  # the model's work: the MFU's
    attn_eff = attention_efficiency(backend, hardware, attention_kernel)
    run = flops if computed == tokens_per_step else model_flops(arch, computed, step.seq)
    compute = _compute_term(step, run, attn_eff)
    elementwise = _elementwise_term(step)
    busy = compute.seconds + elementwise.seconds  # what FSDP's collectives hide under
    terms = [compute, elementwise]
    reads = _weight_reads_term(step, compute.seconds)
    if reads is not None:  # a share of tokens too small to keep the GEMMs compute-bound
        terms.append(reads)
        busy += reads.seconds
    split, rank_layers = pipeline_ranks(
        backend, arch, parallel.pp_size, virtual_pipeline, parallel.ep_size, layer_split
    )
    if split is not None:
        per_layer = layer_flops(arch, computed, step.seq)
        imbalance = _imbalance_term(step, split, rank_layers, per_layer, busy)
        terms.append(imbalance)
        terms.append(_bubble_term(step, virtual_pipeline, busy, busy + imbalance.seconds))
    for term in (
        _tensor_parallel_term(step),
        _context_parallel_term(step),
        _expert_term(step),
        _pipeline_p2p_term(step),
        _data_parallel_term(step, busy),
    ):
        if term is not None:
            terms.append(term)
    if forward_only:
        terms = [terms[0], terms[1], *(_forward_share(t) for t in terms[2:])]
        flops /= 3  # the model's forward FLOPs: the MFU of a forward pass
    host = host_term(
        backend,
        step.layers_here,
        micro_batches,
        recompute=recompute == "full",
        forward_only=forward_only,
        gpu_seconds=sum(t.seconds for t in terms if not t.hidden),
    )
    if host is not None:
        terms.append(host)
    assumptions = _training_assumptions(backend, hardware, attention_kernel, attn_eff) + padding
    if host is None:
        assumptions += (
            UNMEASURED.format(what=f"the {backend} engine", why="the pipeline's scheduling"),
        )
    if token_dispatcher == "deepep" and arch.is_moe and parallel.ep_size > 1:
        assumptions += (
            f"DeepEP's traffic under balanced routing: each token's top-{arch.experts_per_token} "
            f"distinct experts uniformly among the {arch.num_experts} (the balance the "
            f"auxiliary loss and forced balancing aim at; skewed routing sends more)",
        )
    return StepEstimate(
        tuple(terms), tokens_per_step, flops, step.world, hardware.peak_tflops, assumptions
    )


def settings_step(
    backend: str,
    arch: Architecture,
    parallel: ParallelStrategy,
    hardware: Hardware,
    settings: TrainingSettings,
    *,
    tokens: int,
    sequence_length: int,
    optimizer_steps: int = 1,
    key: str = "actor",
) -> StepEstimate:
    """``optimizer_steps`` optimizer steps of engine ``key`` with its own ``settings`` over
    ``tokens`` in all: ``ppo_update`` splits a step's data into ``ppo_n_minibatches`` and
    runs ``train_batch`` on each (areal/trainer/ppo/actor.py l.454-457, critic.py l.63-66 at
    cbff54d6), each with its own micro-batches (at least the engine's minimum), pipeline
    fill and drain, gradient synchronisation and optimizer step. Without an optimizer (a
    forward-only engine) it is one forward pass, nothing recomputed."""

    def over(tokens_here: int) -> StepEstimate:
        return training_step(
            backend,
            arch,
            parallel,
            hardware,
            tokens_per_step=tokens_here,
            tokens_per_micro_batch=settings.tokens_per_micro_batch,
            sequence_length=min(sequence_length, settings.tokens_per_micro_batch),
            recompute="none" if settings.optimizer is None else settings.recompute,
            forward_only=settings.optimizer is None,
            virtual_pipeline=settings.virtual_pipeline,
            layer_split=settings.layer_split,
            token_dispatcher=settings.token_dispatcher,
            recompute_modules=settings.recompute_modules,
            packed_count=settings.micro_batches,
            least_count=settings.n_mbs,
            pad_to_maximum=settings.pad_to_maximum,
        )

    if optimizer_steps <= 1:
        return over(tokens)
    each = math.ceil(tokens / optimizer_steps)
    where = "critic.py l.63-66" if key == "critic" else "actor.py l.454-457"
    return over(each).repeated(
        optimizer_steps,
        tokens,
        f"{key}.ppo_n_minibatches={optimizer_steps}: {optimizer_steps} optimizer steps per RL "
        f"step, each train_batch over {each:,} tokens with its own micro-batches, pipeline "
        f"fill and drain and gradient synchronisation (areal/trainer/ppo/{where} at cbff54d6)",
    )


@dataclass(frozen=True, slots=True)
class _TrainingShape:
    """One training step as one GPU sees it: the local names every term is written from."""

    backend: str
    arch: Architecture
    parallel: ParallelStrategy
    hardware: Hardware
    tokens: int  # the step's tokens, all data-parallel ranks together
    micro_batches: int  # per data-parallel rank
    tokens_mb: int  # tokens of one micro-batch
    seq: int  # sequence length inside a micro-batch
    recompute: str
    token_dispatcher: str  # TOKEN_DISPATCHERS
    #: what selective recomputation recomputes (megatron-core's recompute_modules); ()
    #: unless ``recompute`` is "selective"
    modules: tuple[str, ...]
    forward_only: bool = False  # one no-grad forward pass, no backward

    def recomputes(self, module: str) -> bool:
        """Selective recomputation runs ``module``'s forward again in the backward."""
        return module in self.modules

    @property
    def world(self) -> int:
        return self.parallel.world_size

    @property
    def node(self) -> int:
        return self.hardware.gpus_per_node

    @property
    def layers_here(self) -> float:
        """Layers of one pipeline stage."""
        return self.arch.num_layers / self.parallel.pp_size

    @property
    def act(self) -> float:
        """One micro-batch's hidden states on this GPU, bf16."""
        return self.tokens_mb / self.parallel.cp_size * self.arch.hidden_size * 2


def _compute_term(step: _TrainingShape, flops: float, attn_eff: float) -> StepTerm:
    """The GEMMs at the compute efficiency and the causal attention at its own."""
    arch, hardware, recompute, world = step.arch, step.hardware, step.recompute, step.world
    # in forward passes: the GEMMs' backward is 2 (3 in all), the flash attention kernels'
    # 2.5, as they compute QKᵀ again in the backward (Dao-AILab/flash-attention
    # benchmarks/benchmark_flash_attention.py@c082294e0f6c01d46318694a6f3e0274225a9683,
    # flops(): "return f if mode == "fwd" else (2.5 * f if mode == "bwd" else 3.5 * f)");
    # recomputation adds one forward: full to both, selective to each module it names
    # (:func:`_recomputed_gemms`; core_attn: the attention core), "op" (torchtitan's per-op
    # policy: "Saves output of all compute ops, except every second mm", pytorch/torchtitan
    # torchtitan/distributed/activation_checkpoint.py; the attention kernel's output is
    # saved) half the GEMMs'
    model_attention = attention_flops(arch, step.tokens, step.seq)
    if step.forward_only:  # the forward alone: a third of the GEMMs, one attention forward
        return _forward_compute_term(step, flops, model_attention, attn_eff)
    gemm_again = {"full": 1.0, "op": 0.5}.get(recompute, 0.0)
    attn_again = 1.0 if recompute == "full" or step.recomputes("core_attn") else 0.0
    again, named = _recomputed_gemms(step)
    gemms = (flops - model_attention) * (3 + gemm_again) / 3 + again
    attention = model_attention * (3.5 + attn_again) / 3
    peak = hardware.peak_tflops * 1e12
    compute = gemms / (world * peak * hardware.compute_efficiency) + attention / (
        world * peak * attn_eff
    )
    selective = (
        " (selective recomputation: "
        + (
            ", ".join([*(["the attention core's forward again"] if attn_again else []), *named])
            or "no GEMM or attention again"
        )
        + ")"
    )
    return StepTerm(
        "compute",
        compute,
        f"(GEMMs {gemms:.3g} FLOPs at {hardware.compute_efficiency:g} + causal "
        f"attention {attention:.3g} FLOPs (s {step.seq:,}; the backward 2.5 forwards) at "
        f"{attn_eff:g} efficiency) / ({world} GPUs × {hardware.peak_tflops:g} TFLOP/s)"
        + {
            "full": " (full recomputation: every forward again)",
            "selective": selective,
            "op": " (per-op recomputation: every second matmul's forward again)",
        }.get(recompute, ""),
    )


def _forward_compute_term(
    step: _TrainingShape, flops: float, model_attention: float, attn_eff: float
) -> StepTerm:
    """A no-grad forward pass: the forward third of the model's FLOPs (``model_flops``
    counts forward + backward, 3 forwards), the attention's forward once."""
    hardware, world = step.hardware, step.world
    gemms = (flops - model_attention) / 3
    attention = model_attention / 3
    peak = hardware.peak_tflops * 1e12
    return StepTerm(
        "compute",
        gemms / (world * peak * hardware.compute_efficiency)
        + attention / (world * peak * attn_eff),
        f"(forward GEMMs {gemms:.3g} FLOPs at {hardware.compute_efficiency:g} + causal "
        f"attention forward {attention:.3g} FLOPs (s {step.seq:,}) at {attn_eff:g} "
        f"efficiency) / ({world} GPUs × {hardware.peak_tflops:g} TFLOP/s) (a forward pass)",
    )


#: A forward pass's share of a training step's communication terms: the forward's
#: collectives of forward + backward (tensor parallel 4 of 8 per layer, expert dispatch
#: and combine 2 of 4, pipeline the activation of the activation and the gradient, the KV
#: ring 1 of 3 passes); FSDP's one parameter all-gather per micro-batch and no gradient
#: reduce-scatter (a third, taken per term); the imbalance and the bubble follow the
#: forward's own compute already.
_FORWARD_SHARE = {
    "tensor parallel": 1 / 2,
    "context parallel": 1 / 3,
    "expert all-to-all": 1 / 2,
    "expert all-gather": 1 / 2,
    "pipeline p2p": 1 / 2,
    "data parallel": 1 / 3,
}


def _forward_share(term: StepTerm) -> StepTerm:
    share = _FORWARD_SHARE.get(term.name)
    if share is None:
        return term
    return StepTerm(
        term.name,
        term.seconds * share,
        f"{share:.2g} × ({term.formula}) (a forward pass: its collectives only)",
        term.hidden,
    )


def _recomputed_gemms(step: _TrainingShape) -> tuple[float, list[str]]:
    """The forward GEMM FLOPs selective recomputation runs again in the backward, all
    GPUs together, and what they are: 2 FLOPs per token and weight of each recomputed
    module (megatron-core 0.17.0's recompute_modules, transformer_config.py l.483-495:
    "mlp": the dense MLP, "moe": the MoE layer, router, routed and shared experts,
    "shared_experts", "mla_up_proj": MLA's up projections; moe_layer.py l.599-612 wraps
    the whole MoE forward in one checkpoint, dispatch and combine included)."""
    arch, p, tokens = step.arch, step.arch.parameters, float(step.tokens)
    parts: list[tuple[str, float]] = []
    if step.recomputes("mlp") and arch.dense_layer_count:
        parts.append(("dense MLPs", p.dense_mlp * arch.dense_layer_count))
    if arch.is_moe and step.recomputes("moe"):
        moe = p.router + p.active_routed_experts + p.shared_experts
        parts.append(("MoE layers", moe * arch.moe_layer_count))
    elif arch.is_moe and step.recomputes("shared_experts") and p.shared_experts:
        parts.append(("shared experts", p.shared_experts * arch.moe_layer_count))
    if arch.is_mla and step.recomputes("mla_up_proj"):
        a, nope, rope = arch.num_attention_heads, arch.qk_nope_head_dim, arch.qk_rope_head_dim
        up = arch.kv_lora_rank * a * (nope + arch.v_head_dim)  # kv_b_proj
        if arch.q_lora_rank:
            up += arch.q_lora_rank * a * (nope + rope)  # q_b_proj
        parts.append(("MLA up projections", up * arch.num_layers))
    flops = sum(2 * tokens * weights for _, weights in parts)
    return flops, [f"the {name}' forward GEMMs again" for name, _ in parts]


#: Of the 34·h bytes a layer's element-wise kernels write per token (Korthikanti et al.
#: 2022, arXiv:2205.05198 §4.1): a layer norm's 2h (two of them, 4h) and the MLP
#: activation's 8h (its input, 4h wide in GPT's MLP), the passes selective recomputation's
#: "layernorm" and "moe_act" repeat (output-discarding checkpoints: megatron-core 0.17.0
#: transformer_config.py l.494, "moe_act", "layernorm", and "mla_up_proj" use
#: output-discarding checkpointing). "layernorm" recomputes only a norm that is its own
#: module (transformer_layer.py l.404-461: not an ``IdentityOp``): in Transformer Engine's
#: layer spec a MoE layer's pre-MLP norm and an MLA layer's input norm; the others are
#: fused into the next linear (gpt_layer_specs.py l.305-328, ``linear_qkv=
#: column_parallel_layer_norm_linear()``, ``pre_mlp_layernorm=... if num_experts else
#: IdentityOp``; NVIDIA/Megatron-LM core_v0.17.0).
_ELEMENTWISE_SHARE = {"layernorm": 2, "moe_act": 8}


def _elementwise_term(step: _TrainingShape) -> StepTerm:
    """The memory-bound kernels between the GEMMs (norms, activation functions, dropout,
    residual adds, rotary): each layer writes the 34·s·b·h bytes of activations it keeps
    for the backward (Korthikanti et al. 2022, arXiv:2205.05198 §4.1, eq. 1 without the
    5as/h of a materialised attention matrix, which flash attention never stores) and the
    backward reads them; full recomputation writes them once more, selective recomputation
    of the layer norms (2h a norm, where it is its own module) or the MoE activation (8h,
    every MoE layer) their share (:data:`_ELEMENTWISE_SHARE`). Their time grows with h
    while the GEMMs' grows with h²: why small models reach less of peak."""
    arch, hardware, full = step.arch, step.hardware, step.recompute == "full"
    passes = 1 if step.forward_only else 3 if full else 2
    h, layers = arch.hidden_size, arch.num_layers
    moved = passes * 34 * h * layers * step.tokens
    again = []
    norms = (arch.moe_layer_count if arch.is_moe else 0) + (layers if arch.is_mla else 0)
    if step.recomputes("layernorm") and norms:
        again.append((_ELEMENTWISE_SHARE["layernorm"], norms, "the unfused layer norms"))
    if step.recomputes("moe_act") and arch.is_moe:
        again.append((_ELEMENTWISE_SHARE["moe_act"], arch.moe_layer_count, "the MoE activation"))
    moved += sum(share * h * count * step.tokens for share, count, _ in again)
    hbm = hardware.hbm_tbps * 1e12 * hardware.hbm_efficiency
    recomputed = "".join(
        f" + {share}h × {count} layers ({what} again)" for share, count, what in again
    )
    return StepTerm(
        "element-wise",
        moved / (step.world * hbm),
        (
            "(1 pass (a forward pass writes)"
            if step.forward_only
            else f"({passes} passes (forward writes, backward reads"
            + (", recomputation writes again" if full else "")
            + ")"
        )
        + f" × 34h × {layers} layers{recomputed}) × h {h} × "
        f"{step.tokens:,} tokens × 1 B / ({step.world} GPUs × {hardware.hbm_tbps:g} TB/s × "
        f"{hardware.hbm_efficiency:g})",
    )


def _imbalance_term(
    step: _TrainingShape,
    split: PipelineSplit,
    rank_layers: tuple[tuple[int, int], ...],
    flops: LayerFlops,
    busy: float,
) -> StepTerm:
    """Every micro-batch waits for the slowest pipeline rank: (its FLOPs ÷ the mean rank's
    − 1) × the mean rank's compute and element-wise time (``busy``, the model's FLOPs over
    all GPUs). A rank's FLOPs are its decoder layers' (``rank_layers``, its dense and MoE
    layers, from ``memory_sharding.pipeline_ranks``, each at their own :func:`layer_flops`)
    plus, on rank pp − 1, the
    output layer's; the embedding's lookup counts none (megatron-core's count)."""
    pp = split.pp
    per_rank = [
        flops.of(dense, moe, output=rank == pp - 1) for rank, (dense, moe) in enumerate(rank_layers)
    ]
    mean = sum(per_rank) / pp
    slowest = per_rank.index(max(per_rank))  # the lowest of equals
    excess = per_rank[slowest] / mean - 1 if mean > 0 else 0.0
    return StepTerm(
        "pipeline imbalance",
        excess * busy,
        f"the slowest rank {slowest} of p{pp} ({split.describe(slowest)}, {split.rule}): "
        f"{per_rank[slowest]:.4g} FLOPs / the mean rank's {mean:.4g} ({sum(split.stage_layers)}"
        f" layers + output layer over p{pp}) − 1 = {excess:.3g} × (compute + element-wise) "
        f"{busy:.3g} s, waited for on every micro-batch",
    )


def _bubble_term(
    step: _TrainingShape, virtual_pipeline: int, busy: float, slowest: float
) -> StepTerm:
    """The pipeline bubble: the other ranks' fill and drain. Each micro-batch waits for the
    slowest rank (``slowest``: compute + element-wise + pipeline imbalance, m × its time
    per micro-batch), and 1F1B adds, once, every other rank's time for one micro-batch:
    p × the mean rank's − the slowest's (``busy`` is the mean rank's m micro-batches),
    over vpp with interleaving. Even ranks: (p − 1) / (m × vpp) × busy."""
    pp, micro_batches = step.parallel.pp_size, step.micro_batches
    seconds = max(0.0, (pp * busy - slowest) / (micro_batches * virtual_pipeline))
    return StepTerm(
        "pipeline bubble",
        seconds,
        f"(p{pp} × the mean rank's {busy:.3g} s − the slowest rank's {slowest:.3g} s "
        f"(compute + element-wise + pipeline imbalance)) / ({micro_batches} micro-batches × "
        f"vpp {virtual_pipeline}): the other ranks' fill and drain of 1F1B",
    )


def _tensor_parallel_term(step: _TrainingShape) -> StepTerm | None:
    """Tensor/sequence parallelism: per layer, the attention's all-gather and reduce-scatter
    forward and backward (4), and the MLP's 4 more. An MoE layer's routed experts have
    their own tensor-parallel group, etp (megatron-core 0.17.0 token_dispatcher.py l.72-76:
    ``self.tp_group = pg_collection.expt_tp``): at etp 1 its tokens stay sharded over the
    attention's t, so only a shared expert (a tensor-parallel MLP) adds its 4."""
    tp, hardware, arch = step.parallel.tp_size, step.hardware, step.arch
    if tp <= 1:
        return None
    inside = within_node(tp, step.node)
    members = members_per_node(tp, 1, step.node)
    act, layers_here, micro_batches = step.act, step.layers_here, step.micro_batches
    moe_here = arch.moe_layer_count / step.parallel.pp_size if arch.is_moe else 0.0
    whole = fsdp_keeps_mlp_whole(step.backend, arch.model_type)
    if whole:  # no MLP in the plan: only the attention's collectives, in every layer
        quiet, why = layers_here, f"the reference's FSDP plan leaves {arch.model_type} MLPs whole"
    elif moe_here and step.parallel.etp_size == 1 and not arch.shared_expert_intermediate_size:
        quiet, why = moe_here, "the experts' etp1 has none"
    else:
        quiet, why = 0.0, ""
    collectives = 8 * layers_here - 4 * quiet
    volume = collectives * micro_batches * act * (tp - 1) / tp
    if not quiet:
        count = f"8 all-gathers/reduce-scatters × {layers_here:g} layers"
    elif whole:
        count = f"4 all-gathers/reduce-scatters (the attention's; {why}) × {layers_here:g} layers"
    else:
        count = (
            f"(8 all-gathers/reduce-scatters × {layers_here - quiet:g} dense layers + 4 (the "
            f"attention's; {why}) × {quiet:g} MoE layers)"
        )
    return StepTerm(
        "tensor parallel",
        volume / hardware.link_bytes_per_second(inside, members),
        f"{count} × {micro_batches} micro-batches × {act / 2**20:.1f} MiB × (t{tp} − 1)/t{tp} "
        f"over {hardware.link_name(inside, members)}",
    )


def _context_parallel_term(step: _TrainingShape) -> StepTerm | None:
    """Context parallelism: the KV ring, forward and backward."""
    tp, cp, hardware = step.parallel.tp_size, step.parallel.cp_size, step.hardware
    if cp <= 1:
        return None
    inside = within_node(tp * cp, step.node)
    kv = step.tokens_mb / cp * step.arch.kv_width * 2 * 2  # k and v, bf16
    volume = 3 * step.layers_here * step.micro_batches * kv * (cp - 1)
    return StepTerm(
        "context parallel",
        volume / hardware.link_bytes_per_second(inside),
        f"KV ring: 3 passes (forward, backward k/v and their gradients) × "
        f"{step.layers_here:g} layers × {step.micro_batches} micro-batches × "
        f"{kv / 2**20:.1f} MiB × (c{cp} − 1) over {hardware.link_name(inside)}",
    )


def _expert_term(step: _TrainingShape) -> StepTerm | None:
    """Expert parallelism: dispatch and combine, forward and backward (and once more in
    the backward when selective recomputation recomputes the MoE layer: megatron-core
    0.17.0 moe_layer.py l.599-612 checkpoints its whole forward, dispatch and combine
    included), as the engine's token dispatcher moves the tokens.

    Megatron-Core lays the expert groups out with their own rank generator,
    ``RankGenerator(tp=expert_tensor_parallel_size, ep=expert_model_parallel_size, ...,
    cp=1, order=order)`` (megatron/core/parallel_state.py ``initialize_model_parallel``,
    NVIDIA/Megatron-LM d98e8a64; AReaL passes its etp, areal/engine/megatron_engine.py at
    cbff54d6): in the order tp-cp-ep-dp-pp an expert group's ranks are etp apart, so it
    spans etp × ep GPUs (the attention's cp folds into the experts' ep × edp). Training
    MoE with t > 1 needs sequence parallelism (moe_layer.py raises without it), so each
    GPU dispatches its 1/t of the micro-batch's tokens, gathered over the etp ranks that
    share an expert's weights.

    - alltoall: one copy of a token per selected expert (megatron/core/transformer/moe/
      token_dispatcher.py l.526 ``self.num_out_tokens = routing_map.size(0) *
      self.config.moe_router_topk`` and l.533-535 ``input_splits`` summed per EP rank,
      NVIDIA/Megatron-LM core_v0.17.0): top-k × (e − 1)/e of them leave the GPU, over the
      link the expert group crosses;
    - allgather: every token of the etp × ep group gathered to each GPU and reduce-scattered
      back (the same file l.211 "this allgather spans the communication domain of TP*EP",
      l.274 and l.340);
    - deepep: a token once per destination GPU (``is_token_in_rank``, counted
      ``is_in_rank[j] > 0``) and, across nodes, once per destination node over RDMA
      (``num_tokens_per_rdma_rank``, ``is_in_rdma_rank[...] > 0``), forwarded inside that
      node over NVLink (deepseek-ai/DeepEP csrc/kernels/legacy/layout.cu
      get_dispatch_layout l.80-99, and docs/legacy.md "asymmetric-domain bandwidth
      forwarding, such as forwarding data from NVLink domain to RDMA domain", at
      dd758caf451848bd150e1046af3d0a73e5fff38d). Under balanced routing
      (:func:`expected_groups_reached`) each GPU sends (e − 1)·P(a GPU is reached) copies
      over NVLink and (nodes − 1)·P(a node is reached) over its own network port; the two
      are pipelined, so the slower link sets the time.
    """
    parallel, arch, hardware = step.parallel, step.arch, step.hardware
    ep, pp, etp = parallel.ep_size, parallel.pp_size, parallel.etp_size
    if ep <= 1 or not arch.is_moe:
        return None
    # the expert group lies within a stage: never wider than its world // pp GPUs
    span = min(etp * ep, step.world // pp)
    inside = within_node(span, step.node)
    moe_here = arch.moe_layer_count / pp
    tokens = step.act * etp / parallel.tp_size  # bf16 hidden states one GPU dispatches
    passes = 6 if step.recomputes("moe") else 4
    count = (
        f"{passes} all-to-alls (dispatch, combine; forward, backward"
        + ("; the MoE layer's recomputation" if passes == 6 else "")
        + f") × {moe_here:g} MoE layers × {step.micro_batches} micro-batches"
    )
    top_k, experts = arch.experts_per_token, arch.num_experts
    if step.token_dispatcher == "allgather":
        share = step.act / parallel.tp_size
        volume = passes * moe_here * step.micro_batches * share * (span - 1)
        members = members_per_node(span, 1, step.node)
        return StepTerm(
            "expert all-gather",
            volume / hardware.link_bytes_per_second(inside, members),
            f"{count} × {share / 2**20:.1f} MiB (/ t{parallel.tp_size}) × (etp{etp} × "
            f"e{ep} − 1) gathered/reduce-scattered over {hardware.link_name(inside, members)}"
            f" (the allgather dispatcher: every token of the group)",
        )
    if step.token_dispatcher == "deepep":
        per_node = members_per_node(ep, etp, step.node) if not inside else ep
        nodes = math.ceil(ep / per_node)
        sizes = [experts // ep * min(per_node, ep - n * per_node) for n in range(nodes)]
        gpus = (ep - 1) * expected_groups_reached(experts, top_k, (experts // ep,))
        # the sender's own node holds its share of the ranks: the other nodes it reaches
        remote = (
            sum(
                (1 - size / experts) * expected_groups_reached(experts, top_k, (size,))
                for size in sizes
            )
            if nodes > 1
            else 0.0
        )
        unit = passes * moe_here * step.micro_batches * tokens
        nvlink = unit * gpus / hardware.link_bytes_per_second(True)
        network = unit * remote / hardware.link_bytes_per_second(False) if remote else 0.0
        formula = (
            f"{count} × {tokens / 2**20:.1f} MiB (× etp{etp} / t{parallel.tp_size}) × "
            f"(the GPUs a token reaches but its own: (e{ep} − 1) × "
            f"{gpus / (ep - 1):.3g} = {gpus:.3g} of top-{top_k} over "
            f"{hardware.link_name(True)} = {nvlink:.3g} s"
        )
        if nodes > 1:
            formula += (
                f"; the other nodes: {remote:.3g} of {nodes} over "
                f"{hardware.link_name(False)} = {network:.3g} s"
            )
        formula += ") (DeepEP: once per GPU and node reached, under balanced routing" + (
            "; NVLink and RDMA pipelined: the slower sets the time)" if nodes > 1 else ")"
        )
        return StepTerm("expert all-to-all", max(nvlink, network), formula)
    volume = passes * moe_here * step.micro_batches * tokens * top_k * (ep - 1) / ep
    return StepTerm(
        "expert all-to-all",
        volume / hardware.link_bytes_per_second(inside),
        f"{count} × {tokens / 2**20:.1f} MiB (× etp{etp} / t{parallel.tp_size}) × "
        f"top-{top_k} × (e{ep} − 1)/e{ep} over {hardware.link_name(inside)} "
        f"(etp{etp} × e{ep} GPUs)",
    )


def expected_groups_reached(experts: int, top_k: int, group_sizes: tuple[int, ...]) -> float:
    """The expected number of the groups (of ``group_sizes`` experts each, distinct experts
    among the ``experts``) that a token's ``top_k`` distinct experts reach, under balanced
    routing: the top-k uniformly among all k-subsets, the balance the auxiliary loss and
    forced balancing aim at (an assumption: real routing is less even). By linearity, a
    group of g experts is missed with probability C(E − g, k) / C(E, k); for R equal
    groups of E/R: R·(1 − C(E − E/R, k)/C(E, k))."""
    if not 1 <= top_k <= experts or any(g < 0 for g in group_sizes) or sum(group_sizes) > experts:
        raise AllocationValidationError(
            f"top-{top_k} of {experts} experts in groups {list(group_sizes)}: need 1 ≤ k ≤ E "
            f"and groups of ≥ 0 experts totalling ≤ E (sum {sum(group_sizes)})"
        )
    return sum(1 - _missed(experts, g, top_k) for g in group_sizes)


def _missed(experts: int, group: int, top_k: int) -> float:
    """C(E − g, k) / C(E, k), through log-gamma: exact binomials of a million experts take
    seconds, the ratio's logarithm microseconds."""
    if experts - group < top_k:
        return 0.0
    return math.exp(
        math.lgamma(experts - group + 1)
        - math.lgamma(experts - group - top_k + 1)
        - math.lgamma(experts + 1)
        + math.lgamma(experts - top_k + 1)
    )


def _pipeline_p2p_term(step: _TrainingShape) -> StepTerm | None:
    """Pipeline parallelism: an activation and a gradient sent per micro-batch."""
    tp, pp, hardware = step.parallel.tp_size, step.parallel.pp_size, step.hardware
    if pp <= 1:
        return None
    inside = within_node(step.world // pp, step.node) and step.world // pp < step.node
    volume = 2 * step.micro_batches * step.act / tp
    return StepTerm(
        "pipeline p2p",
        volume / hardware.link_bytes_per_second(inside),
        f"2 sends (activation, gradient) × {step.micro_batches} micro-batches × "
        f"{step.act / tp / 2**20:.1f} MiB over {hardware.link_name(inside)}",
    )


def _weight_reads_term(step: _TrainingShape, compute: float) -> StepTerm | None:
    """The GEMMs' weight reads beyond their compute: a GEMM reads its whole weight from
    HBM whatever the tokens it multiplies, so each pass of each micro-batch reads the
    weights one GPU holds (:func:`_params_here`, bf16; of the routed experts those the
    micro-batch's tokens reach, at most one a token and choice): the forward, the
    backward's input gradient, a full recomputation's forward again. Past the point where
    that takes longer than the compute (a few tokens a GPU: a context-parallel share or a
    micro-batch too small), the GEMMs are memory-bound and the step takes the reads (the
    roofline: time = max(FLOPs / peak, bytes / bandwidth)); None below it."""
    arch, hardware, parallel = step.arch, step.hardware, step.parallel
    passes = 1 if step.forward_only else 3 if step.recompute == "full" else 2
    params = _params_here(step)
    p = arch.parameters
    if arch.is_moe and not fsdp_keeps_mlp_whole(step.backend, arch.model_type):
        experts = p.expert_sharded / (parallel.pp_size * parallel.ep_size * parallel.etp_size)
        reached = min(
            1.0,
            step.tokens_mb / parallel.cp_size * arch.experts_per_token / max(1, arch.num_experts),
        )
        params -= experts * (1 - reached)
    hbm = hardware.hbm_tbps * 1e12 * hardware.hbm_efficiency
    reads = step.micro_batches * passes * params * 2 / hbm
    if reads <= compute:
        return None
    return StepTerm(
        "weight reads (beyond the GEMMs)",
        reads - compute,
        f"{step.micro_batches:,} micro-batches × {passes} passes × {params / 1e9:.3g}B params "
        f"on a GPU × 2 B / ({hardware.hbm_tbps:g} TB/s × {hardware.hbm_efficiency:g}) = "
        f"{reads:.3g} s, over the GEMMs' {compute:.3g} s: {step.tokens_mb // parallel.cp_size:,} "
        f"tokens a micro-batch on a GPU keep the GEMMs memory-bound",
    )


def _params_here(step: _TrainingShape) -> float:
    """Parameters one GPU holds: tensor- and pipeline-sharded, experts over e·etp (FSDP:
    the MLPs it keeps whole, ``fsdp_keeps_mlp_whole``, over p only)."""
    p, parallel, arch = step.arch.parameters, step.parallel, step.arch
    tp, pp = parallel.tp_size, parallel.pp_size
    if fsdp_keeps_mlp_whole(step.backend, arch.model_type):
        moe = p.shared_experts + p.routed_experts + p.router
        mlps = p.dense_mlp * p.dense_layers + moe * p.moe_layers
        return (p.total - mlps) / (tp * pp) + mlps / pp
    if not step.arch.is_moe:
        return p.total / (tp * pp)
    return (p.total - p.expert_sharded) / (tp * pp) + p.expert_sharded / (
        pp * parallel.ep_size * parallel.etp_size
    )


def _data_parallel_term(step: _TrainingShape, busy: float) -> StepTerm | None:
    """The data-parallel gradient reduce-scatter and parameter all-gather (FSDP: parameter
    all-gathers forward and backward for every micro-batch, overlapped with ``busy``)."""
    parallel, hardware = step.parallel, step.hardware
    shards = parallel.dp_size * parallel.cp_size
    if shards <= 1:
        return None
    inside = within_node(step.world // parallel.pp_size, step.node)
    members = members_per_node(shards, parallel.tp_size, step.node)  # ranks t apart
    link = hardware.link_bytes_per_second(inside, members)
    params_here = _params_here(step)
    if training_model(step.backend).sharding in ("megatron", "archon"):
        volume = (4 + 2) * params_here * (shards - 1) / shards
        formula = (
            f"(gradient reduce-scatter × 4 B + parameter all-gather × 2 B) × "
            f"{params_here / 1e9:.3g}B params × (dp·cp {shards} − 1)/{shards} over "
            f"{hardware.link_name(inside, members)}"
        )
        return StepTerm("data parallel", volume / link, formula)
    # FSDP2 (torch.distributed.fsdp fully_shard): the next layer's all-gather is issued
    # before the current layer computes (implicit forward/backward prefetch), so only
    # the first layer's gather and the last layer's reduce-scatter wait; the rest hides
    # under compute unless the collectives take longer than it (PyTorch's FSDP2
    # tutorial, pytorch/tutorials intermediate_source/FSDP_tutorial.rst: "Implicit
    # Prefetching: CPU thread issues all-gather i before layer i. All-gathers are
    # queued into its own cuda stream while layer i computation happens").
    micro_batches, layers_here = step.micro_batches, step.layers_here
    volume = (2 * micro_batches * 2 + 4) * params_here * (shards - 1) / shards
    exposed = (2 + 4) * params_here / layers_here * (shards - 1) / shards / link
    total = volume / link
    return StepTerm(
        "data parallel",
        exposed + max(0.0, total - exposed - busy),
        f"exposed: one layer's gather (2 B) and reduce-scatter (4 B) × "
        f"{params_here / layers_here / 1e6:.3g}M params × (dp·cp {shards} − 1)/{shards}"
        f" = {exposed:.3g} s, + max(0, all (2 parameter all-gathers × "
        f"{micro_batches} micro-batches × 2 B + gradient reduce-scatter × 4 B) × "
        f"{params_here / 1e9:.3g}B params = {total:.3g} s − exposed − compute "
        f"{busy:.3g} s) over {hardware.link_name(inside, members)}",
    )


def _training_assumptions(
    backend: str, hardware: Hardware, attention_kernel: str, attn_eff: float
) -> tuple[str, ...]:
    """What a training step's estimate assumes, in the order it is printed."""
    assumptions = [
        f"{hardware.compute_efficiency:.3g} of peak compute and {hardware.comm_efficiency:.3g} of "
        f"link bandwidth are reached (--compute-efficiency, --comm-efficiency)",
        "FSDP's parameter all-gathers and gradient reduce-scatters overlap compute (FSDP2 "
        "prefetches the next layer's gather): the first gather and the last reduce-scatter "
        "are exposed; other communication does not overlap compute (its terms add)"
        if training_model(backend).sharding == "fsdp"
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
    if hardware.calibration:
        assumptions.append(f"calibrated: {hardware.calibration}")
    return tuple(assumptions)
