"""Per-GPU memory of one training engine (``fsdp``, ``megatron``, ``archon``), for the
most-loaded GPU, phase by phase (``memory.PHASES``), one function per quantity:

- weights, gradients and optimizer states, sharded the way the reference's
  engines shard them (``memory_sharding``: Megatron's, FSDP's, archon's);
- activations (:func:`_activations`, per layer from ``areal_alloc.estimate.activations``);
- the pipeline ranks to weigh (:func:`_candidate_ranks`: each rank's layers from the
  engine's pipeline split, ``pipeline_split.engine_split``);
- the logits of the whole vocabulary on the last pipeline rank, as the loss holds them
  (:func:`_logits`, ``execution.LOGITS``);
- a reserve for the CUDA context, NCCL buffers and fragmentation (:func:`_reserve`, a
  stated number the user can override);
- the phases: :func:`_load_phase`, :func:`_backward_phase`, :func:`_forward_phase`,
  :func:`_optimizer_step_phase`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import replace
from functools import lru_cache

from areal_alloc import defaults
from areal_alloc.architecture import Architecture, ParameterCount
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.activations import (
    activation_bytes_per_token,
    hf_activation_bytes_per_token,
    lora_parameters,
)
from areal_alloc.estimate.backends import training_model
from areal_alloc.estimate.execution import (
    DEFAULT_RECOMPUTE_MODULES,
    TrainingSettings,
    fsdp_keeps_mlp_whole,
)
from areal_alloc.estimate.memory import (
    PHASES,
    MemoryEstimate,
    Phase,
    Term,
    dtype_bytes,
    readable_bytes,
    short_count,
)
from areal_alloc.estimate.memory_sharding import (
    Engine,
    LayerAdapters,
    Stage,
    fsdp_load_peak,
    megatron_state_bytes,
    pipeline_ranks,
    stage,
    states,
)
from areal_alloc.model_shape import engine_micro_batches
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "training_memory",
]

#: the terms an engine keeps between its phases
_HELD = ("weights", "gradients", "optimizer")


def training_memory(
    key: str,
    backend: str,
    arch: Architecture,
    parallel: ParallelStrategy,
    settings: TrainingSettings,
    capacity: int | None,
) -> MemoryEstimate:
    """The most-loaded GPU of a training engine: the terms of each pipeline rank that
    may be the most loaded (:func:`_candidate_ranks`, :func:`_stage_terms`), the
    heaviest rank's (the lowest of equals), over its phases.

    How each backend shards its weights, gradients and optimizer states:
    ``memory_sharding`` (Megatron's distributed optimizer, FSDP, archon).

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
    engine, assumptions = _engine(key, backend, arch, parallel, settings)
    pp = parallel.pp_size
    stages = [_stage_terms(engine, rank) for rank in _candidate_ranks(engine)]

    def peak(stage: tuple[int, list[Term], dict[str, tuple[Term, ...]]]) -> int:
        """A rank's peak over its phases (load included): what its GPU must hold at once."""
        loading, _ = _load_phase(engine, stage[1])
        return max(sum(t.bytes for t in ts) for ts in (loading, *stage[2].values()))

    rank, terms, by_phase = max(stages, key=peak)  # the lowest rank of equal peaks
    if engine.split is not None:
        assumptions.append(
            f"most-loaded GPU: pipeline rank {rank} of {pp}, {engine.split.describe(rank)}; "
            f"{engine.split.rule}"
        )
    if settings.flash_attention and settings.recompute == "none":
        assumptions.append("FlashAttention: the a·s² attention scores are never stored")
    if settings.critic:
        assumptions.append(f"{key} is a critic: a value head of one output, no vocabulary logits")
    loading, at_load = _load_phase(engine, terms)
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
        resident=sum(t.bytes for t in terms if t.name in _HELD),
        at_load=at_load,
        whole_mlp=fsdp_keeps_mlp_whole(backend, arch.model_type),
    )
    return estimate.with_phases(phases)


