"""Per-GPU memory of one engine: an estimate whose every term shows its inputs.

Training (``fsdp``, ``megatron``, ``archon``), for the most-loaded GPU:

- weights, gradients and optimizer states, sharded the way the reference's
  engines shard them (see :func:`training_memory`);
- activations from Korthikanti et al. 2022, "Reducing Activation Recomputation
  in Large Transformer Models" (arXiv:2205.05198), Table 2, generalised from
  GPT's MLP to grouped-query attention, SwiGLU and mixture-of-experts layers;
- the logits of the whole vocabulary on the last pipeline stage, as the loss holds them
  (:data:`LOGITS`);
- a reserve for the CUDA context, NCCL buffers and fragmentation (a stated
  number the user can override).

Inference (``sglang``, ``vllm``), per GPU of one instance: the weights over t·p,
the KV bytes per token, and how many tokens (and full-length sequences) the KV
cache holds: ``(fraction × GPU memory − weights − reserve) / bytes per token``.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from areal_alloc.architecture import Architecture, ParameterCount
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.execution import (
    GIB,
    LORA_TARGETS,
    InferenceSettings,
    TrainingSettings,
)
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "DTYPE_BYTES",
    "NON_TORCH_BYTES",
    "PHASES",
    "VLLM_SAMPLER_BYTES",
    "KVCache",
    "MemoryEstimate",
    "Phase",
    "Term",
    "activation_bytes_per_token",
    "inference_memory",
    "kv_bytes_per_token",
    "lora_parameters",
    "non_torch_bytes",
    "op_sac_bytes_per_token",
    "readable_bytes",
    "training_memory",
    "vllm_default_batched_tokens",
    "vllm_profile_activation",
]

#: Bytes per element of the dtypes the reference's configs name.
DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def dtype_bytes(name: str, key: str) -> int:
    value = DTYPE_BYTES.get(str(name).lower())
    if value is None:
        raise AllocationValidationError(
            f"{key}={name!r}: unknown dtype; known: {', '.join(sorted(DTYPE_BYTES))}"
        )
    return value


def readable_bytes(n: float) -> str:
    """``12.3 GiB``; ``512.0 MiB`` under a GiB."""
    if abs(n) >= GIB:
        return f"{n / GIB:.1f} GiB"
    return f"{n / (1 << 20):.1f} MiB"


def _b(n: float) -> str:
    """A parameter or element count, short: 7.62e9 → 7.62B."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.3g}"


@dataclass(frozen=True, slots=True)
class Term:
    """One part of the estimate: its bytes and the formula with its inputs."""

    name: str
    bytes: int
    formula: str


@dataclass(frozen=True, slots=True)
class KVCache:
    """What an inference instance's KV cache holds, per GPU."""

    bytes_per_token: int
    formula: str
    tokens: int | None  # None: the GPU's memory is not known
    sequence_length: int
    concurrency: int | None  # sequences the run keeps in flight per instance

    @property
    def sequences(self) -> int | None:
        return None if self.tokens is None else self.tokens // self.sequence_length

    def to_dict(self) -> dict[str, object]:
        return {
            "bytes_per_token": self.bytes_per_token,
            "formula": self.formula,
            "tokens": self.tokens,
            "sequence_length": self.sequence_length,
            "sequences": self.sequences,
            "concurrency": self.concurrency,
        }


#: The phases an engine goes through, in the order a run meets them; an engine's
#: memory is its peak over its own (:meth:`MemoryEstimate.with_phases`). The
#: reference's trainer (areal/trainer/rl_trainer.py, areal-project/AReaL@cbff54d645d2
#: cd8ee1f1c358a82f3f473588433d) loads every training engine (``initialize``, lines
#: 311-327) before any inference server starts (``_init_rollout``, line 358); a step
#: (lines 686-856) generates, then runs the critic's values and the ref's and
#: teacher's log-probabilities (forward passes), the actor's ``compute_logp`` when
#: ``should_compute_prox_logp()`` (``recompute_logprob``), then ``ppo_update``, whose
#: ``train_batch`` runs forward and backward per micro-batch and then
#: ``optimizer_step`` (areal/engine/fsdp_engine.py lines 774-812).
#:
#: - ``load``: the weights being loaded (FSDP without ``memory_efficient_load``: the
#:   whole model on every GPU before sharding; Megatron's gradient buffers and
#:   optimizer are built with the model);
#: - ``generation``: an inference server's weights, KV cache and activation peak;
#: - ``forward``: a forward pass without gradients (ref, teacher, the critic's
#:   values, the actor's log-prob recomputation): one layer's activations and the
#:   bfloat16 logits, beside what the engine keeps between its phases;
#: - ``backward``: every activation of the micro-batch, the logits as the loss holds
#:   them and the gradients;
#: - ``optimizer_step``: states, gradients and master weights, the activations freed
#:   (FSDP's AdamW is torch's fused one, no per-tensor temporaries:
#:   areal/engine/fsdp_engine.py lines 1195-1202, ``fused=True`` but for a vision
#:   model at t > 1).
PHASES = ("load", "generation", "forward", "backward", "optimizer_step")


@dataclass(frozen=True, slots=True)
class Phase:
    """One phase of an engine (:data:`PHASES`) and the terms on its GPU meanwhile."""

    name: str
    terms: tuple[Term, ...]


