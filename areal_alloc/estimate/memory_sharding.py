"""A training engine's weights, gradients and optimizer states on one GPU, sharded the
way each of the reference's backends shards them, one function per quantity:

- Megatron (distributed optimizer): :func:`_megatron_weights`,
  :func:`_megatron_gradients`, :func:`_megatron_optimizer`;
- FSDP and archon (FSDP2): their sharding (:func:`_fsdp_shard`, :func:`_archon_shard`),
  then :func:`_sharded_weights`, :func:`_sharded_gradients`, :func:`_sharded_optimizer`;
- FSDP's load without ``memory_efficient_load`` (:func:`fsdp_load_peak`).

``memory_training`` composes them with the activations, the logits and the phases.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from areal_alloc.architecture import Architecture, ParameterCount
from areal_alloc.estimate.backends import TrainingModel, training_model
from areal_alloc.estimate.execution import TrainingSettings, fsdp_keeps_mlp_whole
from areal_alloc.estimate.memory import Term, dtype_bytes, short_count
from areal_alloc.estimate.pipeline_split import PipelineSplit, engine_split
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "Adapters",
    "Engine",
    "LayerAdapters",
    "Stage",
    "fsdp_load_peak",
    "megatron_state_bytes",
    "pipeline_ranks",
    "stage",
    "states",
]


@dataclass(frozen=True, slots=True)
class Adapters:
    """LoRA adapter parameters on one pipeline rank, before any sharding."""

    tensor: float  # split by t (attention, dense and shared MLPs, routers)
    experts: float  # routed experts' adapters, split by etp·ep
    text: str


@dataclass(frozen=True, slots=True)
class LayerAdapters:
    """LoRA adapter parameters of one layer of each kind, before any sharding."""

    dense: float  # one dense layer's, split by t
    moe: float  # one MoE layer's split by t (attention, shared experts, router)
    experts: float  # one MoE layer's routed experts', split by etp·ep
    text: str

    def on(self, dense_layers: int, moe_layers: int) -> Adapters:
        """The adapters of ``dense_layers`` dense and ``moe_layers`` MoE layers."""
        return Adapters(
            self.dense * dense_layers + self.moe * moe_layers,
            self.experts * moe_layers,
            self.text,
        )


@dataclass(frozen=True, slots=True)
class Engine:
    """What every term of one training engine reads."""

    key: str
    backend: str
    arch: Architecture
    p: ParameterCount  # a critic's output layer is its value head of h parameters
    parallel: ParallelStrategy
    settings: TrainingSettings
    compute: int  # bytes per element of ``settings.dtype``
    tokens: int  # of one micro-batch on one GPU, after the context-parallel split
    #: activation bytes per token of a dense (False) and a MoE (True) layer, and how
    per_token: dict[bool, tuple[float, str]]
    forward_layer: float  # bytes per token of one layer's working set without gradients
    lora: LayerAdapters | None  # None: every parameter trains (or none: forward only)
    #: the pipeline split (:func:`pipeline_ranks`; None: pp == 1) and each pipeline
    #: rank's (dense, MoE) decoder layers
    split: PipelineSplit | None
    rank_layers: tuple[tuple[int, int], ...]

    @property
    def model(self) -> TrainingModel:
        """The backend's row of the estimates' table (``estimate.backends``)."""
        return training_model(self.backend)

    @property
    def megatron(self) -> bool:
        return self.model.sharding == "megatron"

    @property
    def forward_only(self) -> bool:
        """No optimizer: a ref, a teacher."""
        return self.settings.optimizer is None


@dataclass(frozen=True, slots=True)
class Stage:
    """One pipeline rank's parameters, before and after the tensor and expert splits."""

    rank: int
    pp: int
    dense_layers: int
    moe_layers: int
    tensor: float  # split by t
    replicated: float  # norms, routers, the final norm (and MLPs FSDP keeps whole)
    experts: float  # routed experts
    ends: float  # of ``tensor``: the embedding and the output layer on this rank
    lora: Adapters | None  # the rank's LoRA adapters
    where: str
    on_gpu: float  # after the tensor (and, but for FSDP, the expert) split
    shard_text: str

    @property
    def first(self) -> bool:
        """Holds the embedding."""
        return self.rank == 0

    @property
    def last(self) -> bool:
        """Holds the output layer, the final norm, the logits and the loss."""
        return self.rank == self.pp - 1