def _engine(
    key: str,
    backend: str,
    arch: Architecture,
    parallel: ParallelStrategy,
    settings: TrainingSettings,
) -> tuple[Engine, list[str]]:
    """What every term reads (:class:`Engine`), and what the estimate assumes so far."""
    training_model(backend)  # a backend without a model is refused here, by name
    p = arch.parameters
    if settings.critic:
        p = replace(p, output=arch.hidden_size)
    compute = dtype_bytes(settings.dtype, f"{key}.dtype")
    allowed = defaults.ENGINE_OPTIMIZERS.get(backend)
    if settings.optimizer is not None and allowed and settings.optimizer not in allowed:
        # an experiment's engine is refused at start-up first (rules.*_builds_the_optimizer)
        raise AllocationValidationError(
            f"{key}.optimizer.type={settings.optimizer!r}: the {backend} engine takes "
            f"{', '.join(allowed[:-1])} or {allowed[-1]} (areal_alloc.defaults.ENGINE_OPTIMIZERS)"
        )
    pp = parallel.pp_size
    tokens = math.ceil(settings.packed(backend, pp) / parallel.cp_size)
    per_token = _per_token(arch, backend, parallel.tp_size, settings, tokens, settings.recompute)
    # a forward pass without gradients keeps one layer's working set at a time
    no_grad = _per_token(arch, backend, parallel.tp_size, settings, tokens, "none")
    kinds = (False, True) if p.moe_layers and p.dense_layers else (bool(p.moe_layers),)
    forward_layer = max(no_grad[moe][0] for moe in kinds)
    lora, assumptions = _adapters(key, backend, arch, p, settings)
    split, rank_layers = pipeline_ranks(
        backend,
        arch,
        parallel.pp_size,
        settings.virtual_pipeline,
        parallel.ep_size,
        settings.layer_split,
    )
    engine = Engine(
        key,
        backend,
        arch,
        p,
        parallel,
        settings,
        compute,
        tokens,
        per_token,
        forward_layer,
        lora,
        split,
        rank_layers,
    )
    return engine, assumptions


def _per_token(
    arch: Architecture,
    backend: str,
    tp: int,
    settings: TrainingSettings,
    tokens: int,
    recompute: str,
) -> dict[bool, tuple[float, str]]:
    """Activation bytes per token of a dense (False) and a MoE (True) layer, and how."""
    sp = settings.sequence_parallel if settings.sequence_parallel is not None else tp > 1
    model = training_model(backend)
    hugging_face = model.layers == "hugging_face" and settings.modeling == "engine"
    if hugging_face and recompute in ("none", "full"):
        # the reference's FSDP engine runs Hugging Face's modeling code, with
        # gradient_checkpointing on or off (it has no selective recomputation)
        return {
            moe: hf_activation_bytes_per_token(
                arch,
                moe=moe,
                tp=tp,
                sequence_parallel=sp,
                recompute=recompute,
                mlp_gathered=not fsdp_keeps_mlp_whole(backend, arch.model_type),
            )
            for moe in (False, True)
        }
    return {
        moe: activation_bytes_per_token(
            arch,
            moe=moe,
            tp=tp,
            sequence_parallel=sp,
            recompute=recompute,
            flash_attention=settings.flash_attention,
            dropout=settings.dropout,
            sequence_length=tokens,
            # FSDP and archon apply tensor parallelism by DTensor: the linears save
            # gathered inputs (the attention's only where FSDP keeps the MLPs whole)
            gathered_inputs=model.fsdp2,
            mlp_gathered=not fsdp_keeps_mlp_whole(backend, arch.model_type),
            # selective recomputation's modules (Megatron's recompute_modules)
            recompute_modules=(
                settings.recompute_modules if model.recompute_modules else DEFAULT_RECOMPUTE_MODULES
            ),
        )
        for moe in (False, True)
    }