@dataclass(frozen=True, slots=True)
class MemoryEstimate:
    """One engine's memory per GPU, term by term: the terms of its peak phase."""

    key: str
    backend: str
    terms: tuple[Term, ...]
    capacity: int | None  # bytes per GPU; None when no GPU is named
    assumptions: tuple[str, ...] = ()
    kv_cache: KVCache | None = None
    #: an inference engine claims this share of the GPU up front
    claimed_fraction: float | None = None
    #: bytes a training engine keeps on its GPUs between its own phases (weights,
    #: gradients, optimizer states): what a colocated engine finds there
    resident: int = 0
    #: bytes it holds right after loading, before its first step (FSDP: the sharded
    #: weights; gradients and AdamW states appear at the first step)
    at_load: int = 0
    #: the phase whose terms are ``terms`` (the peak), and every phase it goes through
    phase: str = ""
    phases: tuple[Phase, ...] = ()

    def _bytes(self, terms: tuple[Term, ...]) -> int:
        if (
            self.claimed_fraction is not None
            and self.capacity is not None
            and any(t.name == "kv_cache" for t in terms)
        ):
            # what the server claims, and what a colocated engine keeps beside it; when
            # the weights and reserve alone overflow the claim, they are the total (a
            # 6e27 GiB weight term is never left out of "total 72.0 GiB of 80.0 GiB")
            claim = int(self.claimed_fraction * self.capacity)
            needed = sum(t.bytes for t in terms if t.name not in ("kv_cache", "colocated"))
            return max(claim, needed) + sum(t.bytes for t in terms if t.name == "colocated")
        return sum(t.bytes for t in terms)

    @property
    def total(self) -> int:
        return self._bytes(self.terms)

    @property
    def phase_bytes(self) -> dict[str, int]:
        """Each phase's bytes per GPU, in the order of :data:`PHASES`."""
        if not self.phases:
            return {self.phase: self.total} if self.phase else {}
        return {p.name: self._bytes(p.terms) for p in self.phases}

    def with_phases(self, phases: tuple[Phase, ...]) -> MemoryEstimate:
        """This estimate over ``phases``: its terms those of the peak phase (a tie goes
        to the later phase, the one the run keeps repeating)."""
        sizes = [self._bytes(p.terms) for p in phases]
        peak = max(range(len(phases)), key=lambda i: (sizes[i], i))
        chosen = phases[peak]
        kept = tuple(a for a in self.assumptions if " peaks while loading" not in a)
        if chosen.name == "load" and any(t.name == "load" for t in chosen.terms):
            then = max(
                ((sizes[i], phases[i].name) for i in range(len(phases)) if i != peak),
                default=None,
            )
            kept += (
                f"{self.key} peaks while loading: the whole model on every GPU before "
                f"sharding ({self.key}.fsdp.memory_efficient_load=false)"
                + (f"; its {then[1]} then needs {readable_bytes(then[0])} per GPU" if then else ""),
            )
        return replace(self, terms=chosen.terms, phase=chosen.name, phases=phases, assumptions=kept)

    def term(self, name: str) -> int:
        return sum(t.bytes for t in self.terms if t.name == name)

    @property
    def largest(self) -> Term:
        return max(self.terms, key=lambda t: t.bytes)

    @property
    def headroom(self) -> int | None:
        return None if self.capacity is None else self.capacity - self.total

    @property
    def fits(self) -> bool | None:
        if self.capacity is None:
            return None
        if self.kv_cache is not None:
            holds = (self.kv_cache.tokens or 0) >= self.kv_cache.sequence_length
            return holds and self.total <= self.capacity
        return self.total <= self.capacity

    def with_term(self, term: Term) -> MemoryEstimate:
        """``term`` beside every phase but loading (what a colocated engine keeps)."""
        if not self.phases:
            return replace(self, terms=(*self.terms, term))
        return self.with_phases(
            tuple(p if p.name == "load" else Phase(p.name, (*p.terms, term)) for p in self.phases)
        )

    def to_dict(self) -> dict[str, object]:
        names = ("weights", "gradients", "optimizer", "activations", "logits", "reserve")
        out: dict[str, object] = {name: self.term(name) for name in names}
        for extra in ("colocated", "load"):
            if self.term(extra):
                out[extra] = self.term(extra)
        if self.kv_cache is not None:
            out["kv_cache"] = self.term("kv_cache")
        out["total"] = self.total
        out["phase"] = self.phase
        out["phases"] = self.phase_bytes
        out["capacity"] = self.capacity
        out["headroom"] = self.headroom
        out["fits"] = self.fits
        out["terms"] = [
            {"name": t.name, "bytes": t.bytes, "formula": t.formula} for t in self.terms
        ]
        out["assumptions"] = list(self.assumptions)
        return out


# --- activations --------------------------------------------------------------------------