@lru_cache(maxsize=1024)
def pipeline_ranks(
    backend: str, arch: Architecture, pp: int, vpp: int, ep: int, rule: str
) -> tuple[PipelineSplit | None, tuple[tuple[int, int], ...]]:
    """The engine's pipeline split (``pipeline_split.engine_split``: the reference's
    parameter-balanced split for its Megatron engine, megatron-core's even split
    otherwise; None for pp == 1) and each rank's (dense, MoE) decoder layers, MoE ones
    being those from ``first_dense_layers`` on in a model with experts."""
    split = engine_split(backend, arch, pp, vpp, ep, rule=rule)
    if split is None:
        return None, ((arch.dense_layer_count, arch.moe_layer_count),)
    layers = []
    for rank in range(pp):
        moe = split.moe_layers_of(rank, arch.first_dense_layers, arch.is_moe)
        layers.append((split.layers_of(rank) - moe, moe))
    return split, tuple(layers)


@lru_cache(maxsize=4096)
def _share(split: PipelineSplit, rank: int) -> str:
    """``pipeline rank r of p: its share, the rule``."""
    return f"pipeline rank {rank} of {split.pp}: {split.describe(rank)}, {split.rule}"


def stage(e: Engine, rank: int = 0) -> Stage:
    """Pipeline rank ``rank``'s parameters: its decoder layers (:func:`pipeline_ranks`),
    the embedding on rank 0, the output layer and the final norm on rank pp − 1; Megatron
    and archon split the experts over etp·ep, FSDP splits them by t like the rest, but for
    the model types whose MLPs its plan leaves whole (``fsdp_keeps_mlp_whole``)."""
    p, pp, tp = e.p, e.parallel.pp_size, e.parallel.tp_size
    ep, etp = e.parallel.ep_size, e.parallel.etp_size
    dense_l, moe_l = e.rank_layers[rank]
    tp_part = float(
        (p.attention + p.dense_mlp) * dense_l + (p.attention + p.shared_experts) * moe_l
    )
    rep = float(p.norms * (dense_l + moe_l) + p.router * moe_l)
    exp = float(p.routed_experts * moe_l)
    whole = ""
    if tp > 1 and fsdp_keeps_mlp_whole(e.backend, e.arch.model_type):
        # its MLP blocks stay whole on every tensor-parallel rank (execution.py)
        mlps = float(p.dense_mlp * dense_l + p.shared_experts * moe_l) + exp
        tp_part -= mlps - exp
        rep += mlps
        exp = 0.0
        whole = f", the {e.arch.model_type} MLPs whole: the reference's FSDP plan leaves them"
    ends = 0.0
    if e.split is None:
        ends = float(p.embedding + p.output)
        rep += p.final_norm
        where = "all layers, embedding" + (", output layer" if p.output else " (tied output)")
    else:
        if rank == 0:
            ends += p.embedding
        if rank == pp - 1:
            ends += p.output or p.embedding  # a tied output keeps a copy on the last stage
            rep += p.final_norm
        where = _share(e.split, rank)
    tp_part += ends
    if e.model.sharding in ("megatron", "archon"):  # experts split over etp·ep
        on_gpu = tp_part / tp + rep + exp / (etp * ep)
        shard_text = (
            f"({short_count(tp_part)}/t{tp} + {short_count(rep)} replicated"
            + (f" + {short_count(exp)} experts/(etp{etp}·ep{ep})" if exp else "")
            + ")"
        )
    else:
        on_gpu = (tp_part + exp) / tp + rep
        shard_text = f"({short_count(tp_part + exp)}/t{tp} + {short_count(rep)} replicated{whole})"
    lora = None if e.lora is None else e.lora.on(dense_l, moe_l)
    return Stage(rank, pp, dense_l, moe_l, tp_part, rep, exp, ends, lora, where, on_gpu, shard_text)


