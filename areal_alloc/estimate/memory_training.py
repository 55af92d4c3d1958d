"""Per-GPU memory of one training engine (``fsdp``, ``megatron``, ``archon``), for the
most-loaded GPU, phase by phase (``memory.PHASES``):

- weights, gradients and optimizer states, sharded the way the reference's
  engines shard them (see :func:`training_memory`);
- activations (``areal_alloc.estimate.activations``);
- the logits of the whole vocabulary on the last pipeline stage, as the loss holds them
  (``execution.LOGITS``);
- a reserve for the CUDA context, NCCL buffers and fragmentation (a stated
  number the user can override).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from areal_alloc.architecture import Architecture, ParameterCount
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.activations import activation_bytes_per_token, lora_parameters
from areal_alloc.estimate.execution import TrainingSettings
from areal_alloc.estimate.memory import (
    PHASES,
    MemoryEstimate,
    Phase,
    Term,
    _b,
    dtype_bytes,
    readable_bytes,
)
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "training_memory",
]


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
    # FSDP and archon apply tensor parallelism by DTensor: the linears save gathered inputs
    dtensor = backend != "megatron"
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
            gathered_inputs=dtensor,
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
                gathered_inputs=dtensor,
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
            # offloaded checkpoints: the one layer brought back for its recomputation
            offloaded = settings.activation_offload and recomputes
            layers_kept = (
                max(per_token[False][0], per_token[True][0])
                if offloaded
                else layer_bytes * stage_flight * interleave
            )
            acts = tokens * layers_kept + tokens * one_layer
            act_text = (
                f"{tokens:,} tokens/micro-batch"
                + (f" (/c{cp})" if cp > 1 else "")
                + (
                    " × one layer's checkpoint back from the CPU (the rest offloaded) "
                    f"{layers_kept:,.0f} B"
                    if offloaded
                    else f" × layers {_layers_text(dense_l, moe_l, per_token)}"
                )
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
        # torch's optimizers set the gradients to None before a step (zero_grad's
        # set_to_none=True default: AReaL's train_batch calls optimizer_zero_grad first,
        # fsdp_engine.py line 781 at cbff54d6; torchtitan's train.py optimizers.zero_grad()
        # at 9dec370a): a step's only micro-batch starts its backward without gradients,
        # and they reach their size as its activations are freed (the optimizer step holds
        # them all). Megatron's gradient buffer is allocated with the model.
        lone = settings.micro_batches == 1 and not megatron_like and not forward_only
        backward = tuple(t for t in terms if not (lone and t.name == "gradients"))
        stage_phases = {"forward" if forward_only else "backward": backward}
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
    # what is on the GPU once loaded: torch's AdamW creates its states at the first
    # step, FSDP its gradients at the first backward; Megatron builds its gradient
    # buffers and its optimizer's float32 main parameters with the model
    # (megatron/core/optimizer/distrib_optimizer.py _build_model_and_main_param_groups,
    # NVIDIA/Megatron-LM@001199898c4badd01eaf0785c212d8ed7ce83042) and its Adam or
    # momentum states at the first step (TransformerEngine's FusedAdam.step: "if
    # len(state) == 0: self.initialize_state(p, ...)", transformer_engine/pytorch/
    # optimizers/fused_adam.py at NVIDIA/TransformerEngine@04912bf024514826f31cc02485d396974af68516)
    if megatron_like:
        per_param, _ = _megatron_state_bytes(settings)
        loaded = tuple(
            t
            if t.name != "optimizer"
            else Term(
                "optimizer",
                t.bytes * 4 // per_param,
                f"its float32 main params, 4 of the {per_param} B per parameter of "
                f"[{t.formula}]; the states come at the first step",
            )
            for t in terms
            if t.name in ("weights", "gradients", "optimizer")
        )
    else:
        loaded = tuple(t for t in terms if t.name == "weights")
    at_load = sum(t.bytes for t in loaded)
    if backend == "fsdp" and not settings.memory_efficient_load:
        loading = _fsdp_load_peak(key, p, settings, lora, terms)
    else:
        loading = (*loaded, *(t for t in terms if t.name == "reserve"))
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
    if settings.optimizer_in_backward and lora is None:
        # stepped and freed as each is ready: the largest one's gradient, the embedding's
        largest = max(p.embedding, p.output) / tp / (dp * cp)
        terms.append(
            Term(
                "gradients",
                int(largest * storage),
                f"optimizer in the backward: one parameter's gradient at a time, the largest "
                f"{_b(largest)} × {storage} B ({storage_name})",
            )
        )
    else:
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