@functools.lru_cache(maxsize=1024)
def activation_bytes_per_token(
    arch: Architecture,
    *,
    moe: bool,
    tp: int,
    sequence_parallel: bool,
    recompute: str,
    flash_attention: bool,
    dropout: bool,
    sequence_length: int,
) -> tuple[float, str]:
    """Bytes one token leaves stored in one layer, per GPU, and how they were counted.

    Korthikanti et al. 2022, section 4 and Table 2, counts per token of one layer
    (2 bytes an element, 1 byte a dropout mask): attention 11h + 5as (the a·s²
    scores), MLP 19h, two layer norms 4h: 34h + 5as in all. Under tensor
    parallelism without sequence parallelism 10h of it (norm inputs, the
    attention and MLP inputs, the dropout masks) stays on every GPU and the rest
    is split by t; with sequence parallelism all of it is split by t. Selective
    recomputation (and FlashAttention, which never stores the scores) drops the
    5as term; full recomputation keeps only each layer's 2h input.

    Generalised here: q, k and v widths from the attention heads (GQA: the kv
    heads; MLA: its head dims), SwiGLU's gate and up outputs (4f) and their
    product (2f) instead of GeLU's 2f + 2f, and an MoE layer's top-k routed
    experts (each token's copy 2h and 6f each) plus shared experts and the
    float32 router logits.
    """
    h = arch.hidden_size
    mask = 1 if dropout else 0
    if arch.is_mla:
        a = arch.num_attention_heads
        q = k = a * (arch.qk_nope_head_dim + arch.qk_rope_head_dim)
        v = proj = a * arch.v_head_dim
    else:
        q = proj = arch.query_width
        k = v = arch.kv_width
    replicated = 4 * h + 2 * h + 2 * h + 2 * mask * h  # norm inputs, attn & MLP inputs, masks
    split = 2 * (q + k + v + proj)
    # SwiGLU keeps gate and up (4f) and their product (2f); GeLU its input and output (4f)
    per_f = 6 if arch.gated_mlp else 4
    kind = "SwiGLU" if arch.gated_mlp else "GeLU"
    if moe:
        k_experts = arch.experts_per_token
        split += k_experts * (2 * h + per_f * arch.moe_intermediate_size)
        split += per_f * arch.shared_expert_intermediate_size + 4 * arch.num_experts
        mlp = (
            f"MoE {k_experts}×(2h + {per_f}·{arch.moe_intermediate_size})"
            + (
                f" + {per_f}·{arch.shared_expert_intermediate_size}"
                if arch.shared_expert_intermediate_size
                else ""
            )
            + f" + 4·{arch.num_experts} router"
        )
    else:
        split += per_f * arch.intermediate_size
        mlp = f"{kind} {per_f}·{arch.intermediate_size}"
    scores = 0
    if recompute == "none" and not flash_attention:
        scores = (5 if dropout else 2) * arch.num_attention_heads * sequence_length
    if recompute == "full":
        return 2 * h / (tp if sequence_parallel else 1), f"2h = {2 * h} (full recomputation)"
    if recompute == "op":
        return op_sac_bytes_per_token(arch, moe=moe, tp=tp, sequence_parallel=sequence_parallel)
    if sequence_parallel or tp == 1:
        per_token = (replicated + split + scores) / tp
        how = (
            f"({replicated} + {split} + {scores})/t{tp}"
            if tp > 1
            else f"{replicated + split + scores}"
        )
    else:
        per_token = replicated + (split + scores) / tp
        how = f"{replicated} + ({split} + {scores})/t{tp}"
    text = f"2·(q{q} + k{k} + v{v} + o{proj}) + {mlp} + norms/inputs {replicated}: {how}"
    return per_token, text


def op_sac_bytes_per_token(
    arch: Architecture, *, moe: bool, tp: int, sequence_parallel: bool
) -> tuple[float, str]:
    """Bytes one token leaves stored in one layer under per-op selective checkpointing.

    torchtitan's policy (torchtitan/parallelisms/parallelize_llama.py ``_save_list`` and
    ``_custom_policy``, pytorch/torchtitan@9dec370ad26b5f8e9a7333a0e36165018262644b; the
    archon engine's copy in areal/experimental/models/archon/activation_checkpoint.py,
    areal-project/AReaL@cbff54d645d2cd8ee1f1c358a82f3f473588433d, its default
    ``ac_mode: selective``, ``selective_ac_option: op``): each block keeps its input and
    the outputs of the ops in the save list (``aten.mm`` but every second one counted per
    block, flash/efficient attention, ``reduce_scatter``) and recomputes the rest (norms,
    rotary, SiLU, products). A block's mms in order: wq, wk, wv, wo, then w1, w3, w2
    (SwiGLU, torchtitan/models/llama/model.py ``w2(F.silu(w1(x)) * w3(x))``) or w1, w2; the
    1st, 3rd, 5th and 7th are kept. Attention keeps its output (q width) and its float32
    log-sum-exp per head. A column-parallel output is split by t; a row-parallel one (wo,
    w2) is a full-width partial sum on every rank, its reduce-scatter output h/t kept
    besides under sequence parallelism. An MoE block's routed experts run grouped mms,
    not in the list: only its router and shared experts' mms count.
    """
    h = arch.hidden_size
    if arch.is_mla:
        a = arch.num_attention_heads
        q = a * (arch.qk_nope_head_dim + arch.qk_rope_head_dim)
        kv = a * arch.v_head_dim
        out = a * arch.v_head_dim
    else:
        q, kv, out = arch.query_width, arch.kv_width, arch.query_width
    if moe:
        f = arch.shared_expert_intermediate_size
        mlp: list[tuple[str, int, bool]] = [("router", arch.num_experts, False)]
    else:
        f = arch.intermediate_size
        mlp = []
    if f:
        mlp += [("w1", f, True)] + ([("w3", f, True)] if arch.gated_mlp else [])
        mlp += [("w2", h, False)]
    # (name, width, column-parallel)
    mms = [("wq", q, True), ("wk", kv, True), ("wv", kv, True), ("wo", h, False), *mlp]
    kept = mms[0::2]
    elements = float(h / tp if sequence_parallel else h)  # the block's input
    for _, width, column in kept:
        elements += width / tp if column else width
    if sequence_parallel and tp > 1:  # the two reduce-scatter outputs
        elements += 2 * h / tp
    elements += out / tp  # attention output
    per_token = 2 * elements + 4 * arch.num_attention_heads / tp  # bf16; float32 lse
    names = "+".join(name for name, _, _ in kept)
    return per_token, (
        f"per-op SAC: input, kept mms {names}, attention output and log-sum-exp: {per_token:,.0f} B"
    )


# --- LoRA ---------------------------------------------------------------------------------

_MEGATRON_NAMES = {
    "q_proj": "linear_qkv",
    "k_proj": "linear_qkv",
    "v_proj": "linear_qkv",
    "o_proj": "linear_proj",
    "gate_proj": "linear_fc1",
    "up_proj": "linear_fc1",
    "down_proj": "linear_fc2",
}
_HF_NAMES = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc2": ("down_proj",),
}