def _adapters(
    key: str,
    backend: str,
    arch: Architecture,
    p: ParameterCount,
    settings: TrainingSettings,
) -> tuple[LayerAdapters | None, list[str]]:
    """LoRA's adapters of one layer of each kind (None: every parameter trains, or none
    does; ``memory_sharding.stage`` counts a rank's), and what the estimate assumes of them."""
    model = training_model(backend)
    if settings.lora_rank is not None and model.lora is None:
        # the archon engine reads no LoRA setting (areal/experimental/engine/, reference
        # commit cbff54d6: only fsdp_engine.py and megatron_engine.py apply use_lora)
        return None, [f"{key}: the archon engine ignores use_lora; every parameter trains"]
    if settings.lora_rank is None or settings.optimizer is None:
        return None, []
    dense_a, moe_a, exp_a, lora_text = lora_parameters(
        arch, model.lora == "megatron", settings.lora_rank, settings.lora_targets
    )
    lora = LayerAdapters(dense_a, moe_a, exp_a, lora_text)
    return lora, [
        f"LoRA rank {settings.lora_rank}: the base model is frozen; "
        f"{short_count(dense_a * p.dense_layers + (moe_a + exp_a) * p.moe_layers)} adapter "
        f"parameters train ({lora_text})"
    ]


def _candidate_ranks(e: Engine) -> tuple[int, ...]:
    """The pipeline ranks that may be the most loaded (:func:`_undominated`)."""
    pp = e.parallel.pp_size
    if pp == 1:
        return (0,)
    return _undominated(e.rank_layers, _held_activations(e))


@lru_cache(maxsize=4096)
def _undominated(
    layers: tuple[tuple[int, int], ...], held: tuple[tuple[int, int, int], ...]
) -> tuple[int, ...]:
    """Of ranks with these (dense, MoE) ``layers`` and ``held`` activations
    (:func:`_held_activations`),
    in rank order: rank 0 (the embedding), the last rank (the output layer, the logits),
    and every other rank whose (dense layers, MoE layers, dense and MoE layer-forwards
    held) no other rank matches or exceeds in every one (each term grows with each of
    them)."""
    last = len(layers) - 1
    lowest: dict[tuple[int, int, int, int], int] = {}
    for rank in range(1, last):
        lowest.setdefault((*layers[rank], *held[rank][:2]), rank)
    points = {
        r: (layers[r][0], layers[r][1], held[r][0], held[r][1]) for r in (0, *lowest.values(), last)
    }
    kept = [0, last]
    for rank in lowest.values():
        mine = points[rank]
        if not any(
            other != rank and all(a >= b for a, b in zip(point, mine, strict=True))
            for other, point in points.items()
        ):
            kept.append(rank)
    return tuple(sorted(kept))


def _stage_terms(e: Engine, rank: int) -> tuple[int, list[Term], dict[str, tuple[Term, ...]]]:
    """Pipeline rank ``rank``'s terms at its peak, and its phases."""
    s = stage(e, rank)
    logits = _logits(e, s, e.forward_only)
    terms = [
        *states(e, s),
        _activations(e, s, logits.bytes if logits else 0),
        *([logits] if logits else []),
        _reserve(e.settings),
    ]
    by_phase = {"forward" if e.forward_only else "backward": _backward_phase(e, terms)}
    if not e.forward_only:
        if e.settings.recompute_logprob or e.settings.critic:
            by_phase["forward"] = _forward_phase(e, s, terms)
        if e.model.fsdp2 and e.settings.fsdp2:
            by_phase["backward_end"] = _backward_end_phase(e, s, terms)
        by_phase["optimizer_step"] = _optimizer_step_phase(terms)
    return rank, terms, by_phase