def states(e: Engine, s: Stage) -> list[Term]:
    """The stage's weights and, for an engine that trains, its gradients and optimizer
    states on one GPU (with ``offload_params`` only the gathered weights)."""
    if e.megatron:
        if e.forward_only:
            return [_megatron_weights(e, s)]
        return [_megatron_weights(e, s), _megatron_gradients(e, s), _megatron_optimizer(e, s)]
    shard = _fsdp_shard(e, s) if e.model.sharding == "fsdp" else _archon_shard(e, s)
    if e.forward_only or e.settings.offload_params:
        return [_sharded_weights(e, shard)]
    return [_sharded_weights(e, shard), _sharded_gradients(e, shard), _sharded_optimizer(e, shard)]


# --- Megatron -------------------------------------------------------------------------------


def _megatron_weights(e: Engine, s: Stage) -> Term:
    """Megatron (areal/engine/megatron_engine.py with megatron-core's distributed
    optimizer) keeps its weights in ``dtype``: tensor-parallel blocks split by t, routed
    experts by etp·ep; with LoRA a frozen base and the adapters beside it."""
    compute, dtype, tp = e.compute, e.settings.dtype, e.parallel.tp_size
    if s.lora is None:
        return Term(
            "weights",
            int(s.on_gpu * compute),
            f"{s.shard_text} params on this GPU [{s.where}] × {compute} B ({dtype})",
        )
    dense, experts = _megatron_adapters(e, s.lora)
    adapters = dense + experts
    return Term(
        "weights",
        int((s.on_gpu + adapters) * compute),
        f"frozen {s.shard_text} params on this GPU [{s.where}] + {short_count(adapters)} "
        f"LoRA adapter params ({s.lora.text}, /t{tp}) × {compute} B ({dtype})",
    )


def _megatron_gradients(e: Engine, s: Stage) -> Term:
    """float32 main gradients (``main_grads_dtype``) of what trains."""
    if s.lora is None:
        return Term(
            "gradients",
            int(s.on_gpu * 4),
            f"{short_count(s.on_gpu)} params × 4 B (float32 main gradients)",
        )
    dense, experts = _megatron_adapters(e, s.lora)
    adapters = dense + experts
    return Term(
        "gradients",
        int(adapters * 4),
        f"{short_count(adapters)} adapter params × 4 B (float32 main gradients; the base is "
        f"frozen)",
    )