@functools.lru_cache(maxsize=256)
def lora_parameters(
    arch: Architecture, megatron: bool, rank: int, targets: tuple[str, ...] = ()
) -> tuple[int, int, int, str]:
    """Adapter parameters of one dense layer, one MoE layer's non-expert part, and its experts.

    A linear layer of ``in`` inputs and ``out`` outputs gets ``r·(in + out)``
    adapter parameters (A: in → r, B: r → out). peft adapts q, k and v one by
    one; megatron-bridge adapts the fused qkv and gate-up projections (one A
    each). Routed experts are adapted one by one; peft's all-linear also adapts
    the router (``gate``), megatron-bridge's does not.
    """
    h, r = arch.hidden_size, rank
    everything = not targets or "all-linear" in targets
    wanted: set[str] = set()
    for name in targets:
        if megatron:
            wanted.add(_MEGATRON_NAMES.get(name, name))
        else:
            wanted.update(_HF_NAMES.get(name, (name,)))
    if everything:
        wanted = set(_HF_NAMES) if megatron else {n for v in _HF_NAMES.values() for n in v}
        if not megatron:
            wanted.add("gate")

    def linear(name: str, fan_in: int, fan_out: int) -> int:
        return r * (fan_in + fan_out) if name in wanted else 0

    if arch.is_mla:  # q (or q_a, q_b), kv_a, kv_b and o, counted as q, k, v and o
        qn, kn, vn, on = (
            ("linear_qkv",) * 3 + ("linear_proj",)
            if megatron
            else ("q_proj", "k_proj", "v_proj", "o_proj")
        )
        a = arch.num_attention_heads
        qk = arch.qk_nope_head_dim + arch.qk_rope_head_dim
        if arch.q_lora_rank:
            query = linear(qn, h, arch.q_lora_rank) + linear(qn, arch.q_lora_rank, a * qk)
        else:
            query = linear(qn, h, a * qk)
        attention = (
            query
            + linear(kn, h, arch.kv_lora_rank + arch.qk_rope_head_dim)
            + linear(vn, arch.kv_lora_rank, a * (arch.qk_nope_head_dim + arch.v_head_dim))
            + linear(on, a * arch.v_head_dim, h)
        )
    elif megatron:
        q, kv = arch.query_width, arch.kv_width
        attention = linear("linear_qkv", h, q + 2 * kv) + linear("linear_proj", q, h)
    else:
        q, kv = arch.query_width, arch.kv_width
        attention = (
            linear("q_proj", h, q)
            + linear("k_proj", h, kv)
            + linear("v_proj", h, kv)
            + linear("o_proj", q, h)
        )

    def mlp(f: int) -> int:
        if not f:
            return 0
        if megatron:
            width = 2 * f if arch.gated_mlp else f
            return linear("linear_fc1", h, width) + linear("linear_fc2", f, h)
        gate = linear("gate_proj", h, f) if arch.gated_mlp else 0
        return gate + linear("up_proj", h, f) + linear("down_proj", f, h)

    dense = attention + mlp(arch.intermediate_size)
    moe = attention + mlp(arch.shared_expert_intermediate_size)
    if arch.is_moe and not megatron:
        moe += linear("gate", h, arch.num_experts)
    experts = mlp(arch.moe_intermediate_size) * arch.num_experts if arch.is_moe else 0
    names = sorted(n for n in wanted & set(LORA_TARGETS) if n != "gate" or arch.is_moe)
    text = f"r{r} × (in + out) of {', '.join(names) or 'no layer'}"
    return dense, moe, experts, text


# --- training -----------------------------------------------------------------------------


def _stage_params(p: ParameterCount, pp: int, first: bool) -> tuple[float, float, float, str]:
    """(tensor-sharded, replicated, expert) parameters of the first or last pipeline stage."""
    layers_tp = (p.attention + p.dense_mlp) * p.dense_layers + (
        p.attention + p.shared_experts
    ) * p.moe_layers
    layers_rep = p.norms * (p.dense_layers + p.moe_layers) + p.router * p.moe_layers
    experts = p.routed_experts * p.moe_layers
    tp_part, rep, exp = layers_tp / pp, layers_rep / pp, experts / pp
    if pp == 1:
        tp_part += p.embedding + p.output
        rep += p.final_norm
        where = "all layers, embedding" + (", output layer" if p.output else " (tied output)")
    elif first:
        tp_part += p.embedding
        where = f"1/{pp} of the layers + embedding (first stage)"
    else:
        tp_part += p.output or p.embedding  # a tied output keeps a copy on the last stage
        rep += p.final_norm
        where = f"1/{pp} of the layers + output layer (last stage)"
    return tp_part, rep, exp, where