def _activations(e: Engine, s: Stage, logits: int = 0) -> Term:
    """What a micro-batch's backward needs: each layer's saved activations for every
    micro-batch in flight (:func:`_in_flight`), or, offloaded, one layer's checkpoints
    back from the CPU; and, recomputed, one layer's working set beyond the ``logits``
    bytes: autograd runs the loss's and the output layer's backward, which frees the
    logits, before the last layer's recomputation (measured: the reference's FSDP step
    peaks at its checkpoints and logits, benchmarks/measurements.json
    ``reference_fsdp_allocated``)."""
    if e.forward_only:
        return _forward_activations(e)
    settings, tokens, per_token = e.settings, e.tokens, e.per_token
    cp = e.parallel.cp_size
    held_dense, held_moe, forwards = _held_activations(e)[s.rank]
    dense_l, moe_l = s.dense_layers, s.moe_layers
    recomputes = settings.recompute in ("full", "op")
    one_layer = e.forward_layer if recomputes else 0.0
    # offloaded checkpoints: the one layer brought back for its recomputation
    offloaded = settings.activation_offload and recomputes
    layers_kept = (
        max(per_token[False][0], per_token[True][0])
        if offloaded
        else held_dense * per_token[False][0] + held_moe * per_token[True][0]
    )
    vpp = settings.virtual_pipeline if e.parallel.pp_size > 1 else 1
    recomputed = max(0.0, tokens * one_layer - logits)
    acts = tokens * layers_kept + recomputed
    act_text = (
        f"{tokens:,} tokens/micro-batch"
        + (f" (/c{cp})" if cp > 1 else "")
        + (
            f" × one layer's checkpoint back from the CPU (the rest offloaded) {layers_kept:,.0f} B"
            if offloaded
            else f" × layers {_layers_text(dense_l, moe_l, per_token)}"
        )
        + (
            f" × {forwards} micro-batches in flight (1F1B)"
            if forwards > 1 and vpp == 1 and not offloaded
            else ""
        )
        + (
            f": {forwards} forwards of its virtual stages held (interleaved 1F1B, vpp "
            f"{vpp}): {held_dense:,} dense + {held_moe:,} MoE layer-forwards"
            if vpp > 1 and not offloaded
            else ""
        )
        + (
            (
                f" + one layer recomputed {one_layer:,.0f} B/token"
                + (" beyond the logits (freed before it)" if logits else "")
            )
            if recomputed
            else ""
        )
        + (
            f" (one layer recomputed, {one_layer:,.0f} B/token, after the logits are freed)"
            if one_layer and not recomputed
            else ""
        )
    )
    return Term("activations", int(acts), act_text)


def _held_activations(e: Engine) -> tuple[tuple[int, int, int], ...]:
    """Per pipeline rank: the dense and MoE layer-forwards whose activations it holds at
    its peak, and how many micro-batch forwards that is (:func:`_held_forwards`), with the
    micro-batches the reference's engine runs (:func:`engine_micro_batches`)."""
    pp = e.parallel.pp_size
    vpp = e.settings.virtual_pipeline if pp > 1 else 1
    split = e.split
    chunks = (
        ((e.rank_layers[0],),)
        if split is None
        else tuple(
            tuple(
                split.stage_kinds(st, e.arch.first_dense_layers, e.arch.is_moe)
                for st in split.stages_of(r)
            )
            for r in range(pp)
        )
    )
    weights = (e.per_token[False][0], e.per_token[True][0])
    m = engine_micro_batches(e.backend, pp, vpp, e.settings.micro_batches)
    return _held_forwards(chunks, pp, vpp, m, weights)