def _megatron_optimizer(e: Engine, s: Stage) -> Term:
    """The float32 main parameters and the two Adam states (:func:`megatron_state_bytes`)
    of what trains. megatron-core's distributed optimizer shards them over its
    dp_cp_group, data and context parallel together (get_megatron_optimizer in
    megatron/core/optimizer/__init__.py, megatron-core 0.16.1), the experts' over
    expert-dp = world/(etp·ep·p): the same counting as megatron-core's ``6 + 12/dp``
    bytes per parameter (megatron/training/theoretical_memory_usage.py)."""
    tp, pp, dp, cp = e.parallel.tp_size, e.parallel.pp_size, e.parallel.dp_size, e.parallel.cp_size
    ep, etp, world = e.parallel.ep_size, e.parallel.etp_size, e.parallel.world_size
    distributed = e.settings.distributed_optimizer
    per_param, states = megatron_state_bytes(e.settings)
    edp = world // (etp * ep * pp) if (ep > 1 or etp > 1) else dp * cp
    over = f"dp{dp}·cp{cp}" if cp > 1 else f"dp{dp}"
    if s.lora is not None:
        dense, experts = _megatron_adapters(e, s.lora)
        adapters = dense + experts
        opt = dense * per_param / (dp * cp) + experts * per_param / edp
        text = f"{short_count(adapters)} adapter params × {per_param} B ({states})"
        if not distributed:
            return Term("optimizer", int(adapters * per_param), f"{text} not distributed")
        return Term("optimizer", int(opt), f"{text} / {over}")
    if not distributed:
        return Term(
            "optimizer",
            int(s.on_gpu * per_param),
            f"{short_count(s.on_gpu)} params × {per_param} B ({states}), not distributed",
        )
    dense, experts = s.tensor / tp + s.replicated, s.experts / (etp * ep)
    opt = dense * per_param / (dp * cp) + experts * per_param / edp
    text = f"{short_count(dense)} params × {per_param} B ({states}) / {over}" + (
        f" + {short_count(experts)} expert params × {per_param} B / expert-dp{edp} "
        f"(world {world}/(etp{etp}·ep{ep}·p{pp}))"
        if experts
        else ""
    )
    return Term("optimizer", int(opt), text)


def _megatron_adapters(e: Engine, lora: Adapters) -> tuple[float, float]:
    """The adapters on one GPU: (split by t, the experts' split by etp·ep)."""
    return lora.tensor / e.parallel.tp_size, lora.experts / (
        e.parallel.etp_size * e.parallel.ep_size
    )


def megatron_state_bytes(settings: TrainingSettings) -> tuple[int, str]:
    """Bytes per parameter of Megatron's optimizer: float32 main params and two Adam
    states (bfloat16 ones with the precision-aware optimizer); SGD keeps one momentum
    buffer (megatron-core's ``sgd_momentum`` = 0.9)."""
    if settings.optimizer == "sgd":
        return 8, "float32 main params + momentum"
    if settings.optimizer == "adam_bf16" or settings.precision_aware_optimizer:
        return 8, "float32 main params + 2 bfloat16 Adam states"
    return 12, "float32 main params + 2 float32 Adam states"


# --- FSDP and archon ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Shard:
    """A fully sharded (FSDP2) engine's stage on one GPU, as it stores it. Gradients and
    AdamW states are in the parameters' dtype; with LoRA only the adapters have them."""

    storage_name: str
    storage: int  # bytes per stored parameter
    params: float  # the stage's parameters on this GPU
    adapters: float  # LoRA's adapters on this GPU, stored like the base (0: no LoRA)
    lora: bool
    where: str
    root: float  # the rank's embedding and output layer, gathered whole (after the t split)

    @property
    def trained(self) -> float:
        return self.adapters if self.lora else self.params


def _fsdp_shard(e: Engine, s: Stage) -> _Shard:
    """FSDP (areal/engine/fsdp_engine.py): parameters stored in ``optimizer_dtype``,
    sharded over dp·cp after the tensor-parallel split (experts split by t too)."""
    tp, dp, cp = e.parallel.tp_size, e.parallel.dp_size, e.parallel.cp_size
    storage = dtype_bytes(e.settings.optimizer_dtype, f"{e.key}.optimizer_dtype")
    sharded = ((s.tensor + s.experts) / tp + s.replicated) / (dp * cp)
    lora = s.lora
    adapters = 0.0
    if lora is not None:
        # the routed experts' adapters stay whole where FSDP keeps the MLPs whole (their
        # shared-expert and dense-MLP adapters, a small part, are taken as split)
        whole = fsdp_keeps_mlp_whole(e.backend, e.arch.model_type)
        experts = lora.experts if whole else lora.experts / tp
        adapters = (lora.tensor / tp + experts) / (dp * cp)
    where = f"{s.shard_text}/(dp{dp}·cp{cp})" + _on_rank(e, s)
    return _Shard(
        e.settings.optimizer_dtype, storage, sharded, adapters, lora is not None, where, s.ends / tp
    )