def training_memory(
    key: str,
    backend: str,
    arch: Architecture,
    parallel: ParallelStrategy,
    settings: TrainingSettings,
    capacity: int | None,
) -> MemoryEstimate:
    """The most-loaded GPU of a training engine.

    Megatron (areal/engine/megatron_engine.py with megatron-core's
    distributed optimizer): weights in ``dtype``, float32 main gradients
    (``main_grads_dtype``), and over dp the float32 main parameters and the two
    Adam states (bfloat16 states with the precision-aware optimizer; SGD keeps
    one momentum buffer, megatron-core's ``sgd_momentum`` = 0.9). Tensor-parallel
    blocks are split by t, routed experts by etp·ep and their optimizer states
    by expert-dp = world/(etp·ep·p). The same counting as megatron-core's
    ``6 + 12/dp`` bytes per parameter (megatron/training/theoretical_memory_usage.py).

    FSDP and archon: see :func:`_sharded_terms`.

    A critic (``is_critic``) ends in a value head of one output instead of the
    vocabulary: FSDP builds ``AutoModelForTokenClassification(num_labels=1)``
    (areal/engine/fsdp_engine.py _create_llm_actor_or_critic, reference commit
    cbff54d6), Megatron a one-output value head (areal/engine/megatron_engine.py,
    ``is_critic``): its output layer is h parameters and it has no vocabulary logits.

    LoRA (``use_lora``): the base model is frozen (stored as without LoRA: FSDP in
    ``optimizer_dtype``, the adapters beside it, areal/engine/fsdp_engine.py
    _apply_peft_wrapper with ``autocast_adapter_dtype=False``; Megatron in ``dtype``),
    and only the adapters (:func:`lora_parameters`) have gradients and optimizer states.
    """
    p = arch.parameters
    if settings.critic:
        p = replace(p, output=arch.hidden_size)
    tp, pp, dp, cp = parallel.tp_size, parallel.pp_size, parallel.dp_size, parallel.cp_size
    ep, etp = parallel.ep_size, parallel.etp_size
    world = parallel.world_size
    compute = dtype_bytes(settings.dtype, f"{key}.dtype")
    assumptions: list[str] = []
    megatron_like = backend == "megatron"
    if backend == "archon" and settings.optimizer == "adam_bf16":
        raise AllocationValidationError(
            f"{key}.optimizer.type='adam_bf16': the archon engine takes adam or sgd "
            f"(areal/experimental/engine/archon_utils.py create_optimizer)"
        )
    sp = settings.sequence_parallel if settings.sequence_parallel is not None else tp > 1
    tokens = math.ceil(settings.tokens_per_micro_batch / cp)

    # in flight on the first stage: 1F1B holds up to p micro-batches
    in_flight = float(pp if settings.micro_batches is None else min(pp, settings.micro_batches))
    interleave = 1.0
    if pp > 1 and settings.virtual_pipeline > 1:
        interleave = 1 + (pp - 1) / (pp * settings.virtual_pipeline)
    per_token = {
        moe: activation_bytes_per_token(
            arch,
            moe=moe,
            tp=tp,
            sequence_parallel=sp,
            recompute=settings.recompute,
            flash_attention=settings.flash_attention,
            dropout=settings.dropout,
            sequence_length=tokens,
        )
        for moe in (False, True)
    }
    dense_l, moe_l = p.dense_layers / pp, p.moe_layers / pp
    layer_bytes = dense_l * per_token[False][0] + moe_l * per_token[True][0]
    forward_only = settings.optimizer is None
    lora: _Adapters | None = None
    if settings.lora_rank is not None and backend == "archon":
        # the archon engine reads no LoRA setting (areal/experimental/engine/, reference
        # commit cbff54d6: only fsdp_engine.py and megatron_engine.py apply use_lora)
        assumptions.append(f"{key}: the archon engine ignores use_lora; every parameter trains")
    elif settings.lora_rank is not None and not forward_only:
        dense_a, moe_a, exp_a, lora_text = lora_parameters(
            arch, megatron_like, settings.lora_rank, settings.lora_targets
        )
        lora = _Adapters(
            (dense_a * p.dense_layers + moe_a * p.moe_layers) / pp,
            exp_a * p.moe_layers / pp,
            lora_text,
        )
        assumptions.append(
            f"LoRA rank {settings.lora_rank}: the base model is frozen; "
            f"{_b(dense_a * p.dense_layers + (moe_a + exp_a) * p.moe_layers)} adapter "
            f"parameters train ({lora_text})"
        )
    stages = []
    for first in (True, False) if pp > 1 else (True,):
        tp_part, rep, exp, where = _stage_params(p, pp, first)
        if backend != "fsdp":  # megatron and archon split experts over etp·ep
            on_gpu = tp_part / tp + rep + exp / (etp * ep)
            shard_text = (
                f"({_b(tp_part)}/t{tp} + {_b(rep)} replicated"
                + (f" + {_b(exp)} experts/(etp{etp}·ep{ep})" if exp else "")
                + ")"
            )
        else:
            on_gpu = (tp_part + exp) / tp + rep
            shard_text = f"({_b(tp_part + exp)}/t{tp} + {_b(rep)} replicated)"
        stage_flight = in_flight if first else 1.0
        # a forward pass without gradients keeps one layer's working set at a time
        forward_layer = max(
            activation_bytes_per_token(
                arch,
                moe=m,
                tp=tp,
                sequence_parallel=sp,
                recompute="none",
                flash_attention=settings.flash_attention,
                dropout=settings.dropout,
                sequence_length=tokens,
            )[0]
            for m in ((False, True) if p.moe_layers and p.dense_layers else (bool(p.moe_layers),))
        )
        recomputes = settings.recompute in ("full", "op") or forward_only
        one_layer = forward_layer if recomputes else 0.0
        if forward_only:
            acts = tokens * one_layer
            act_text = (
                f"forward only: one layer's working set, {tokens:,} tokens × {one_layer:,.0f} B"
            )
        else:
            acts = tokens * layer_bytes * stage_flight * interleave + tokens * one_layer
            act_text = (
                f"{tokens:,} tokens/micro-batch"
                + (f" (/c{cp})" if cp > 1 else "")
                + f" × layers {_layers_text(dense_l, moe_l, per_token)}"
                + (f" × {stage_flight:g} in flight (1F1B)" if stage_flight > 1 else "")
                + (
                    f" × {interleave:.3f} interleaved (vpp {settings.virtual_pipeline})"
                    if interleave > 1
                    else ""
                )
                + (f" + one layer recomputed {one_layer:,.0f} B/token" if one_layer else "")
            )
        logits = 0.0
        per_logit, logits_text = _logit_bytes(settings.logits, megatron_like, tp, forward_only)
        if (not first or pp == 1) and not settings.critic:
            logits = tokens * (arch.vocab_size / tp) * per_logit
        terms: list[Term] = []
        if megatron_like and lora is not None:
            terms.extend(
                _megatron_lora_terms(
                    settings, parallel, on_gpu, shard_text, where, compute, lora, world
                )
            )
        elif megatron_like:
            weights = on_gpu * compute
            terms.append(
                Term(
                    "weights",
                    int(weights),
                    f"{shard_text} params on this GPU [{where}] × {compute} B ({settings.dtype})",
                )
            )
            if not forward_only:
                terms.append(
                    Term(
                        "gradients",
                        int(on_gpu * 4),
                        f"{_b(on_gpu)} params × 4 B (float32 main gradients)",
                    )
                )
                dense_on_gpu = tp_part / tp + rep
                exp_on_gpu = exp / (etp * ep)
                per_param, states = _megatron_state_bytes(settings)
                if settings.distributed_optimizer:
                    # megatron-core shards the optimizer over its dp_cp_group, data and
                    # context parallel together (get_megatron_optimizer in
                    # megatron/core/optimizer/__init__.py, megatron-core 0.16.1)
                    edp = world // (etp * ep * pp) if (ep > 1 or etp > 1) else dp * cp
                    shards = dp * cp
                    opt = dense_on_gpu * per_param / shards + exp_on_gpu * per_param / edp
                    over = f"dp{dp}·cp{cp}" if cp > 1 else f"dp{dp}"
                    text = f"{_b(dense_on_gpu)} params × {per_param} B ({states}) / {over}" + (
                        f" + {_b(exp_on_gpu)} expert params × {per_param} B / expert-dp{edp} "
                        f"(world {world}/(etp{etp}·ep{ep}·p{pp}))"
                        if exp_on_gpu
                        else ""
                    )
                else:
                    opt = on_gpu * per_param
                    text = f"{_b(on_gpu)} params × {per_param} B ({states}), not distributed"
                terms.append(Term("optimizer", int(opt), text))
        else:
            terms.extend(
                _sharded_terms(
                    key,
                    backend,
                    p,
                    parallel,
                    settings,
                    tp_part,
                    rep,
                    exp,
                    shard_text,
                    forward_only,
                    lora,
                )
            )
        terms.append(Term("activations", int(acts), act_text))
        if logits:
            terms.append(
                Term(
                    "logits",
                    int(logits),
                    f"{tokens:,} tokens × vocab {arch.vocab_size:,}/t{tp} × {per_logit} B "
                    f"({logits_text})",
                )
            )
        terms.append(
            Term(
                "reserve",
                settings.reserve_bytes,
                f"{readable_bytes(settings.reserve_bytes)} for the CUDA context, NCCL buffers "
                f"and fragmentation (--memory-reserve-gib)",
            )
        )
        stage_phases = {"forward" if forward_only else "backward": tuple(terms)}
        if not forward_only:
            # what stays between the phases (weights, gradients, optimizer states), and
            # the reserve beside everything. The gradients too: FSDP frees them only at
            # the start of the next update (train_batch calls optimizer_zero_grad first,
            # areal/engine/fsdp_engine.py line 781 at cbff54d6), Megatron keeps its
            # gradient buffer; a forward before the update finds the last step's there
            held = tuple(t for t in terms if t.name in ("weights", "gradients", "optimizer"))
            reserve = tuple(t for t in terms if t.name == "reserve")
            if settings.recompute_logprob or settings.critic:
                fwd_logit, fwd_text = _logit_bytes(settings.logits, megatron_like, tp, True)
                forward = [
                    Term(
                        "activations",
                        int(tokens * forward_layer),
                        f"forward only: one layer's working set, {tokens:,} tokens × "
                        f"{forward_layer:,.0f} B",
                    )
                ]
                if logits:
                    forward.append(
                        Term(
                            "logits",
                            int(tokens * (arch.vocab_size / tp) * fwd_logit),
                            f"{tokens:,} tokens × vocab {arch.vocab_size:,}/t{tp} × "
                            f"{fwd_logit} B ({fwd_text})",
                        )
                    )
                stage_phases["forward"] = (*held, *forward, *reserve)
            stage_phases["optimizer_step"] = (*held, *reserve)
        stages.append((sum(t.bytes for t in terms), first, terms, stage_phases))
    _, first, terms, by_phase = max(stages, key=lambda s: s[0])
    if pp > 1:
        assumptions.append(f"most-loaded GPU: the {'first' if first else 'last'} pipeline stage")
    if settings.flash_attention and settings.recompute == "none":
        assumptions.append("FlashAttention: the a·s² attention scores are never stored")
    if settings.critic:
        assumptions.append(f"{key} is a critic: a value head of one output, no vocabulary logits")
    resident = sum(t.bytes for t in terms if t.name in ("weights", "gradients", "optimizer"))
    # torch's AdamW creates its states at the first step, FSDP its gradients at the
    # first backward; Megatron allocates its grad buffers and optimizer when built
    loaded = ("weights", "gradients", "optimizer") if megatron_like else ("weights",)
    at_load = sum(t.bytes for t in terms if t.name in loaded)
    if backend == "fsdp" and not settings.memory_efficient_load:
        loading = _fsdp_load_peak(key, p, settings, lora, terms)
    else:
        loading = tuple(t for t in terms if t.name in (*loaded, "reserve"))
    phases = (
        Phase("load", loading),
        *(Phase(name, by_phase[name]) for name in PHASES if name in by_phase),
    )
    estimate = MemoryEstimate(
        key,
        backend,
        tuple(terms),
        capacity,
        tuple(assumptions),
        resident=resident,
        at_load=at_load,
    )
    return estimate.with_phases(phases)


