"""What a training step keeps for its backward, per token and layer, and LoRA's adapters.

- activations from Korthikanti et al. 2022, "Reducing Activation Recomputation
  in Large Transformer Models" (arXiv:2205.05198), Table 2, generalised from
  GPT's MLP to grouped-query attention, SwiGLU and mixture-of-experts layers
  (:func:`activation_bytes_per_token`: Megatron's fused kernels; torchtitan's per-op
  policy: :func:`op_sac_bytes_per_token`), and as Hugging Face modeling code, which the
  reference's FSDP engine runs, holds them (:func:`hf_activation_bytes_per_token`);
- the parameters LoRA adds for its target modules (:func:`lora_parameters`).
"""

from __future__ import annotations

import functools

from areal_alloc.architecture import Architecture
from areal_alloc.estimate.execution import DEFAULT_RECOMPUTE_MODULES, LORA_TARGETS

__all__ = [
    "activation_bytes_per_token",
    "hf_activation_bytes_per_token",
    "lora_parameters",
    "op_sac_bytes_per_token",
]


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
    gathered_inputs: bool = False,
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES,
    mlp_gathered: bool = True,
) -> tuple[float, str]:
    """Bytes one token leaves stored in one layer, per GPU, and how they were counted.

    ``recompute_modules``: what ``recompute="selective"`` recomputes (Megatron's names,
    :data:`RECOMPUTE_MODULES`); each drops what the module stores and keeps its input
    (:func:`_recomputed_bytes`). The one layer a backward re-materialises at a time is not
    counted.

    ``gathered_inputs``: tensor parallelism by DTensor (torch.distributed.tensor.parallel,
    as the reference's FSDP engine and torchtitan apply it): the norms are sequence
    parallel, but ``PrepareModuleInput`` all-gathers the attention's and the MLP's input
    to ``Replicate()`` before the ``ColwiseParallel`` linears, which save it whole for
    their weight gradient, so those 2h + 2h stay on every GPU (areal/engine/fsdp_utils/
    parallel.py ``model_tp_plan``, areal-project/AReaL@cbff54d645d2cd8ee1f1c358a82f3f473588
    433d; torchtitan/parallelisms/parallelize_llama.py at 9dec370a). Megatron's sequence
    parallelism keeps them sharded and gathers them again in the backward. ``mlp_gathered``
    False: the plan has no MLP (the reference's FSDP on the model types whose MLPs it keeps
    whole, ``execution.fsdp_keeps_mlp_whole``): only the attention's 2h is gathered.

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
    modules = recompute_modules if recompute == "selective" else ()
    attention_kept = recompute == "none" or (
        recompute == "selective" and "core_attn" not in modules
    )
    if attention_kept and not flash_attention:
        scores = (5 if dropout else 2) * arch.num_attention_heads * sequence_length
    dropped_replicated, dropped_split, dropped = _recomputed_bytes(arch, moe, modules, q, k, v)
    stored = replicated  # before the recomputed modules, for the text
    replicated -= dropped_replicated
    split -= dropped_split
    if recompute == "full":
        return 2 * h / (tp if sequence_parallel else 1), f"2h = {2 * h} (full recomputation)"
    if recompute == "op":
        return op_sac_bytes_per_token(arch, moe=moe, tp=tp, sequence_parallel=sequence_parallel)
    whole = 2 * h + (2 * h if mlp_gathered else 0)  # the attention's and the MLP's input
    per_token, how = _split_by_tp(
        replicated,
        (split, scores),
        whole,
        tp=tp,
        sequence_parallel=sequence_parallel,
        gathered_inputs=gathered_inputs,
    )
    text = f"2·(q{q} + k{k} + v{v} + o{proj}) + {mlp} + norms/inputs {stored}" + (
        f" − {dropped_replicated + dropped_split} recomputed ({dropped})" if dropped else ""
    )
    return per_token, f"{text}: {how}"


def _split_by_tp(
    replicated: int,
    split: tuple[int, ...],
    whole: int,
    *,
    tp: int,
    sequence_parallel: bool,
    gathered_inputs: bool,
) -> tuple[float, str]:
    """A layer's bytes per token on one GPU of ``t``: ``split`` is divided by t;
    ``replicated`` too under sequence parallelism, but for the ``whole`` inputs that
    DTensor's ``PrepareModuleInput`` gathers (``gathered_inputs``, see
    :func:`activation_bytes_per_token`); without it ``replicated`` stays on every GPU."""
    parts = " + ".join(str(part) for part in split)
    if gathered_inputs and sequence_parallel and tp > 1:
        rest = replicated - whole
        per_token = whole + (rest + sum(split)) / tp
        return per_token, f"{whole} gathered + ({rest} + {parts})/t{tp}"
    if sequence_parallel or tp == 1:
        per_token = (replicated + sum(split)) / tp
        how = f"({replicated} + {parts})/t{tp}" if tp > 1 else f"{replicated + sum(split)}"
        return per_token, how
    return replicated + sum(split) / tp, f"{replicated} + ({parts})/t{tp}"


@functools.lru_cache(maxsize=1024)
def hf_activation_bytes_per_token(
    arch: Architecture,
    *,
    moe: bool,
    tp: int,
    sequence_parallel: bool,
    recompute: str,
    mlp_gathered: bool = True,
) -> tuple[float, str]:
    """Bytes one token leaves stored in one decoder layer, per GPU, as Hugging Face's
    modeling code holds them for the backward: the code the reference's FSDP engine runs
    (``AutoModelForCausalLM``, areal/engine/fsdp_engine.py at cbff54d6).

    Read from transformers 5.17.0's ``models/qwen3/modeling_qwen3.py`` (the version the
    measured steps ran; Llama's and Qwen2's layers are the same but for the q/k norms),
    counting what autograd saves (a product saves an operand only where the other one
    requires a gradient, so ``q * cos`` keeps only ``cos``), 2 bytes a bf16 element:

    - each RMSNorm (``Qwen3RMSNorm.forward``, l.59-64): its float32 copy of the input
      (4 B, saved by ``pow`` and the product), its rsqrt (4 B a row) and the bf16 cast
      the weight multiplies (2 B): 6h + 4, twice a layer; with ``qk_norm`` also over q
      and k per head (6q + 6k + 4 per head);
    - the attention's input, the norm's output, saved by q/k/v_proj (2h); the rotated
      q and k and v, saved by the attention kernel (2q + 2k + 2v; ``repeat_kv`` does not
      copy them under FlashAttention-2 or SDPA's GQA path, integrations/
      sdpa_attention.py l.97-102), its output (2q) and float32 log-sum-exp (4 B a head),
      and o_proj's input, the output made contiguous (2q; l.296-297);
    - the MLP (``Qwen3MLP.forward``, l.82-84): its input (2h), the gate's output saved by
      SiLU, SiLU's output and up's output saved by their product, the product saved by
      down_proj: 8f (GeLU's MLP: 4f).

    A mixture-of-experts layer's routed and shared experts are counted as
    :func:`activation_bytes_per_token` counts them (not measured on Hugging Face's MoE
    blocks). ``recompute="full"``: ``gradient_checkpointing_enable`` wraps each decoder
    layer (``GradientCheckpointingLayer``), which keeps only its input (2h). Tensor
    parallelism as :func:`activation_bytes_per_token` with ``gathered_inputs``.
    """
    h = arch.hidden_size
    if recompute == "full":
        return 2 * h / (tp if sequence_parallel else 1), f"2h = {2 * h} (full recomputation)"
    if arch.is_mla:
        a = arch.num_attention_heads
        q = k = a * (arch.qk_nope_head_dim + arch.qk_rope_head_dim)
        v = o = a * arch.v_head_dim
        kv_heads = a
    else:
        q = o = arch.query_width
        k = v = arch.kv_width
        kv_heads = arch.num_key_value_heads
    heads = arch.num_attention_heads
    norms = 2 * (6 * h + 4)
    inputs = 2 * h + 2 * h  # the attention's and the MLP's, saved by their linears
    qk_norms = (6 * q + 6 * k + 4 * (heads + kv_heads)) if arch.qk_norm else 0
    attention = 2 * (q + k + v) + 2 * o + 4 * heads + 2 * o  # kernel's, lse, o_proj's
    if moe:
        per_f = 6 if arch.gated_mlp else 4
        mlp = arch.experts_per_token * (2 * h + per_f * arch.moe_intermediate_size)
        mlp += per_f * arch.shared_expert_intermediate_size + 4 * arch.num_experts
        mlp_text = f"MoE {mlp} (as Megatron's count)"
    else:
        per_f = 8 if arch.gated_mlp else 4
        mlp = per_f * arch.intermediate_size
        mlp_text = f"{'SwiGLU' if arch.gated_mlp else 'GeLU'} {per_f}·{arch.intermediate_size}"
    replicated = norms + inputs
    split = qk_norms + attention + mlp
    whole = 2 * h + (2 * h if mlp_gathered else 0)
    per_token, how = _split_by_tp(
        replicated,
        (split,),
        whole,
        tp=tp,
        sequence_parallel=sequence_parallel,
        gathered_inputs=True,
    )
    text = (
        f"Hugging Face layer: norms 2·(6h + 4) + inputs 4h = {replicated}, "
        + (f"q/k norms {qk_norms} + " if qk_norms else "")
        + f"attention 2·(q{q} + k{k} + v{v}) + 4·o{o} + lse 4·{heads} = {attention}, "
        + f"{mlp_text}"
    )
    return per_token, f"{text}: {how}"


def _recomputed_bytes(
    arch: Architecture, moe: bool, modules: tuple[str, ...], q: int, k: int, v: int
) -> tuple[int, int, str]:
    """What selective recomputation's ``modules`` drop from a layer's stored bytes per token:
    (of the replicated norms/inputs, of the tensor-split rest, what).

    Megatron-core 0.17.0 (NVIDIA/Megatron-LM core_v0.17.0), Transformer Engine's layer spec
    as the reference's mbridge and Megatron-LM build it:
    - "layernorm" discards a norm's output, the next linear's saved input (2h), where the
      norm is its own module (transformer_layer.py l.404-461: not an ``IdentityOp``): the
      pre-MLP norm of a MoE layer, and an MLA layer's input norm; TE fuses the others into
      the following linear (gpt_layer_specs.py l.305-328: ``linear_qkv=
      column_parallel_layer_norm_linear()``, ``pre_mlp_layernorm=... if num_experts else
      IdentityOp``);
    - "moe_act" discards the routed experts' activation output, fc2's input (2f per copy;
      moe/experts.py l.379-389 ``CheckpointWithoutOutput``);
    - "mla_up_proj" discards MLA's up-projected q, k, v (2(q + k + v));
    - "mlp" (a dense layer), "moe" and "shared_experts" checkpoint the module: all it
      stores inside, its input kept (moe_layer.py l.599-612, l.450-460);
    - "core_attn" drops the attention scores (counted where they are stored)."""
    h = arch.hidden_size
    per_f = 6 if arch.gated_mlp else 4
    parts: list[tuple[str, int, int]] = []  # (module, replicated, split)
    if "layernorm" in modules:
        norms = (1 if moe else 0) + (1 if arch.is_mla else 0)
        if norms:
            parts.append(("layernorm", 2 * h * norms, 0))
    if moe and "moe" in modules:
        experts = arch.experts_per_token * (2 * h + per_f * arch.moe_intermediate_size)
        inside = experts + per_f * arch.shared_expert_intermediate_size + 4 * arch.num_experts
        parts.append(("moe", 0, inside))
    else:
        if moe and "moe_act" in modules:
            parts.append(("moe_act", 0, arch.experts_per_token * 2 * arch.moe_intermediate_size))
        if moe and "shared_experts" in modules and arch.shared_expert_intermediate_size:
            parts.append(("shared_experts", 0, per_f * arch.shared_expert_intermediate_size))
    if not moe and "mlp" in modules:
        parts.append(("mlp", 0, per_f * arch.intermediate_size))
    if arch.is_mla and "mla_up_proj" in modules:
        parts.append(("mla_up_proj", 0, 2 * (q + k + v)))
    what = ", ".join(f"{name} {rep + sp}" for name, rep, sp in parts)
    return sum(p[1] for p in parts), sum(p[2] for p in parts), what


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