def _archon_shard(e: Engine, s: Stage) -> _Shard:
    """Archon (areal/experimental/engine/archon_engine.py, FSDP2 over its dp_shard mesh
    after the pipeline, tensor and expert splits): parameters stored in ``dtype`` (the
    model is created in it), expert parameters sharded over expert-dp = world/(etp·ep·p)."""
    tp, dp, cp, pp = e.parallel.tp_size, e.parallel.dp_size, e.parallel.cp_size, e.parallel.pp_size
    ep, etp = e.parallel.ep_size, e.parallel.etp_size
    edp = e.parallel.world_size // (etp * ep * pp)
    sharded = (s.tensor / tp + s.replicated) / (dp * cp) + s.experts / (etp * ep) / edp
    lora = s.lora
    adapters = (
        0.0 if lora is None else lora.tensor / tp / (dp * cp) + lora.experts / (etp * ep) / edp
    )
    where = (
        f"{s.shard_text} sharded over dp{dp}·cp{cp}"
        + (f" (experts over expert-dp{edp})" if s.experts else "")
        + _on_rank(e, s)
    )
    return _Shard(
        e.settings.dtype, e.compute, sharded, adapters, lora is not None, where, s.ends / tp
    )


def _on_rank(e: Engine, s: Stage) -> str:
    """`` [pipeline rank r of p: its share]`` with pipeline parallelism."""
    return f" [{s.where}]" if e.split is not None else ""


def _gathered_layer(e: Engine) -> float:
    """The largest decoder layer one GPU gathers at once: split by t, but for the MLPs the
    reference's FSDP plan keeps whole (``fsdp_keeps_mlp_whole``)."""
    p, tp = e.p, e.parallel.tp_size
    if tp == 1 or not fsdp_keeps_mlp_whole(e.backend, e.arch.model_type):
        return p.largest_layer / tp
    dense = (p.attention + p.norms) / tp + p.dense_mlp if p.dense_layers else 0.0
    moe = p.attention / tp + p.norms + p.shared_experts + p.routed_experts + p.router
    return max(dense, moe if p.moe_layers else 0.0)


def _sharded_weights(e: Engine, shard: _Shard) -> Term:
    """The stored shard, and the gathered root module (the rank's embedding and output
    layer) and two decoder layers (the current one and the prefetched next) in ``dtype``."""
    compute = e.compute
    gathered = shard.root + 2 * _gathered_layer(e)
    if e.settings.offload_params:
        return Term(
            "weights",
            int(gathered * compute),
            f"offload_params: parameters live on the CPU; gathered root + 2 layers "
            f"{short_count(gathered)} × {compute} B",
        )
    storage, lora = shard.storage, e.lora
    return Term(
        "weights",
        int((shard.params + shard.adapters) * storage + gathered * compute),
        f"{'frozen ' if lora is not None else ''}{shard.where} × {storage} B "
        f"({shard.storage_name} storage)"
        + (
            f" + {short_count(shard.adapters)} LoRA adapter params ({lora.text}) × {storage} B"
            if lora is not None
            else ""
        )
        + f" + gathered root and 2 layers {short_count(gathered)} × {compute} B "
        f"({e.settings.dtype})",
    )


def _sharded_gradients(e: Engine, shard: _Shard) -> Term:
    """The gradients of what trains, in the parameters' dtype; with the optimizer in the
    backward, one parameter's at a time."""
    storage, name = shard.storage, shard.storage_name
    if e.settings.optimizer_in_backward and not shard.lora:
        # stepped and freed as each is ready: the largest one's gradient, the embedding's
        tp, dp, cp = e.parallel.tp_size, e.parallel.dp_size, e.parallel.cp_size
        largest = max(e.p.embedding, e.p.output) / tp / (dp * cp)
        return Term(
            "gradients",
            int(largest * storage),
            f"optimizer in the backward: one parameter's gradient at a time, the largest "
            f"{short_count(largest)} × {storage} B ({name})",
        )
    what = "adapter params (the base is frozen)" if shard.lora else "params"
    return Term(
        "gradients",
        int(shard.trained * storage),
        f"{short_count(shard.trained)} {what} × {storage} B ({name})",
    )