def _logit_bytes(mode: str, megatron: bool, tp: int, forward_only: bool) -> tuple[int, str]:
    """:data:`LOGITS`: bytes per logit element and what holds them. A forward-only
    engine (ref, a teacher) computes its log-probabilities without gradients: the
    reference's keep only the bfloat16 logits, 1,024 tokens at a time in float32."""
    if mode == "areal" and forward_only:
        return 2, "bf16 logits; log-probs by chunks of 1,024 tokens, no gradient"
    if mode == "float32":
        return 12, "float32 cross-entropy: log-softmax, its gradient and nll's"
    if mode == "float32_logits":
        return 4, "float32 logits"
    if mode == "float32_compiled":
        return 4, "compiled float32 cross-entropy: bf16 logits + their bf16 gradient"
    if mode == "chunked_compiled":
        return 3, "chunked compiled cross-entropy: bf16 logits + one of 8 chunks upcast"
    if megatron and tp > 1:
        return 8, "bf16 logits + float32 vocab-parallel softmax + bf16 gradient"
    return 6, "bf16 logits + bf16 gradient + one chunk's slice gradient"


@dataclass(frozen=True, slots=True)
class _Adapters:
    """LoRA adapter parameters on one pipeline stage, before any sharding."""

    tensor: float  # split by t (attention, dense and shared MLPs, routers)
    experts: float  # routed experts' adapters, split by etp·ep
    text: str