@lru_cache(maxsize=4096)
def _held_forwards(
    chunks: tuple[tuple[tuple[int, int], ...], ...],
    pp: int,
    vpp: int,
    micro_batches: int | None,
    weights: tuple[float, float] = (1.0, 1.0),
) -> tuple[tuple[int, int, int], ...]:
    """What each rank holds at its peak under megatron-core's 1F1B schedules, from each
    rank's virtual stages' (dense, MoE) layers (``chunks``); ``weights``: a dense and a MoE
    layer's bytes per token, which pick the peak.

    Without interleaving rank r runs pp − r − 1 warm-up forwards and one more before its
    first backward, each of its whole share: min(pp − r, m) of them
    (``forward_backward_pipelining_without_interleaving``). With vpp model chunks the
    schedule is replayed: 2·(pp − r − 1) + (vpp − 1)·pp warm-up chunk forwards (all of
    them when that reaches m·vpp), then forward k + warm-up and backward k in turn, the
    k-th forward running the schedule table's chunk (groups of pp micro-batches, chunk 0
    then chunk 1 …, ``get_schedule_table``) and the k-th backward freeing chunk
    vpp − 1 − that one's (``get_model_chunk_id(k, forward=False)``); the peak is the
    largest held after a forward, reached within the first 2·pp·vpp steady steps
    (megatron/core/pipeline_parallel/schedules.py l.811–831, l.846–872 and the 1F1B loop,
    NVIDIA/Megatron-LM core_v0.17.0). ``micro_batches`` None: enough to fill the
    pipeline."""
    held: list[tuple[int, int, int]] = []
    for rank, stages in enumerate(chunks):
        if vpp <= 1 or len(stages) <= 1:
            forwards = pp - rank if micro_batches is None else min(pp - rank, micro_batches)
            dense = sum(d for d, _ in stages) * forwards
            moe = sum(m for _, m in stages) * forwards
            held.append((dense, moe, forwards))
            continue
        total = (micro_batches if micro_batches is not None else 4 * pp) * vpp
        warmup = min(2 * (pp - rank - 1) + (vpp - 1) * pp, total)
        steady = min(total - warmup, 2 * pp * vpp + pp)
        order = tuple(_schedule_chunks(warmup + steady, pp, vpp, micro_batches or 4 * pp))
        best = _replay(stages, order, warmup, vpp, weights)
        held.append(best)
    return tuple(held)


def _replay(
    stages: tuple[tuple[int, int], ...],
    order: tuple[int, ...],
    warmup: int,
    vpp: int,
    weights: tuple[float, float],
) -> tuple[int, int, int]:
    """The largest (dense, MoE, forwards) held after a forward: ``warmup`` forwards, then
    each further forward followed by the backward of the forward ``warmup`` before it, which
    frees chunk vpp − 1 − that one's (the forwards' chunks are ``order``)."""
    dense = moe = alive = 0
    best, top = (0, 0, 0), -1.0
    for i, chunk in enumerate(order):
        d, m = stages[chunk]
        dense, moe, alive = dense + d, moe + m, alive + 1
        size = dense * weights[0] + moe * weights[1]
        if size > top:
            best, top = (dense, moe, alive), size
        if i >= warmup:  # the steady state: backward i − warmup after forward i
            d, m = stages[vpp - 1 - order[i - warmup]]
            dense, moe, alive = dense - d, moe - m, alive - 1
    return best


def _schedule_chunks(count: int, pp: int, vpp: int, micro_batches: int | None) -> Iterator[int]:
    """The model chunks of the first ``count`` forwards of megatron-core's interleaved
    schedule table: each group of pp micro-batches (the last group what is left) runs
    chunk 0, then chunk 1, … (``get_schedule_table``)."""
    total = None if micro_batches is None else micro_batches
    start = 0
    while count > 0:
        group = pp if total is None else min(pp, total - start)
        if group <= 0:
            return
        for chunk in range(vpp):
            for _ in range(group):
                if count <= 0:
                    return
                count -= 1
                yield chunk
        start += group


def _forward_activations(e: Engine) -> Term:
    """A forward pass without gradients (a ref, a teacher, ``recompute_logprob``)."""
    tokens, one_layer = e.tokens, e.forward_layer
    return Term(
        "activations",
        int(tokens * one_layer),
        f"forward only: one layer's working set, {tokens:,} tokens × {one_layer:,.0f} B",
    )