def _sharded_optimizer(e: Engine, shard: _Shard) -> Term:
    """AdamW's two states in the parameters' dtype (AnyPrecisionAdamW's in bfloat16),
    none for SGD."""
    storage, optimizer = shard.storage, e.settings.optimizer or "adam"
    state_bytes = {"adam": 2 * storage, "adam_bf16": 4, "sgd": 0}[optimizer]
    name = {
        "adam": f"AdamW: 2 states × {storage} B",
        "adam_bf16": "AnyPrecisionAdamW: 2 bfloat16 states",
        "sgd": "SGD without momentum: no state",
    }[optimizer]
    what = "adapter params" if shard.lora else "params"
    if e.model.fsdp_engine and e.settings.per_layer_optim_step and shard.params > 0:
        return _streamed_optimizer(e, shard, state_bytes, name, what)
    return Term(
        "optimizer",
        int(shard.trained * state_bytes),
        f"{short_count(shard.trained)} {what} × {state_bytes} B ({name})",
    )


def _streamed_optimizer(e: Engine, shard: _Shard, state_bytes: int, name: str, what: str) -> Term:
    """``fsdp.per_layer_optim_step``: the states stay on the CPU, and the step brings one
    FSDP module's (a decoder layer, the embedding, the final norm and output layer) to the
    GPU at a time with ``optim_prefetch_layers`` more in flight (``PerLayerOptimWrapper``,
    areal/engine/fsdp_utils/optimizer.py l.323-470 at cbff54d6): its ``step`` prefetches
    module i + prefetch + 1 before it frees module i (l.611-627), so at most prefetch + 2 of
    the largest module's shard, counted in every phase (an upper bound outside the step)."""
    in_flight = 2 + e.settings.optim_prefetch_layers
    tp, p = e.parallel.tp_size, e.p
    largest = max(_gathered_layer(e), p.embedding / tp, p.output / tp)  # a tied output: none
    group = largest / (e.parallel.dp_size * e.parallel.cp_size)
    held = shard.trained * min(1.0, in_flight * group / shard.params)
    return Term(
        "optimizer",
        int(held * state_bytes),
        f"per_layer_optim_step: {short_count(shard.trained)} {what}' states on the CPU; "
        f"{in_flight} module{'s' if in_flight > 1 else ''} of at most {short_count(group)} "
        f"params on this GPU at a time → {short_count(held)} {what} × {state_bytes} B ({name})",
    )


def fsdp_load_peak(e: Engine) -> Term:
    """FSDP's load with ``fsdp.memory_efficient_load: false``.

    Every rank builds the whole model on its own GPU, in ``optimizer_dtype``,
    before ``parallelize_model`` shards it (areal/engine/fsdp_engine.py
    _create_device_model: ``loading_device = current_platform.device_type`` unless
    memory_efficient_load, ``dtype = optimizer_dtype``; reference commit cbff54d6).
    With memory_efficient_load rank 0 loads on the CPU and broadcasts after sharding.
    """
    key, settings, lora = e.key, e.settings, e.lora
    storage = dtype_bytes(settings.optimizer_dtype, f"{key}.optimizer_dtype")
    whole = None if lora is None else lora.on(e.p.dense_layers, e.p.moe_layers)
    params = e.p.total + (0 if whole is None else whole.tensor + whole.experts)
    return Term(
        "load",
        int(params * storage),
        f"{short_count(params)} params × {storage} B ({settings.optimizer_dtype}): every rank "
        f"builds the whole model on its GPU before sharding "
        f"({key}.fsdp.memory_efficient_load=false)",
    )