def _fsdp_load_peak(
    key: str,
    p: ParameterCount,
    settings: TrainingSettings,
    lora: _Adapters | None,
    terms: list[Term],
) -> tuple[Term, ...]:
    """FSDP's load phase with ``fsdp.memory_efficient_load: false``.

    Every rank builds the whole model on its own GPU, in ``optimizer_dtype``,
    before ``parallelize_model`` shards it (areal/engine/fsdp_engine.py
    _create_device_model: ``loading_device = current_platform.device_type`` unless
    memory_efficient_load, ``dtype = optimizer_dtype``; reference commit cbff54d6).
    With memory_efficient_load rank 0 loads on the CPU and broadcasts after sharding.
    """
    storage = dtype_bytes(settings.optimizer_dtype, f"{key}.optimizer_dtype")
    params = p.total + (0 if lora is None else lora.tensor + lora.experts)
    load = Term(
        "load",
        int(params * storage),
        f"{_b(params)} params × {storage} B ({settings.optimizer_dtype}): every rank builds the "
        f"whole model on its GPU before sharding ({key}.fsdp.memory_efficient_load=false)",
    )
    return (load, *(t for t in terms if t.name == "reserve"))


def _megatron_lora_terms(
    settings: TrainingSettings,
    parallel: ParallelStrategy,
    on_gpu: float,
    shard_text: str,
    where: str,
    compute: int,
    lora: _Adapters,
    world: int,
) -> list[Term]:
    """A frozen Megatron base in ``dtype``; the adapters with float32 main grads and states."""
    tp, pp, dp, cp = parallel.tp_size, parallel.pp_size, parallel.dp_size, parallel.cp_size
    ep, etp = parallel.ep_size, parallel.etp_size
    dense = lora.tensor / tp
    experts = lora.experts / (etp * ep)
    adapters = dense + experts
    per_param, states = _megatron_state_bytes(settings)
    if settings.distributed_optimizer:
        edp = world // (etp * ep * pp) if (ep > 1 or etp > 1) else dp * cp
        opt = dense * per_param / (dp * cp) + experts * per_param / edp
        over = f"/ dp{dp}·cp{cp}" if cp > 1 else f"/ dp{dp}"
    else:
        opt, over = adapters * per_param, "not distributed"
    return [
        Term(
            "weights",
            int((on_gpu + adapters) * compute),
            f"frozen {shard_text} params on this GPU [{where}] + {_b(adapters)} LoRA adapter "
            f"params ({lora.text}, /t{tp}) × {compute} B ({settings.dtype})",
        ),
        Term(
            "gradients",
            int(adapters * 4),
            f"{_b(adapters)} adapter params × 4 B (float32 main gradients; the base is frozen)",
        ),
        Term(
            "optimizer",
            int(opt),
            f"{_b(adapters)} adapter params × {per_param} B ({states}) {over}",
        ),
    ]


def _sharded_terms(
    key: str,
    backend: str,
    p: ParameterCount,
    parallel: ParallelStrategy,
    settings: TrainingSettings,
    tp_part: float,
    rep: float,
    exp: float,
    shard_text: str,
    forward_only: bool,
    lora: _Adapters | None = None,
) -> list[Term]:
    """Weights, gradients and optimizer states of a fully sharded (FSDP2) engine.

    FSDP (areal/engine/fsdp_engine.py): parameters stored in ``optimizer_dtype``,
    sharded over dp·cp after the tensor-parallel split (experts split by t too).
    Archon (areal/experimental/engine/archon_engine.py, FSDP2 over its dp_shard
    mesh after the pipeline, tensor and expert splits): parameters stored in
    ``dtype`` (the model is created in it), expert parameters sharded over
    expert-dp = world/(etp·ep·p). Both: gradients in the parameters' dtype,
    AdamW states in the parameters' dtype, none for SGD; the gathered root module
    and two decoder layers (the current one and the prefetched next) in ``dtype``.
    With LoRA the adapters are sharded and stored like the base, and only they
    have gradients and optimizer states.
    """
    tp, dp, cp, pp = parallel.tp_size, parallel.dp_size, parallel.cp_size, parallel.pp_size
    ep, etp = parallel.ep_size, parallel.etp_size
    compute = dtype_bytes(settings.dtype, f"{key}.dtype")
    if backend == "fsdp":
        storage_name = settings.optimizer_dtype
        storage = dtype_bytes(storage_name, f"{key}.optimizer_dtype")
        sharded = ((tp_part + exp) / tp + rep) / (dp * cp)
        adapters = 0.0 if lora is None else (lora.tensor + lora.experts) / tp / (dp * cp)
        where = f"{shard_text}/(dp{dp}·cp{cp})"
    else:
        storage_name, storage = settings.dtype, compute
        edp = parallel.world_size // (etp * ep * pp)
        sharded = (tp_part / tp + rep) / (dp * cp) + exp / (etp * ep) / edp
        adapters = (
            0.0 if lora is None else lora.tensor / tp / (dp * cp) + lora.experts / (etp * ep) / edp
        )
        where = f"{shard_text} sharded over dp{dp}·cp{cp}" + (
            f" (experts over expert-dp{edp})" if exp else ""
        )
    root = (p.embedding + p.output) / tp if pp == 1 else max(p.embedding, p.output) / tp
    gathered = root + 2 * p.largest_layer / tp
    if settings.offload_params:
        return [
            Term(
                "weights",
                int(gathered * compute),
                f"offload_params: parameters live on the CPU; gathered root + 2 layers "
                f"{_b(gathered)} × {compute} B",
            )
        ]
    frozen = "frozen " if lora is not None else ""
    terms = [
        Term(
            "weights",
            int((sharded + adapters) * storage + gathered * compute),
            f"{frozen}{where} × {storage} B ({storage_name} storage)"
            + (
                f" + {_b(adapters)} LoRA adapter params ({lora.text}) × {storage} B"
                if lora is not None
                else ""
            )
            + f" + gathered root and 2 layers {_b(gathered)} × {compute} B ({settings.dtype})",
        )
    ]
    if forward_only:
        return terms
    trained = sharded if lora is None else adapters
    what = "params" if lora is None else "adapter params (the base is frozen)"
    terms.append(
        Term(
            "gradients",
            int(trained * storage),
            f"{_b(trained)} {what} × {storage} B ({storage_name})",
        )
    )
    optimizer = settings.optimizer or "adam"
    state_bytes = {"adam": 2 * storage, "adam_bf16": 4, "sgd": 0}[optimizer]
    name = {
        "adam": f"AdamW: 2 states × {storage} B",
        "adam_bf16": "AnyPrecisionAdamW: 2 bfloat16 states",
        "sgd": "SGD without momentum: no state",
    }[optimizer]
    terms.append(
        Term(
            "optimizer",
            int(trained * state_bytes),
            f"{_b(trained)} {what.split(' (')[0]} × {state_bytes} B ({name})",
        )
    )
    return terms