def _layers_text(dense: float, moe: float, per_token: dict[bool, tuple[float, str]]) -> str:
    parts = []
    if dense:
        parts.append(f"{dense:g} dense × {per_token[False][0]:,.0f} B [{per_token[False][1]}]")
    if moe:
        parts.append(f"{moe:g} MoE × {per_token[True][0]:,.0f} B [{per_token[True][1]}]")
    return " + ".join(parts)


def _logits(e: Engine, s: Stage, forward_only: bool) -> Term | None:
    """The whole vocabulary's logits on the last pipeline rank (a critic has none), by
    :func:`_logit_bytes`; None where there are none."""
    tokens, tp, vocab = e.tokens, e.parallel.tp_size, e.arch.vocab_size
    if not s.last or e.settings.critic:
        return None
    chunk = e.settings.lm_head_chunk
    if e.settings.logits == "areal_lm_head_chunks" and chunk is not None:
        # two chunks' float32 buffers at once, the micro-batch's tokens at most
        rows = min(tokens, 2 * chunk)
        logits = rows * (vocab / tp) * 4
        return Term(
            "logits",
            int(logits),
            f"min({tokens:,} tokens, 2 × {chunk:,}) = {rows:,} tokens × vocab {vocab:,}/t{tp} "
            f"× 4 B (AReaL LM head, megatron.lm_head_loss_chunk_size {chunk:,}: float32 "
            f"logits of one chunk and the previous one's"
            f"{', no gradient' if forward_only else ', recomputed in the backward'})",
        )
    per_logit, logits_text = _logit_bytes(
        e.settings.logits, e.megatron, tp, e.parallel.cp_size, forward_only
    )
    logits = tokens * (vocab / tp) * per_logit
    if not logits:
        return None
    return Term(
        "logits",
        int(logits),
        f"{tokens:,} tokens × vocab {vocab:,}/t{tp} × {per_logit} B ({logits_text})",
    )


def _logit_bytes(
    mode: str, megatron: bool, tp: int, cp: int, forward_only: bool
) -> tuple[int, str]:
    """:data:`areal_alloc.estimate.execution.LOGITS`: bytes per logit element of the
    rank's tokens at the loss's peak, and what holds them. The reference's figures
    (``areal``, ``areal_lm_head*``) are derived there from areal-project/AReaL@
    cbff54d645d2cd8ee1f1c358a82f3f473588433d and NVIDIA/Megatron-LM@core_v0.17.0;
    ``areal_lm_head_chunks`` is :func:`_logits`' own (a chunk term)."""
    reference = mode in ("areal", "areal_lm_head", "areal_lm_head_differentiable")
    if reference and megatron and forward_only:
        if cp > 1:
            # compute_logp gathers the c ranks' float32 logits
            # (packed_context_parallel.py l.236-268): c × 12 B over the rank's tokens,
            # and its own 4 B
            return 12 * cp + 4, (
                f"compute_logp gathers the c{cp} ranks' float32 logits: c{cp} × 12 B "
                f"(the ranks' list + the all-gather's flat buffer + the gathered copy) + "
                f"the rank's own 4 B; log-probs by chunks of 1,024 tokens, no gradient"
            )
        # unpad_logits copies them into a new tensor (data.py l.1063-1076)
        return 8, (
            "float32 logits + their unpadded copy (unpad_logits); log-probs by chunks "
            "of 1,024 tokens, no gradient"
        )
    if mode == "areal_lm_head" and cp > 1:
        return 4, (
            "AReaL LM head, megatron.enable_chunked_logits with entropy_requires_grad false: "
            "float32 logits reused in place as softmax and gradient"
        )
    if mode == "areal_lm_head":
        # the loss reuses the unpadded copy; the copy's backward (CopySlices) does not
        return 12, (
            "AReaL LM head, megatron.enable_chunked_logits with entropy_requires_grad false: "
            "the unpadded float32 copy reused in place as softmax and gradient, then the "
            "copy's backward: that gradient + its full-size copy + the padded logits' "
            "gradient"
        )
    if mode == "areal" and forward_only:
        return 2, "bf16 logits; log-probs by chunks of 1,024 tokens, no gradient"
    head = (
        "AReaL LM head, megatron.entropy_requires_grad true: no storage reuse, the loss as "
        "without the head: "
        if mode == "areal_lm_head_differentiable"
        else ""
    )
    if mode == "float32":
        return 12, "float32 cross-entropy: log-softmax, its gradient and nll's"
    if mode == "float32_logits":
        return 4, "float32 logits"
    if mode == "float32_compiled":
        return 4, "compiled float32 cross-entropy: bf16 logits + their bf16 gradient"
    if mode == "chunked_compiled":
        return 3, "chunked compiled cross-entropy: bf16 logits + one of 8 chunks upcast"
    if megatron and tp > 1:
        return 12, (
            f"{head}float32 softmax saved by chunk (the float32 logits freed) + float32 "
            f"gradient + one chunk's full-size slice-backward buffer"
        )
    if megatron:
        return 12, (
            f"{head}float32 logits held by the compiled log-softmax + float32 gradient + "
            f"one chunk's full-size slice-backward buffer"
        )
    if tp > 1:
        return 10, (
            "bf16 logits + float32 vocab-parallel softmax saved by chunk + bf16 gradient "
            "+ one chunk's full-size slice-backward buffer"
        )
    return 6, "bf16 logits + bf16 gradient + one chunk's slice gradient"