def _layers_text(dense: float, moe: float, per_token: dict[bool, tuple[float, str]]) -> str:
    parts = []
    if dense:
        parts.append(f"{dense:g} dense × {per_token[False][0]:,.0f} B [{per_token[False][1]}]")
    if moe:
        parts.append(f"{moe:g} MoE × {per_token[True][0]:,.0f} B [{per_token[True][1]}]")
    return " + ".join(parts)


def _megatron_state_bytes(settings: TrainingSettings) -> tuple[int, str]:
    if settings.optimizer == "sgd":
        return 8, "float32 main params + momentum"
    if settings.optimizer == "adam_bf16" or settings.precision_aware_optimizer:
        return 8, "float32 main params + 2 bfloat16 Adam states"
    return 12, "float32 main params + 2 float32 Adam states"


# --- inference ------------------------------------------------------------------------------


def kv_bytes_per_token(
    arch: Architecture, tp: int, pp: int, kv_dtype_bytes: int
) -> tuple[int, str]:
    """KV bytes one token takes on one GPU, as vLLM and SGLang allocate them.

    Per layer 2 (k and v) × kv heads on this GPU × head size × dtype bytes; a
    GPU holds ``max(1, kv_heads // t)`` heads (replicated when fewer than t) and
    ``ceil(layers / p)`` layers. MLA caches one latent of kv_lora_rank + rope
    dims per layer, the same on every tensor-parallel rank.
    """
    layers = math.ceil(arch.num_layers / pp)
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


def non_torch_bytes(tp: int) -> int:
    """:data:`NON_TORCH_BYTES` of one GPU of a t-way tensor-parallel instance."""
    return NON_TORCH_BYTES[1 if tp == 1 else 2]


def vllm_default_batched_tokens(device_bytes: int, gpu_name: str = "") -> int:
    """vLLM's server default ``max_num_batched_tokens``: 8,192 on a GPU of ≥ 70 GiB that is
    not an A100, else 2,048 (vllm/engine/arg_utils.py ``_set_default_args``,
    ``UsageContext.OPENAI_API_SERVER``)."""
    return 8192 if device_bytes >= 70 * GIB and "a100" not in gpu_name.lower() else 2048


def vllm_profile_activation(
    arch: Architecture, tp: int, compute: int, max_num_seqs: int, batched_tokens: int
) -> tuple[int, str]:
    """The activation peak of vLLM's profile run: the larger of its forward over
    ``max_num_batched_tokens`` tokens (``_dummy_run(self.max_num_tokens)``) and its sampler
    over ``max_num_seqs`` requests (``_dummy_sampler_run``, :data:`VLLM_SAMPLER_BYTES` per
    logit of the whole vocabulary: vLLM gathers the logits on every tensor-parallel rank).
    The forward keeps, at a layer's MLP, the residual and the normed input (2h) and the
    gate-up output and its product (3f/t, the top-k experts' for an MoE layer)."""
    h = arch.hidden_size
    if arch.is_moe:
        width = arch.experts_per_token * arch.moe_intermediate_size
        width += arch.shared_expert_intermediate_size
    else:
        width = arch.intermediate_size
    forward = batched_tokens * (2 * h + 3 * width / tp) * compute
    sampler = max_num_seqs * arch.vocab_size * VLLM_SAMPLER_BYTES
    if sampler >= forward:
        return int(sampler), (
            f"profile sampler run: {max_num_seqs} seqs × vocab {arch.vocab_size:,} × "
            f"{VLLM_SAMPLER_BYTES} B (bf16 + float32 logits, top-k/top-p sort)"
        )
    return int(forward), (
        f"profile forward: {batched_tokens:,} batched tokens × (2·{h} + 3·{width}/t{tp}) × "
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
    tp, pp = parallel.tp_size, parallel.pp_size
    compute = dtype_bytes(settings.dtype, f"{key}.dtype")
    kv_dtype = (
        compute
        if settings.kv_cache_dtype == "auto"
        else dtype_bytes(settings.kv_cache_dtype, f"{key}.kv_cache_dtype")
    )
    p = arch.parameters
    weights = p.total * compute / (tp * pp)
    per_token, formula = kv_bytes_per_token(arch, tp, pp, kv_dtype)
    device = settings.device_bytes if settings.device_bytes is not None else capacity
    terms = [
        Term(
            "weights",
            int(weights),
            f"{_b(p.total)} params / (t{tp}·p{pp}) × {compute} B ({settings.dtype})",
        ),
    ]
    vllm = backend == "vllm"
    activations = 0
    if vllm:
        batched = settings.max_num_batched_tokens or vllm_default_batched_tokens(device or 0)
        activations, act_text = vllm_profile_activation(
            arch, tp, compute, settings.max_num_seqs, batched
        )
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