def _reserve(settings: TrainingSettings) -> Term:
    return Term(
        "reserve",
        settings.reserve_bytes,
        f"{readable_bytes(settings.reserve_bytes)} for the CUDA context, NCCL buffers "
        f"and fragmentation (--memory-reserve-gib)",
    )


def _backward_phase(e: Engine, terms: list[Term]) -> tuple[Term, ...]:
    """The backward (a forward-only engine's forward): every term, but the gradients of a
    torch engine's only micro-batch of a step.

    torch's optimizers set the gradients to None before a step (zero_grad's
    set_to_none=True default: AReaL's train_batch calls optimizer_zero_grad first,
    fsdp_engine.py line 781 at cbff54d6; torchtitan's train.py optimizers.zero_grad()
    at 9dec370a): a step's only micro-batch starts its backward without gradients,
    and they reach their size as its activations are freed (the optimizer step holds
    them all). Megatron's gradient buffer is allocated with the model.
    """
    groups = e.settings.groups(e.backend, e.parallel.pp_size)
    lone = groups == 1 and e.model.fsdp2 and not e.forward_only
    return tuple(t for t in terms if not (lone and t.name == "gradients"))


def _backward_end_phase(e: Engine, s: Stage, terms: list[Term]) -> tuple[Term, ...]:
    """The end of a torch engine's backward (FSDP2: fsdp, archon): every layer's
    gradients, the recomputed layers' checkpointed inputs, and the root module's
    gradients before their reduce-scatter.

    FSDP2 reduce-scatters a layer's gradients in the layer's post-backward, but the root
    module's (the embedding and the output layer, ``fully_shard(model)`` last,
    areal/engine/fsdp_utils/parallel.py at cbff54d6) only when the whole backward ends:
    till then the output layer's and the embedding's unsharded gradients, one each in
    the compute dtype (a tied weight gets both before they are summed), stay beside the
    others. Measured on the reference's FSDP engine (benchmarks/measurements.json
    ``reference_fsdp_allocated``, Qwen3-8B at 4,096 and 8,192 tokens, Llama-3.1-8B): the
    step's peak above what stays between steps is these gradients plus each layer's
    checkpointed input (2h a token), which torch's non-reentrant checkpoint keeps till
    then."""
    extra: list[Term] = []
    if e.settings.recompute != "none" and e.tokens:
        per_token = e.per_token
        checkpoints = e.tokens * (
            s.dense_layers * per_token[False][0] + s.moe_layers * per_token[True][0]
        )
        extra.append(
            Term(
                "activations",
                int(checkpoints),
                f"{e.tokens:,} tokens × each layer's checkpointed input, kept till the "
                f"backward ends: {_layers_text(s.dense_layers, s.moe_layers, per_token)}",
            )
        )
    if e.lora is None and s.ends:
        ends = s.ends / e.parallel.tp_size
        extra.append(
            Term(
                "root gradients",
                int(ends * e.compute),
                f"{short_count(ends)} embedding and output-layer parameters"
                + (f"/t{e.parallel.tp_size}" if e.parallel.tp_size > 1 else "")
                + f" × {e.compute} B: the root module's unsharded gradients, reduce-scattered "
                f"when the backward ends (FSDP2)",
            )
        )
    return (*_held(terms), *extra, *_reserve_of(terms))


def _forward_phase(e: Engine, s: Stage, terms: list[Term]) -> tuple[Term, ...]:
    """A forward before training (``recompute_logprob``, a critic's values): what is
    held (:func:`_optimizer_step_phase`), one layer's working set and the logits without
    gradients, at the forward's own micro-batch (``TrainingSettings.forward_tokens``)."""
    packed = e.settings.packed(e.backend, e.parallel.pp_size, forward=True)
    forward_tokens = math.ceil(packed / e.parallel.cp_size)
    if forward_tokens != e.tokens:
        e = replace(e, tokens=forward_tokens)
    logits = _logits(e, s, True)
    forward = (_forward_activations(e), *((logits,) if logits else ()))
    return (*_held(terms), *forward, *_reserve_of(terms))


def _optimizer_step_phase(terms: list[Term]) -> tuple[Term, ...]:
    """What stays between the phases (weights, gradients, optimizer states), and the
    reserve beside everything. The gradients too: FSDP frees them only at the start of
    the next update (train_batch calls optimizer_zero_grad first,
    areal/engine/fsdp_engine.py line 781 at cbff54d6), Megatron keeps its gradient
    buffer; a forward before the update finds the last step's there."""
    return (*_held(terms), *_reserve_of(terms))


def _held(terms: list[Term]) -> tuple[Term, ...]:
    return tuple(t for t in terms if t.name in _HELD)


def _reserve_of(terms: list[Term]) -> tuple[Term, ...]:
    return tuple(t for t in terms if t.name == "reserve")


def _load_phase(e: Engine, terms: list[Term]) -> tuple[tuple[Term, ...], int]:
    """The load phase's terms, and the bytes on the GPU once loaded (``at_load``).

    torch's AdamW creates its states at the first step, FSDP its gradients at the first
    backward; Megatron builds its gradient buffers and its optimizer's float32 main
    parameters with the model (megatron/core/optimizer/distrib_optimizer.py
    _build_model_and_main_param_groups,
    NVIDIA/Megatron-LM@001199898c4badd01eaf0785c212d8ed7ce83042) and its Adam or
    momentum states at the first step (TransformerEngine's FusedAdam.step: "if
    len(state) == 0: self.initialize_state(p, ...)", transformer_engine/pytorch/
    optimizers/fused_adam.py at NVIDIA/TransformerEngine@04912bf024514826f31cc02485d396974af68516).
    FSDP without ``memory_efficient_load`` peaks before sharding (:func:`fsdp_load_peak`).
    """
    if e.megatron:
        per_param, _ = megatron_state_bytes(e.settings)
        loaded = tuple(
            t
            if t.name != "optimizer"
            else Term(
                "optimizer",
                t.bytes * 4 // per_param,
                f"its float32 main params, 4 of the {per_param} B per parameter of "
                f"[{t.formula}]; the states come at the first step",
            )
            for t in _held(terms)
        )
    else:
        loaded = tuple(t for t in terms if t.name == "weights")
    at_load = sum(t.bytes for t in loaded)
    if e.model.fsdp_engine and not e.settings.memory_efficient_load:
        return (fsdp_load_peak(e), *_reserve_of(terms)), at_load
    return (*loaded, *_reserve_of(terms)), at_load
