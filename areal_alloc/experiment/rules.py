"""Every rule the reference enforces from the config alone before it spends GPU time.

Each rule is one function returning the message of the first violation (or
None), and one row of :data:`RULES` naming the reference's file that enforces
it; all were read from areal-project/AReaL at ``REFERENCE_COMMIT``
(cbff54d645d2cd8ee1f1c358a82f3f473588433d). :func:`check_startup` runs them in
the reference's order and raises the first violation; :func:`startup_warnings`
names what only one of the reference's launch paths refuses.

Rules read the experiment's one reading (:class:`areal_alloc.experiment.records.Experiment`):
its engines (key, backend key, allocation, ``offload``, ``_version``, settings), its run
shape, and the keys only a rule needs (``enable_offload``, ``weight_update_mode``,
``scheduler.type``, ``dynamic_bs``, ``rollout.agent.mode`` …) as the typed
:class:`~areal_alloc.experiment.records.StartupConfig` with the reference's defaults
(``areal_alloc.defaults``); never the raw config.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from areal_alloc.defaults import PROX_LOGP_METHODS
from areal_alloc.errors import AllocationValidationError, shown
from areal_alloc.model_shape import even_split_builds, minibatch_micro_batches

if TYPE_CHECKING:
    from areal_alloc.architecture import Architecture
    from areal_alloc.experiment.records import Engine, Experiment, StartupConfig, TrainConfig


__all__ = ["RULES", "Rule", "Run", "check_startup", "startup_warnings"]


@dataclass(frozen=True, slots=True)
class Run:
    """What the rules read: the experiment, its engines as planned, and the node size."""

    experiment: Experiment
    n_gpus_per_node: int

    @property
    def startup(self) -> StartupConfig:
        return self.experiment.startup

    @property
    def engines(self) -> tuple[Engine, ...]:
        return self.experiment.engines

    def engine(self, key: str) -> Engine | None:
        for engine in self.engines:
            if engine.key == key:
                return engine
        return None

    def backend(self, key: str) -> str | None:
        engine = self.engine(key)
        return engine.allocation.backend if engine is not None else None

    def version(self, key: str) -> str | None:
        """``<key>._version`` (the reference's default v1), None without the engine."""
        engine = self.engine(key)
        return engine.version if engine is not None else None


@dataclass(frozen=True, slots=True)
class Rule:
    """One start-up rule of the reference: what it says, where it lives, and its check."""

    name: str
    source: str  # the reference's file (and function) that enforces it, at REFERENCE_COMMIT
    check: Callable[[Run], str | None]


# --- areal/trainer/rl_trainer.py: PPOTrainer._init_impl and _validate_cfg -----------------------
# Read at AReaL cbff54d6, lines 150-175 (which engines offload) and 1465-1530 (_validate_cfg).
# They run for RL configs only: the RL trainer parses rollout.backend first.


def _colocation(run: Run) -> str | None:
    """``rollout.scheduling_strategy.target='actor'`` (or the reverse) as written, else None.

    rl_trainer._is_actor_rollout_colocated: either engine's colocation targets the other.
    """
    for key, other in (("rollout", "actor"), ("actor", "rollout")):
        engine = run.engine(key)
        strategy = engine.allocation.scheduling_strategy if engine is not None else None
        if strategy is not None and strategy.is_colocated and strategy.target == other:
            return f"{key}.scheduling_strategy.target={other!r}"
    return None


def _is_v1_awex(run: Run) -> bool:
    # rl_trainer._is_v1_awex_colocate: actor._version == "v1" and weight_update_mode == "awex"
    return run.experiment.awex_v1


def _rl(run: Run) -> bool:
    return run.startup.rl  # records.StartupConfig.rl: a rollout and an actor


def offload_needs_enable_offload(run: Run) -> str | None:
    """Colocated actor and rollout, or any engine's ``offload``, need ``enable_offload: true``."""
    if not _rl(run) or run.startup.enable_offload:
        return None
    reasons = []
    colocated = _colocation(run)
    awex = _is_v1_awex(run)  # the awex adapter hands the GPUs over itself
    if colocated and not awex:
        reasons.append(f"actor and rollout are colocated ({colocated})")
    actor = run.engine("actor")
    if actor is not None and actor.offload and not awex:
        reasons.append("actor.offload=true")
    for key in ("critic", "ref", "teacher"):
        engine = run.engine(key)
        if engine is not None and engine.offload:
            reasons.append(f"{key}.offload=true")
    if not reasons:
        return None
    return (
        f"enable_offload is false but {' and '.join(reasons)}, so the reference offloads "
        f"between rollout and training and will not start without it: set enable_offload=true "
        f"(the run then needs torch_memory_saver, e.g. preloaded with LD_PRELOAD)"
    )


def colocation_needs_disk_or_awex(run: Run) -> str | None:
    """Colocated actor and rollout hand weights over by disk or awex only."""
    colocated = _colocation(run) if _rl(run) else None
    mode = run.experiment.update_mode
    if colocated is None or mode in ("disk", "awex"):
        return None
    written = run.experiment.weight_update_mode
    default = "" if written is not None else " (the reference's default)"
    return (
        f"actor.weight_update_mode={mode!r}{default} with actor and rollout colocated "
        f"({colocated}): colocated engines update weights through disk or awex only; set "
        f"actor.weight_update_mode=disk (or awex, with a megatron actor and an sglang rollout)"
    )


def awex_needs_megatron_actor(run: Run) -> str | None:
    actor = run.engine("actor")
    if (
        not _rl(run)
        or not _is_v1_awex(run)
        or actor is None
        or actor.allocation.backend == "megatron"
    ):
        return None
    return (
        f"actor.weight_update_mode='awex' needs a megatron actor, but "
        f"{actor.backend_key}={actor.spec!r}: train with megatron:… or set "
        f"actor.weight_update_mode=disk or xccl"
    )


def awex_needs_sglang_rollout(run: Run) -> str | None:
    rollout = run.engine("rollout")
    if not _rl(run) or not _is_v1_awex(run) or rollout is None:
        return None
    if rollout.allocation.backend == "sglang":
        return None
    return (
        f"actor.weight_update_mode='awex' needs an sglang rollout, but "
        f"{rollout.backend_key}={rollout.spec!r}: serve with sglang:… or set "
        f"actor.weight_update_mode=disk or xccl"
    )


def vllm_cannot_return_routed_experts(run: Run) -> str | None:
    rollout = run.engine("rollout")
    if rollout is None or rollout.allocation.backend != "vllm":
        return None
    if not run.startup.return_routed_experts:
        return None
    return (
        f"rollout.return_routed_experts=true needs an sglang rollout, but "
        f"{rollout.backend_key}={rollout.spec!r}: set rollout.return_routed_experts=false "
        f"or serve with sglang:…"
    )


def megatron_lora_cannot_update_sglang(run: Run) -> str | None:
    if not _rl(run) or run.backend("actor") != "megatron" or run.backend("rollout") != "sglang":
        return None
    actor = run.engine("actor")
    if actor is None or actor.training is None or not actor.training.use_lora:
        return None
    return (
        "actor.use_lora=true with a megatron actor cannot update an sglang rollout "
        "(the reference's RL trainer refuses it): serve with vllm:…, set actor.use_lora=false, "
        "or train with fsdp:…"
    )


def megatron_lora_needs_megatron_bridge(run: Run) -> str | None:
    """A Megatron engine with ``use_lora`` builds through megatron-bridge only.

    areal/engine/megatron_engine.py MegatronEngine.__init__ (line 475 at cbff54d6):
    ``NotImplementedError: MegatronEngine LoRA POC currently only supports
    bridge_type='megatron-bridge'`` when ``use_lora`` and ``megatron.bridge_type`` is
    the default ``mbridge`` (MegatronEngineConfig.bridge_type, areal/api/cli_args.py).
    """
    for engine in run.engines:
        training = engine.training
        if (
            not engine.active
            or engine.allocation.backend != "megatron"
            or training is None
            or not training.use_lora
            or training.bridge_type == "megatron-bridge"
        ):
            continue
        return (
            f"{engine.path}.use_lora=true with {engine.backend_key}={engine.spec!r} needs "
            f"{engine.path}.megatron.bridge_type='megatron-bridge', got "
            f"{training.bridge_type!r}: the reference's Megatron engine builds LoRA through "
            f"megatron-bridge only; set {engine.path}.megatron.bridge_type=megatron-bridge"
        )
    return None


def megatron_vpp_needs_a_bridge(run: Run) -> str | None:
    """Virtual pipeline stages need one of the two bridges.

    With a ``megatron.bridge_type`` other than mbridge or megatron-bridge the Megatron engine
    builds no bridge (MegatronEngine._build_hf_mcore_bridge l.793-798) and the model itself,
    and areal/models/mcore/registry.py make_mcore_model (l.528-536 at cbff54d6) raises
    ``NotImplementedError("Virtual pipeline parallelism requires mbridge-backed models.")``
    when ``megatron.virtual_pipeline_parallel_size`` > 1. MegatronEngineConfig.bridge_type
    lists its two choices only as help metadata: the loader takes any text.
    """
    for engine in run.engines:
        training = engine.training
        if (
            not engine.active
            or engine.allocation.backend != "megatron"
            or training is None
            or training.bridge_type in BRIDGES
            or (training.virtual_pipeline_size or 1) <= 1
        ):
            continue
        path = engine.path
        return (
            f"{path}.megatron.bridge_type={shown(training.bridge_type)} with {path}.megatron."
            f"virtual_pipeline_parallel_size={training.virtual_pipeline_size}: without mbridge or "
            f"megatron-bridge the Megatron engine builds {engine.backend_key}={engine.spec!r} "
            f"itself and raises 'Virtual pipeline parallelism requires mbridge-backed models.' "
            f"(areal/models/mcore/registry.py make_mcore_model); set {path}.megatron.bridge_type="
            f"mbridge (the reference's default) or megatron-bridge, or {path}.megatron."
            f"virtual_pipeline_parallel_size=1"
        )
    return None


# --- the Megatron engine's MoE token dispatcher, as mbridge builds megatron-core's config ------
# With ``megatron.bridge_type`` mbridge (the reference's default), MegatronEngine.
# _build_hf_mcore_bridge (areal/engine/megatron_engine.py l.716-750 at cbff54d6) hands
# ``moe_token_dispatcher_type`` and, when true, ``moe_enable_deepep`` to the bridge
# (``set_extra_args``, kept when TransformerConfigClass has the field), for a dense model as for
# a MoE one. mbridge (ISEEKYAN/mbridge@310e8fb, the commit the reference's pyproject.toml pins)
# rebuilds its config at once: Bridge.set_extra_args → LLMBridge._build_base_config, which sets
# ``variable_seq_lengths=True``, applies the extra args last and calls megatron-core's
# TransformerConfig (mbridge/core/bridge.py l.538-546, mbridge/core/llm_bridge.py l.29, 79,
# 98-109), whose __post_init__ (megatron-core 0.17.0, megatron/core/transformer/
# transformer_config.py, NVIDIA/Megatron-LM core_v0.17.0) raises outside any MoE-only block.
# With megatron-bridge, areal/models/mcore/registry.py make_mcore_model (l.474-481) sets
# ``moe_token_dispatcher_type='alltoall'`` whatever the config says and passes no
# ``moe_enable_deepep``: nothing is refused (startup_warnings says what is ignored).


#: ``megatron.bridge_type``'s two builders (MegatronEngineConfig.bridge_type, areal/api/
#: cli_args.py, AReaL cbff54d6)
BRIDGES = ("mbridge", "megatron-bridge")


def _megatron_engines(
    run: Run, bridges: tuple[str, ...] = BRIDGES
) -> list[tuple[Engine, TrainConfig]]:
    """The active Megatron engines one of ``bridges`` builds, with their settings."""
    out = []
    for engine in run.engines:
        training = engine.training
        if (
            engine.active
            and engine.allocation.backend == "megatron"
            and training is not None
            and training.bridge_type in bridges
        ):
            out.append((engine, training))
    return out


def _mbridge_engines(run: Run) -> list[tuple[Engine, TrainConfig]]:
    """The active Megatron engines mbridge builds, with their settings."""
    return _megatron_engines(run, ("mbridge",))


def megatron_deepep_needs_flex(run: Run) -> str | None:
    """``moe_enable_deepep`` needs the flex dispatcher (transformer_config.py l.1230-1232)."""
    for engine, training in _mbridge_engines(run):
        if not training.moe_enable_deepep or training.token_dispatcher == "flex":
            continue
        path = engine.path
        return (
            f"{path}.megatron.moe_enable_deepep=true with {path}.megatron."
            f"moe_token_dispatcher_type={shown(training.token_dispatcher)}: megatron-core's "
            f"TransformerConfig raises 'DeepEP backend is only supported with flex token "
            f"dispatcher.' when mbridge builds {engine.backend_key}={engine.spec!r}; set "
            f"{path}.megatron.moe_token_dispatcher_type=flex or "
            f"{path}.megatron.moe_enable_deepep=false"
        )
    return None


def mbridge_allgather_needs_fixed_lengths(run: Run) -> str | None:
    """allgather refuses mbridge's ``variable_seq_lengths=True`` (transformer_config.py l.2056)."""
    for engine, training in _mbridge_engines(run):
        if training.token_dispatcher != "allgather":
            continue
        path = engine.path
        return (
            f"{path}.megatron.moe_token_dispatcher_type='allgather' with "
            f"{engine.backend_key}={engine.spec!r}: mbridge builds megatron-core's "
            f"TransformerConfig with variable_seq_lengths=True, which raises 'Token dispatcher "
            f"type: allgather does not support variable sequence length, please use alltoall "
            f"dispatcher instead.'; set {path}.megatron.moe_token_dispatcher_type=alltoall"
        )
    return None


def moe_dispatcher_is_known(run: Run) -> str | None:
    """A MoE model's dispatcher is one of three (megatron/core/transformer/moe/moe_layer.py).

    TransformerConfig does not check the Literal; MoELayer.__init__ (l.276-300 at
    core_v0.17.0) raises ``ValueError: Unsupported token dispatcher type`` for any other
    value when it builds a MoE layer. A dense model builds none, and a model not found here
    is not checked.
    """
    from areal_alloc.experiment.sections.megatron import DISPATCHER_TYPES

    for engine, training in _mbridge_engines(run):
        dispatcher = training.token_dispatcher
        if dispatcher in DISPATCHER_TYPES:
            continue
        shape = engine.shape()
        if shape is None or not shape.num_experts:
            continue
        path = engine.path
        return (
            f"{path}.megatron.moe_token_dispatcher_type={shown(dispatcher)}: must be one of "
            f"{', '.join(DISPATCHER_TYPES)}; megatron-core's MoELayer raises 'Unsupported "
            f"token dispatcher type' when mbridge builds the {shape.num_experts}-expert layers "
            f"of {engine.backend_key}={engine.spec!r}: set "
            f"{path}.megatron.moe_token_dispatcher_type=alltoall (the reference's default)"
        )
    return None


# --- Megatron's selective recompute_modules, as mbridge builds megatron-core's config -----------
# With ``gradient_checkpointing`` (only then), MegatronEngine._build_hf_mcore_bridge
# (areal/engine/megatron_engine.py l.722-729 at cbff54d6) hands recompute_granularity,
# recompute_method, recompute_num_layers, distribute_saved_activations and recompute_modules to
# mbridge's ``set_extra_args`` first, before the MoE settings (l.732-750); each call rebuilds
# megatron-core's TransformerConfig at once (mbridge/core/bridge.py l.538-546, ISEEKYAN/mbridge
# @310e8fb), whose __post_init__ (megatron/core/transformer/transformer_config.py,
# NVIDIA/Megatron-LM core_v0.17.0) checks under ``recompute_granularity == "selective"``:
# recompute_num_layers None (l.1346-1352), the module names (l.1363-1378: the reader refuses an
# unknown one, sections.megatron._recompute_modules), moe_act needs moe_grouped_gemm (l.1380-1383),
# mla_up_proj needs multi_latent_attention (l.1385-1389), shared_experts refuses
# moe_shared_expert_overlap on a model with shared experts (l.1399-1406). mbridge's configs set
# moe_grouped_gemm=True for every MoE family (qwen2moe.py l.74, qwen3moe.py l.21,
# deepseek_v3.py l.146, glm4moe.py l.136, mixtral.py l.107) and leave megatron-core's False for
# dense ones (qwen2.py, qwen3.py, llama.py: _build_base_config without it); only DeepSeek-V3
# builds MLATransformerConfig (deepseek_v3.py l.102, multi_latent_attention=True,
# transformer_config.py l.2251); every family with shared experts sets
# moe_shared_expert_overlap=True itself (qwen2moe.py l.73, deepseek_v3.py l.145,
# glm4moe.py l.150, qwen3_5/qwen3_5_vl_bridge.py l.318), and the first call carries no
# ``moe_shared_expert_overlap`` of the reference's.
# megatron-bridge: make_mcore_model sets the same five recompute fields on its provider whatever
# gradient_checkpointing says (areal/models/mcore/registry.py l.444-450, AReaL cbff54d6; the
# reader gives such an engine its recompute, records.TrainConfig.recompute) and calls
# provider.finalize() (l.500), which runs megatron-core's TransformerConfig.__post_init__
# (megatron-bridge v0.4.0 src/megatron/bridge/models/transformer_config.py l.106-118): the same
# checks. Its GPTModelProvider leaves moe_grouped_gemm False (src/megatron/bridge/models/
# gpt_provider.py l.179) and only MoE bridges set it (qwen3_moe_bridge.py l.55,
# deepseek_v3_bridge.py l.60, …): a dense model refuses moe_act; only MLA bridges set
# multi_latent_attention (deepseek_v2/v3_bridge.py, kimi_bridge.py): a model without MLA refuses
# mla_up_proj. moe_shared_expert_overlap=True is set by some of its bridges only
# (MEGATRON_BRIDGE_SHARED_OVERLAP), and the reference never sets it on the provider (registry.py
# l.425-500): the shared_experts rule covers those families under megatron-bridge.

#: The model_types whose megatron-bridge v0.4.0 bridge sets ``provider.moe_shared_expert_overlap
#: = True`` in provider_bridge (src/megatron/bridge/models/deepseek/deepseek_v2_bridge.py l.60,
#: deepseek/deepseek_v3_bridge.py l.64, glm/glm45_bridge.py l.75, kimi/kimi_bridge.py l.61;
#: DeepseekV2/V3ForCausalLM, Glm4MoeForCausalLM, KimiK2ForCausalLM). Qwen3-Next's and
#: Qwen3-MoE's bridges leave megatron-core's False.
MEGATRON_BRIDGE_SHARED_OVERLAP = ("deepseek_v2", "deepseek_v3", "glm4_moe", "kimi_k2")


def _selective(run: Run, bridges: tuple[str, ...] = BRIDGES) -> list[tuple[Engine, TrainConfig]]:
    """The Megatron engines (built by one of ``bridges``) whose megatron-core config gets
    selective recomputation: mbridge's with gradient_checkpointing, megatron-bridge's always."""
    return [
        (engine, training)
        for engine, training in _megatron_engines(run, bridges)
        if (training.gradient_checkpointing or training.bridge_type == "megatron-bridge")
        and training.recompute == "selective"
    ]


def full_recompute_needs_method_and_layers(run: Run) -> str | None:
    """Full granularity needs ``recompute_method`` block or uniform (transformer_config.py
    l.1327-1337) and a ``recompute_num_layers`` (l.1339-1345); the reference's defaults are
    "uniform" and 1 (areal/api/cli_args.py l.966-967). The reader refuses another
    granularity or method (sections.megatron._megatron_recompute_choice)."""
    for engine, training in _megatron_engines(run):
        if training.recompute != "full":  # a Megatron engine's recompute reaches megatron-core
            continue
        path = engine.path
        if training.recompute_method is None:
            return (
                f"{path}.megatron.recompute_granularity='full' with {path}.megatron."
                f"recompute_method=null: megatron-core's TransformerConfig raises 'Using "
                f'recompute_granularity: full so recompute_method must be "block" or '
                f'"uniform"\' when {training.bridge_type} builds {engine.backend_key}='
                f"{engine.spec!r}; set {path}.megatron.recompute_method=uniform (the "
                f"reference's default)"
            )
        if training.recompute_num_layers is None:
            p = engine.allocation.parallel.pp_size
            arch = _architecture(engine)
            per_rank = (
                f"{arch.num_layers // p}' ({arch.num_layers} layers // p{p})" if arch else "…'"
            )
            return (
                f"{path}.megatron.recompute_granularity='full' with {path}.megatron."
                f"recompute_num_layers=null: megatron-core's TransformerConfig raises 'When "
                f"using recompute_granularity: full recompute_num_layers must be between 1 and "
                f"num_layers_per_pipeline_rank: {per_rank} when {training.bridge_type} "
                f"builds {engine.backend_key}={engine.spec!r}; set {path}.megatron."
                f"recompute_num_layers=1 (the reference's default)"
            )
    return None


def megatron_micro_batches_are_counted(run: Run) -> str | None:
    """The Megatron engine packs every forward and update with ``n_mbs=max(min_n_mbs,
    self.config.mb_spec.n_mbs)`` (``_prepare_mb_list``, areal/engine/megatron_engine.py
    l.2705–2716 at cbff54d6): ``mb_spec.n_mbs: null``, which MicroBatchSpec's ``int | None``
    accepts (areal/api/cli_args.py l.103), raises TypeError there on the first batch. The
    FSDP engine passes it to seqpack, which takes None (areal/utils/seqpack.py l.237), and
    archon reads ``n_mbs or 1`` (archon_engine.py l.1225). With ``enable_tree_training`` the
    engine returns the tree batch before the max() (l.2677-2698; tree.py only warns)."""
    for engine in run.engines:
        training = engine.training
        if not engine.active or training is None or not training.n_mbs_null:
            continue
        if training.tree_training:
            continue
        if engine.allocation.backend != "megatron":
            continue
        path = engine.path
        return (
            f"{path}.mb_spec.n_mbs=null: the Megatron engine's _prepare_mb_list computes "
            f"max(min_n_mbs, mb_spec.n_mbs) and raises TypeError \"'>' not supported between "
            f"instances of 'NoneType' and 'int'\" on the first batch of {engine.backend_key}="
            f"{engine.spec!r}; set {path}.mb_spec.n_mbs=1 (the reference's default)"
        )
    return None


def tree_training_needs_no_context_parallelism(run: Run) -> str | None:
    """``enable_tree_training`` packs a prefix tree that one GPU holds whole: the FSDP
    engine refuses context parallelism at initialize ("Tree training currently cannot be
    enabled with sp_size > 1.", areal/engine/fsdp_engine.py l.388-391; its sp_size is c,
    fsdp_utils/parallel.py l.174), the Megatron engine asserts it on the first batch
    ("Context parallelism is not supported in tree training.", megatron_engine.py
    l.2677-2682), and archon also refuses pipeline parallelism (archon_utils.py
    force_pad_to_maximum l.284-293, at cbff54d6). No engine trains a critic so; the Megatron
    engine's chunked-logits LM head refuses it in the constructor (l.211-222, l.343-347) and
    its megatron-bridge builder at initialize (l.778-783); each in the order the engine
    meets it."""
    for engine in run.engines:
        training = engine.training
        if not engine.active or training is None or not training.tree_training:
            continue
        backend, parallel = engine.allocation.backend, engine.allocation.parallel
        where = f"{engine.path}.enable_tree_training=true with {engine.backend_key}={engine.spec!r}"
        critic = (
            f"{where} and {engine.path}.is_critic=true: the {backend} engine raises 'Tree "
            f"training with critic model is not supported yet.'; turn tree training off "
            f"for the critic"
        )
        if training.is_critic and backend == "archon":  # at initialize, before its p and c
            return critic
        if backend == "megatron" and training.chunked_logits:
            return (
                f"{where} and {engine.path}.megatron.enable_chunked_logits=true: the Megatron "
                f"engine raises 'AReaL LM Head does not support tree training' "
                f"(megatron_engine.py l.211-222); turn one of them off"
            )
        if backend == "megatron" and training.bridge_type == "megatron-bridge":
            return (
                f"{where} and {engine.path}.megatron.bridge_type='megatron-bridge': the Megatron "
                f"engine raises 'Tree training is not supported with bridge_type="
                f"'megatron-bridge'.' (megatron_engine.py l.778-783); use mbridge, or turn tree "
                f"training off"
            )
        if parallel.cp_size > 1 or (backend == "archon" and parallel.pp_size > 1):
            what = "context parallelism (c)"
            if backend == "archon":
                what = "pipeline or context parallelism (p, c)"
            said = {
                "fsdp": "raises 'Tree training currently cannot be enabled with sp_size > 1.'",
                "megatron": "asserts 'Context parallelism is not supported in tree training.'",
                "archon": (
                    "raises 'Tree training with pipeline parallelism (pp > 1) or context "
                    "parallelism (cp > 1) is currently not supported.'"
                ),
            }.get(backend, "refuses it")
            return (
                f"{where}: tree training takes no {what}; the {backend} engine {said}; "
                f"use c1{' and p1' if backend == 'archon' else ''}, or turn tree training off"
            )
        if training.is_critic:  # its first batch (fsdp_engine.py l.2161, megatron l.2790)
            return critic
    return None


def per_layer_optim_step_needs_adam(run: Run) -> str | None:
    """``fsdp.per_layer_optim_step`` streams AdamW's states layer by layer: the FSDP engine's
    initialize raises for any other optimizer once it has created it ("per_layer_optim_step
    only supports 'adam' optimizer, got '…'.", areal/engine/fsdp_engine.py l.473-477 at
    cbff54d6), and on an engine without one (a ref, a teacher) reads ``type`` of None."""
    for engine in run.engines:
        training = engine.training
        if not engine.active or training is None or not training.per_layer_optim_step:
            continue
        where = f"{engine.path}.fsdp.per_layer_optim_step=true"
        fix = "set it to false"
        if training.optimizer is None or training.optimizer_assumed:  # None.type
            return (
                f"{where} on an engine without an optimizer: the FSDP engine's initialize "
                f"reads its optimizer's type and raises AttributeError ('NoneType' object "
                f"has no attribute 'type'); {fix}"
            )
        if training.optimizer != "adam":
            return (
                f"{where} with {engine.path}.optimizer.type={training.optimizer!r}: the FSDP "
                f"engine raises \"per_layer_optim_step only supports 'adam' optimizer, got "
                f"'{training.optimizer}'.\" (fsdp_engine.py l.473-477); use "
                f"{engine.path}.optimizer.type=adam, or {fix}"
            )
    return None


# --- each training engine's optimizer -------------------------------------------------------------
# OptimizerConfig.type's "choices" (areal/api/cli_args.py l.382-390 at cbff54d6) are help text:
# the loader takes any text and the engine refuses it when it builds the optimizer. The types
# each engine builds have one home, defaults.ENGINE_OPTIMIZERS (the memory estimate reads it).


def _unbuilt_optimizer(run: Run, backend: str, said: str) -> str | None:
    """The first active ``backend`` engine whose ``optimizer.type`` it does not build: the
    message, ``said`` naming what the engine raises ("{type}" for the value)."""
    from areal_alloc.defaults import ENGINE_OPTIMIZERS

    allowed = ENGINE_OPTIMIZERS[backend]
    for engine in run.engines:
        training = engine.training
        if not engine.active or engine.allocation.backend != backend or training is None:
            continue
        kind = training.optimizer
        if kind is None or kind in allowed:  # None: no optimizer (a ref, a teacher)
            continue
        items = ["adam (the reference's default)", *(t for t in allowed if t != "adam")]
        raised = said.replace("{type}", kind if len(kind) <= 40 else "…")
        return (
            f"{engine.path}.optimizer.type={shown(kind)} with {engine.backend_key}="
            f"{engine.spec!r}: {raised}; set {engine.path}.optimizer.type="
            f"{', '.join(items[:-1])} or {items[-1]}"
        )
    return None


def fsdp_builds_the_optimizer(run: Run) -> str | None:
    """The FSDP engine's ``_create_optimizer`` asserts adam, adam_bf16 or sgd
    (areal/engine/fsdp_engine.py l.1150-1160 at cbff54d6), at initialize (l.471) before
    per_layer_optim_step's check (l.473-477)."""
    return _unbuilt_optimizer(
        run,
        "fsdp",
        "the FSDP engine asserts 'Only adam/adam_bf16/sgd optimizer is supported in this "
        "engine.' (fsdp_engine.py _create_optimizer)",
    )


def megatron_builds_the_optimizer(run: Run) -> str | None:
    """The Megatron engine turns adam_bf16 into adam at initialize (``_normalize_adam_bf16_
    config``, areal/engine/megatron_engine.py l.456, l.1650-1663 at cbff54d6), then its
    ``_create_optimizer`` asserts adam or sgd (l.1813-1816)."""
    return _unbuilt_optimizer(
        run,
        "megatron",
        "the Megatron engine asserts 'Only AdamW/sgd optimizer is supported in this engine.' "
        "(megatron_engine.py _create_optimizer; adam_bf16 it turns into adam first)",
    )


def archon_builds_the_optimizer(run: Run) -> str | None:
    """The archon engine's ``create_optimizer`` builds adam or sgd and raises "Unsupported
    optimizer type: …" for the rest, adam_bf16 too (areal/experimental/engine/archon_utils.py
    l.44-71 at cbff54d6; called from ArchonEngine._create_optimizer, archon_engine.py l.371,
    l.1164-1171)."""
    return _unbuilt_optimizer(
        run,
        "archon",
        "the archon engine raises 'Unsupported optimizer type: {type}' (archon_utils.py "
        "create_optimizer)",
    )


def selective_recompute_needs_no_layer_count(run: Run) -> str | None:
    """Selective granularity takes ``recompute_num_layers: null`` (transformer_config.py
    l.1346-1352); the reference's default is 1 (areal/api/cli_args.py l.967)."""
    for engine, training in _selective(run):
        layers = training.recompute_num_layers
        if layers is None:
            continue
        path = engine.path
        return (
            f"{path}.megatron.recompute_granularity='selective' with {path}.megatron."
            f"recompute_num_layers={layers}: megatron-core's TransformerConfig raises 'When "
            f"using recompute_granularity: selective recompute_num_layers must be None.' when "
            f"{training.bridge_type} builds {engine.backend_key}={engine.spec!r}; set "
            f"{path}.megatron.recompute_num_layers=null"
        )
    return None


def _architecture(engine: Engine) -> Architecture | None:
    """The engine's model, when found here (a model not found is not checked)."""
    try:
        return engine.model.architecture()[0]
    except AllocationValidationError:  # the model checks say what is wrong with it
        return None


def moe_act_recompute_needs_experts(run: Run) -> str | None:
    """``moe_act`` needs moe_grouped_gemm (l.1380-1383), which mbridge and megatron-bridge set
    for MoE models only."""
    for engine, training in _selective(run):
        if "moe_act" not in training.recompute_modules:
            continue
        arch = _architecture(engine)
        if arch is None or arch.num_experts:
            continue
        path = engine.path
        return (
            f"{path}.megatron.recompute_modules={shown(list(training.recompute_modules))} has "
            f"'moe_act' but {engine.backend_key}={engine.spec!r} runs a dense model: "
            f"{training.bridge_type} leaves megatron-core's moe_grouped_gemm false for it, and "
            f"its TransformerConfig "
            f"raises 'moe_act in recompute_modules is only supported with moe_grouped_gemm.'; "
            f"drop 'moe_act' from {path}.megatron.recompute_modules"
        )
    return None


def mla_up_proj_recompute_needs_mla(run: Run) -> str | None:
    """``mla_up_proj`` needs multi_latent_attention (l.1385-1389): a model with MLA only."""
    for engine, training in _selective(run):
        if "mla_up_proj" not in training.recompute_modules:
            continue
        arch = _architecture(engine)
        if arch is None or arch.kv_lora_rank:
            continue
        path = engine.path
        return (
            f"{path}.megatron.recompute_modules={shown(list(training.recompute_modules))} has "
            f"'mla_up_proj' but the model of {engine.backend_key}={engine.spec!r} has no "
            f"multi-latent attention (kv_lora_rank 0): megatron-core's TransformerConfig raises "
            f"'mla_up_proj in recompute_modules is only supported with multi_latent_attention.' "
            f"when {training.bridge_type} builds it; drop 'mla_up_proj' from "
            f"{path}.megatron.recompute_modules"
        )
    return None


def shared_experts_recompute_refuses_overlap(run: Run) -> str | None:
    """``shared_experts`` refuses moe_shared_expert_overlap on a model with shared experts
    (l.1399-1406): mbridge sets it for every such model before the reference's own setting
    reaches it; megatron-bridge's bridges for MEGATRON_BRIDGE_SHARED_OVERLAP set it and the
    reference never overrides it."""
    for engine, training in _selective(run):
        if "shared_experts" not in training.recompute_modules:
            continue
        arch = _architecture(engine)
        if arch is None or not arch.shared_expert_intermediate_size:
            continue
        path = engine.path
        if training.bridge_type == "mbridge":
            sets = f"mbridge sets moe_shared_expert_overlap=True before {path}.megatron."
            sets += "moe_shared_expert_overlap is applied"
        elif arch.model_type in MEGATRON_BRIDGE_SHARED_OVERLAP:
            sets = f"megatron-bridge's {arch.model_type} bridge sets moe_shared_expert_overlap="
            sets += "True on the provider, which the reference does not override"
        else:
            continue
        return (
            f"{path}.megatron.recompute_modules={shown(list(training.recompute_modules))} has "
            f"'shared_experts' but the model of {engine.backend_key}={engine.spec!r} has shared "
            f"experts, for which {sets}: megatron-core's TransformerConfig raises "
            f"'shared_experts recompute cannot work with --moe-shared-expert-overlap.'; drop "
            f"'shared_experts' from {path}.megatron.recompute_modules"
        )
    return None


# --- megatron-bridge's even pipeline split -------------------------------------------------------
# The reference's parameter-balanced layout (configure_pipeline_layer_splits, areal/engine/
# megatron_engine.py l.494) is set on ``bridge.transformer_config`` (registry.py
# make_hf_and_mcore_config l.353), a config megatron-bridge v0.4.0 builds anew on each access
# (src/megatron/bridge/models/conversion/auto_bridge.py l.1279-1286); make_mcore_model builds the
# model from another new provider (registry.py l.426) with account_for_embedding/loss_in_
# pipeline_split False (l.452-453) and no layout or first/last stage sizes. megatron-core then
# splits evenly: get_num_layers_to_build asserts num_layers % p == 0, then the per-rank layers
# % vpp == 0 (megatron/core/transformer/transformer_block.py l.151-153 and l.170-173,
# NVIDIA/Megatron-LM core_v0.17.0), as GPTModelProvider.provide does for vpp (megatron-bridge
# v0.4.0 src/megatron/bridge/models/gpt_provider.py l.241-245).


def _even_pipeline_sizes(layers: int, vpp: int, limit: int = 6) -> str:
    """The first ``limit`` pipeline sizes p > 1 whose even split of ``layers`` fills vpp,
    as text ("p2, p3, …"; empty for none)."""
    sizes = [p for p in range(2, layers + 1) if layers % p == 0 and (layers // p) % vpp == 0]
    shown_sizes = ", ".join(f"p{p}" for p in sizes[:limit])
    return shown_sizes + (", …" if len(sizes) > limit else "")


def megatron_bridge_splits_evenly(run: Run) -> str | None:
    """megatron-bridge: the layers divide evenly over p (and each rank's over vpp)."""
    for engine, training in _megatron_engines(run, ("megatron-bridge",)):
        p = engine.allocation.parallel.pp_size
        if p <= 1 and (training.virtual_pipeline_size or 1) <= 1:
            continue
        arch = _architecture(engine)
        if arch is None:
            continue
        layers, vpp = arch.num_layers, training.virtual_pipeline_size or 1
        if even_split_builds(layers, p, vpp):
            continue
        path = engine.path
        if (layers // p) % vpp:  # the provider's check comes first (provide, then the block)
            why = (
                f"{layers} // {p} = {layers // p} layers per rank and {layers // p} % {vpp} = "
                f"{layers // p % vpp} for {path}.megatron.virtual_pipeline_parallel_size={vpp}: "
                f"megatron-bridge's provider asserts 'Make sure the number of model chunks is "
                f"the same across all pipeline stages.'"
            )
        else:
            why = (
                f"{layers} % {p} = {layers % p}: megatron-core's get_num_layers_to_build "
                f"asserts 'num_layers={layers} should be divisible by "
                f"config.pipeline_model_parallel_size={p}'"
            )
        sizes = _even_pipeline_sizes(layers, vpp)
        fixes = [f"use a p that splits them evenly ({sizes})"] if sizes else []
        if vpp > 1:
            fixes.append(f"set {path}.megatron.virtual_pipeline_parallel_size=1")
        if not training.use_lora:  # LoRA needs megatron-bridge (megatron_lora_needs_…)
            fixes.append(
                f"set {path}.megatron.bridge_type=mbridge (the reference's parameter-balanced "
                f"split)"
            )
        return (
            f"{engine.backend_key}={engine.spec!r} with {path}.megatron.bridge_type="
            f"'megatron-bridge' splits the {layers} layers evenly over p{p}"
            f"{f'·vpp{vpp}' if vpp > 1 else ''} (megatron-bridge's provider gets no pipeline "
            f"layout), and {why}; {' or '.join(fixes)}"
        )
    return None


# --- the archon engine's model and mesh ---------------------------------------------------------

#: The model types the archon engine builds: its registered ModelSpecs' supported_model_types
#: (areal/experimental/models/archon/qwen2/spec.py l.18, qwen3/spec.py l.18, qwen3_5/spec.py
#: l.20-22, registered by archon/__init__.py at cbff54d6), sorted as its message lists them.
ARCHON_MODEL_TYPES = (
    "qwen2",
    "qwen3",
    "qwen3_5",
    "qwen3_5_moe",
    "qwen3_5_moe_text",
    "qwen3_5_text",
    "qwen3_moe",
)


def _archon_engines(run: Run) -> list[Engine]:
    return [
        e
        for e in run.engines
        if e.active and e.allocation.backend == "archon" and e.training is not None
    ]


def archon_builds_the_model_type(run: Run) -> str | None:
    """ArchonEngine.__init__ reads the model's config and ``_validate_model_type`` raises
    "Archon Engine does not support model type '…'" for a type no ModelSpec registers
    (areal/experimental/engine/archon_engine.py l.157-161, l.883-891 at cbff54d6). A model not
    found here, or one without a ``model_type``, is not checked."""
    for engine in _archon_engines(run):
        arch = _architecture(engine)
        if arch is None or not arch.model_type or arch.model_type in ARCHON_MODEL_TYPES:
            continue
        kind = arch.model_type
        return (
            f"{engine.backend_key}={engine.spec!r} runs a model of type {shown(kind)}, which "
            f'the archon engine does not build: it raises "Archon Engine does not support model '
            f"type '{kind if len(kind) <= 40 else '…'}'. Supported model types: "
            f'{", ".join(ARCHON_MODEL_TYPES)}." (archon_engine.py _validate_model_type); train '
            f"it with fsdp:… or megatron:…, or use a model of one of those types"
        )
    return None


def archon_expert_mesh_fits(run: Run) -> str | None:
    """ArchonParallelDims.__post_init__ (areal/experimental/models/archon/parallel_dims.py
    l.137-168 at cbff54d6), built in create_process_group (archon_engine.py l.226-235) with
    dp_shard = d: the rule's one home is model_shape.archon_mesh_problem, which the layout
    search (layouts.py) applies too."""
    from areal_alloc.model_shape import archon_mesh_problem

    for engine in _archon_engines(run):
        p = engine.allocation.parallel
        problem = archon_mesh_problem(p.dp_size, p.tp_size, p.cp_size, p.ep_size, p.etp_size)
        if problem is not None:
            return f"{engine.backend_key}={engine.spec!r}: {problem}"
    return None


def archon_pipeline_needs_untied_embeddings(run: Run) -> str | None:
    """prepare_training_config (areal/experimental/engine/archon_utils.py l.353-363 at
    cbff54d6, called from ArchonEngine.initialize l.342) refuses pipeline parallelism for a
    model with ``tie_word_embeddings``: the embedding and the output layer sit on different
    stages. A model not found here is not checked."""
    for engine in _archon_engines(run):
        pp = engine.allocation.parallel.pp_size
        arch = _architecture(engine) if pp > 1 else None
        if arch is None or not arch.tie_word_embeddings:
            continue
        return (
            f"{engine.backend_key}={engine.spec!r} pipelines over p{pp} a model with "
            f"tie_word_embeddings=true, and the archon engine raises 'Pipeline Parallelism "
            f"(PP={pp}) is not supported with weight tying (tie_word_embeddings=True).' "
            f"(archon_utils.py prepare_training_config): use p1, or a model without weight tying"
        )
    return None


# --- archon's pipeline split ----------------------------------------------------------------------
# pipeline_llm (areal/experimental/models/archon/pipeline_parallel.py l.409-453, AReaL cbff54d6)
# derives the virtual stages per rank from archon.pp_schedule and pp_layers_per_stage and
# refuses what does not fit (sections.archon.archon_stages_per_rank);
# generate_llm_fqn_per_model_part (l.118-155) then refuses more stages than layers + first +
# last, and a pp_{first,last}_stage_less_layers above the layers per stage
# (sections.archon.archon_split_refusal), with the configured values (the estimate's split
# falls back to the default 1 and 1).


def archon_layers_fill_the_stages(run: Run) -> str | None:
    """archon with p > 1: its p × (stages per rank) virtual stages are built."""
    from areal_alloc.errors import AllocationError
    from areal_alloc.experiment.sections.archon import (
        archon_split_refusal,
        archon_stages_per_rank,
    )

    for engine in run.engines:
        training = engine.training
        p = engine.allocation.parallel.pp_size
        if not engine.active or engine.allocation.backend != "archon" or training is None:
            continue
        arch = _architecture(engine) if p > 1 else None
        if arch is None:
            continue
        try:
            stages = archon_stages_per_rank(training, arch.num_layers, p, engine.path)
        except AllocationError as error:
            return error.message
        if stages is None or p * stages > arch.num_layers + 2:
            continue  # the model-shape check refuses more stages than layers + 2 (model_shape.py)
        first, last = training.archon_less_layers
        refusal = archon_split_refusal(
            arch.num_layers, p, stages, first, last, f"{engine.path}.archon"
        )
        if refusal is not None:
            return f"{engine.backend_key}={engine.spec!r}: {refusal}"
    return None


def versions_are_known(run: Run) -> str | None:
    """``_version`` is 'v1' or 'v2' (TrainEngineConfig / InferenceEngineConfig.__post_init__)."""
    for key in ("actor", "critic", "ref", "rollout"):
        version = run.version(key)
        if version is None:
            continue
        if version not in ("v1", "v2"):
            return f"{key}._version={shown(version)}: must be 'v1' or 'v2'"
    return None


def versions_match(run: Run) -> str | None:
    if not _rl(run):
        return None
    actor = run.version("actor")
    rollout = run.version("rollout")
    if actor == rollout:
        return None
    return (
        f"actor._version={actor!r} and rollout._version={rollout!r} must match: set both "
        f"to 'v1' or both to 'v2'"
    )


# --- the batch over the actor's data-parallel ranks ---------------------------------------------


def _batch(run: Run) -> tuple[int, int, int, Engine] | None:
    """(batch, trajectories per step, data-parallel size, actor) when the config gives a batch."""
    actor = run.engine("actor")
    if actor is None or not actor.active:
        return None
    batch = run.experiment.run.batch_size
    if batch is None:
        return None
    samples = 1
    if run.engine("rollout") is not None:
        samples = run.experiment.run.n_samples or 1
    return batch, batch * samples, actor.allocation.parallel.dp_size, actor


def batch_splits_over_data_parallel(run: Run) -> str | None:
    """Both launch paths split the step's batch evenly over the actor's data-parallel ranks.

    SPMD launchers: areal/utils/dataloader.py create_dataloader raises unless
    batch_size % dp == 0. Single controller (the dataloader sees world size 1): the
    actor's controller splits the step's batch × n_samples trajectories over dp
    (areal/infra/controller/train_controller.py _dispatch_tensors →
    areal/utils/seqpack.py balanced_greedy_partition, which raises unless the count
    is a multiple of dp and at least dp). With ``dynamic_bs`` the count varies, so
    only the dataloader's rule is certain.
    """
    found = _batch(run)
    if found is None:
        return None
    batch, items, dp, actor = found
    if batch % dp == 0 or items % dp == 0 or run.startup.dynamic_bs:
        return None  # the single controller may run it: startup_warnings names the SPMD launchers
    trajectories = ""
    if items != batch:
        trajectories = (
            f", nor its {items} trajectories (× gconfig.n_samples; {items} % {dp} = {items % dp})"
        )
    fix = -(-batch // dp) * dp
    return (
        f"train_dataset.batch_size={batch} is not a multiple of the {dp} data-parallel ranks of "
        f"{actor.backend_key}={actor.spec!r} ({batch} % {dp} = {batch % dp}){trajectories}: the "
        f"reference splits each step evenly over them; set train_dataset.batch_size={fix}"
    )


def minibatches_fill_their_micro_batches(run: Run) -> str | None:
    """Each data-parallel rank of the actor (and of a critic) splits its trajectories into
    its ``ppo_n_minibatches`` minibatches (areal/trainer/ppo/actor.py l.454–457, critic.py
    l.63–66), and its engine packs each into at least its micro-batches: the Megatron engine
    at p > 1 at least 2·p, a multiple of p (``min_n_mbs``, areal/engine/megatron_engine.py
    l.2705–2716), any engine at least ``mb_spec.n_mbs`` (model_shape.engine_micro_batches).
    seqpack's allocation raises with fewer sequences than groups ("Number of values … is
    smaller than min_groups …", areal/utils/seqpack.py ffd_allocate l.241–244, kk_allocate
    l.503–504). With fewer trajectories per rank than minibatches × that, some minibatch is
    short for certain. A ref's or a training teacher's forward (``compute_logp``, through
    the same ``_prepare_mb_list``, megatron_engine.py l.1465) packs the whole share into
    them: fewer sequences a rank than that raises there. Left out: archon at p > 1 (its
    stages per rank set the count), ``dynamic_bs``."""
    found = _batch(run)
    if found is None or run.startup.dynamic_bs:
        return None
    batch, items, _, _ = found
    for key in ("actor", "critic", "ref", "teacher"):
        engine = run.engine(key)
        if engine is None or not engine.active or engine.training is None:
            continue
        if engine.allocation.is_inference:
            continue
        minibatches = run.startup.minibatches_of(key)
        message = _short_minibatch(engine, minibatches, batch, items, _rl(run), run.startup.pairs)
        if message is not None:
            return message
    return None


@dataclass(frozen=True, slots=True)
class _Floor:
    """How few units (sequences; pairs; groups of ``mb_spec.granularity``) one
    ``train_batch`` or forward of an engine packs without raising: below ``least`` seqpack
    raises "Number of values … is smaller than min_groups" (or the archon engine its
    own); from ``least`` to below ``rounded`` the count cannot come out a multiple of the
    divisor, and ``rounding`` says what raises then (``rounded == least``: nothing)."""

    least: int
    rounded: int
    why: str  # the count's source, for ``least``
    rounded_why: str = ""  # the same, for ``rounded``
    rounding: str = ""
    kk_runs: str = ""  # the key that lets kk run it, where it does


def _micro_batch_floor(engine: Engine, training: TrainConfig, pp: int, stages: int) -> _Floor:
    """What one ``train_batch`` or forward of ``engine`` packs a rank's share into at least.

    - ``enable_tree_training``: the prefix-tree packing counts by tokens only, and "n_mbs,
      granularity, and n_mbs_divisor are not used in tree training" (areal/models/
      tree_attn/tree.py build_packed_tree_batch l.291-321; the engines return its batch
      before any count: fsdp_engine.py l.1888-1901, megatron_engine.py l.2677-2698);
    - the Megatron engine: ``n_mbs=max(2·p if p > 1 else 1, mb_spec.n_mbs)``,
      ``n_mbs_divisor=p`` whatever the config says (megatron_engine.py l.2705-2716);
    - archon at p > 1: p × its stages per rank, a multiple of p (archon_engine.py
      l.1209-1227);
    - FSDP, and archon at p1: the config's ``mb_spec`` as written, ``n_mbs_divisor``
      included (fsdp_engine.py l.1946, archon_engine.py l.1229).

    seqpack (areal/utils/seqpack.py at cbff54d6) raises below ``max(n_mbs, divisor)``
    (``ffd_allocate`` l.237-244, ``kk_allocate`` l.497-506). ffd then grows its count to a
    multiple of the divisor or raises "Cannot allocate values … that satisfies capacity …,
    min_groups … and n_groups_divisor …" (l.245-254); kk rounds up and then takes
    ``min(k, len(values))`` (l.508-515): a count that is no multiple of p, which
    megatron-core's non-interleaved schedule runs, and its interleaved one (vpp > 1)
    refuses: "The remainder of M … should be 0, or larger than or equal to the
    pipeline-parallel size" (megatron/core/pipeline_parallel/schedules.py
    forward_backward_pipelining_with_interleaving l.1036-1046, NVIDIA/Megatron-LM
    core_v0.17.0; ``microbatch_group_size_per_vp_stage`` defaults to p,
    model_parallel_config.py l.444-445)."""
    path, backend = engine.path, engine.allocation.backend
    if training.tree_training:
        return _Floor(1, 1, f"(its prefix-tree packing by tokens, {path}.enable_tree_training)")
    if backend == "archon" and pp > 1:
        least = minibatch_micro_batches(backend, pp, stages, training.n_mbs)
        if least > training.n_mbs:
            return _Floor(least, least, f"(the archon engine's at least p{pp} × {stages} stages)")
        return _Floor(least, least, f"({path}.mb_spec.n_mbs)")
    n_mbs = training.n_mbs
    if backend == "megatron":
        divisor, floor = pp, 2 * pp if pp > 1 else 1
        least = max(floor, n_mbs)
        why = (
            f"(the Megatron engine's at least 2·p{pp}, a multiple of p)"
            if least > n_mbs
            else f"({path}.mb_spec.n_mbs)"
        )
        of = f"p{pp}, the Megatron engine's n_mbs_divisor"
    else:
        divisor = training.n_mbs_divisor
        least = max(n_mbs, divisor)
        why = (
            f"({path}.mb_spec.n_mbs_divisor={divisor})"
            if divisor > n_mbs
            else f"({path}.mb_spec.n_mbs)"
        )
        of = f"{path}.mb_spec.n_mbs_divisor={divisor}"
    rounded = -(-least // divisor) * divisor
    vpp = training.virtual_pipeline_size or 1
    if rounded == least or (training.packing == "kk" and (backend != "megatron" or vpp == 1)):
        return _Floor(least, least, why)  # kk runs min(k, its sequences) micro-batches
    rounded_why = f"({path}.mb_spec.n_mbs={n_mbs} rounded up to a multiple of {of})"
    if training.packing == "kk":
        rounding = (
            f"kk packs it into as many as it has sequences, no multiple of p{pp}, and "
            f"megatron-core's interleaved schedule (vpp {vpp}) raises 'The remainder of M (the "
            f"total micro-batches) "
            f"divided by N (number of contiguous micro-batches in a virtual pipeline stage) "
            f"should be 0, or larger than or equal to the pipeline-parallel size, but it is …'"
        )
        return _Floor(least, rounded, why, rounded_why, rounding)
    rounding = (
        f"the reference's seqpack (ffd) raises 'Cannot allocate values … that satisfies "
        f"capacity …, min_groups {rounded} and n_groups_divisor {divisor}.'"
    )
    kk = "" if backend == "megatron" and vpp > 1 else f"{path}.mb_spec.packing_algorithm=kk"
    return _Floor(least, rounded, why, rounded_why, rounding, kk)


def _short_minibatch(
    engine: Engine, minibatches: int, batch: int, items: int, rl: bool = True, pairs: bool = False
) -> str | None:
    """The message of :func:`minibatches_fill_their_micro_batches` for one trainer, or None
    (``rl`` false: SFT, RW or DPO, whose step trains the whole batch at once; ``pairs``: RW
    or DPO, whose engines pack chosen/rejected pairs whole, ``mb_spec.granularity = 2``,
    so a rank's items are its pairs: fsdp_engine.py l.2414-2418, megatron_engine.py l.3093,
    archon_engine.py l.1524; areal/utils/data.py split_padded_tensor_dict_into_mb_list
    l.722-760, at cbff54d6). Any other ``mb_spec.granularity`` g groups g adjacent
    sequences whole, and the split raises "Batch size … cannot divide granularity …"
    (data.py l.722-725) unless each minibatch (the actor's are split by sequences,
    actor.py l.454-457) holds a multiple of g: certain when the rank's share does not.
    Micro-batches count whole groups (:func:`_micro_batch_floor`)."""
    training = engine.training
    backend, parallel = engine.allocation.backend, engine.allocation.parallel
    pp, dp = parallel.pp_size, parallel.dp_size
    if training is None:
        return None
    stages = 1
    if (
        backend == "archon" and pp > 1
    ):  # its stages per rank (sections.archon.archon_stages_per_rank)
        from areal_alloc.errors import AllocationError
        from areal_alloc.experiment.sections.archon import archon_stages_per_rank

        arch = _architecture(engine) if training.archon_layers_per_stage is not None else None
        try:
            found = archon_stages_per_rank(
                training, arch.num_layers if arch is not None else None, pp, engine.path
            )
        except AllocationError:
            return None  # refused by archon_layers_fill_the_stages, in the reference's order
        if found is None:
            return None
        stages = found
    floor = _micro_batch_floor(engine, training, pp, stages)
    per_rank = items // max(1, dp)
    group = 1 if pairs or training.tree_training else training.granularity
    share = engine.key in ("ref", "teacher") or not rl  # the whole share, no minibatches
    what = "trajectories" if rl else "chosen/rejected pairs" if pairs else "sequences"
    head = (
        f"{items} {what} a step over the {dp} data-parallel ranks of "
        f"{engine.backend_key}={engine.spec!r} are {per_rank} per rank"
    )
    samples = max(1, items // max(1, batch))
    split_first = not share and per_rank < minibatches  # the actor's own split raises first
    if per_rank % group and not split_first:
        fix = _batch_for(batch, samples, dp, group, per_rank)
        whose = "its forward's" if rl and share else "its step's" if share else "a minibatch's"
        size = per_rank if share or minibatches == 1 else "…"
        return (
            f"{head}, not a multiple of {engine.path}.mb_spec.granularity={group} ({per_rank} % "
            f"{group} = {per_rank % group}): {whose} split raises 'Batch size {size} cannot "
            f"divide granularity {group}.' (areal/utils/data.py "
            f"split_padded_tensor_dict_into_mb_list); set train_dataset.batch_size={fix} or "
            f"{engine.path}.mb_spec.granularity=1"
        )
    parts = 1 if share else minibatches
    if per_rank >= parts * floor.rounded * group:
        return None
    short = split_first or per_rank < parts * floor.least * group
    least = floor.least if short else floor.rounded
    need = parts * least * group
    unit = "micro-batch" if least == 1 else "micro-batches"
    packed = f"{least} {unit} {floor.why if short else floor.rounded_why}"
    if group > 1:
        packed += f" of whole groups of {engine.path}.mb_spec.granularity={group}"
    enough = _batch_for(batch, samples, dp, group, need)
    if not short:
        raises = floor.rounding
    elif backend == "archon" and pp > 1 and not training.tree_training:
        raises = (
            f"the archon engine raises 'Pipeline parallelism requires at least {pp * stages} "
            f"sequences'"
        )
    else:
        raises = "the reference's seqpack raises 'Number of values … is smaller than min_groups'"
        if group > 1 and not split_first and not share:  # a minibatch of too few sequences
            raises = (
                f"its split raises 'Batch size … cannot divide granularity {group}.' (no "
                f"multiple of {group} sequences) or seqpack 'Number of values … is smaller "
                f"than min_groups'"
            )
    kk = f", or {floor.kk_runs}" if floor.kk_runs and not short else ""
    times = f" × {group}" if group > 1 else ""
    if share:
        step = "forward" if rl else "step"
        return (
            f"{head}, which its {step} packs into {packed}: {per_rank} < {least}{times}"
            f"{f' = {need}' if group > 1 else ''}, so {raises}; set "
            f"train_dataset.batch_size={enough} or more, or use fewer data-parallel ranks{kk}"
        )
    return (
        f"{head}, split into {engine.key}.ppo_n_minibatches={minibatches} minibatches, each "
        f"packed into {packed}: {per_rank} < {minibatches} × {least}{times} = {need}, so a "
        f"minibatch has fewer sequences than {'that' if group > 1 else 'micro-batches'} and "
        f"{raises}; set train_dataset.batch_size={enough} or more, or use fewer data-parallel "
        f"ranks or minibatches{kk}"
    )


def _batch_for(batch: int, samples: int, dp: int, group: int, sequences: int) -> int:
    """The least ``train_dataset.batch_size`` from ``batch`` up, a multiple of ``dp`` (as
    batch_splits_over_data_parallel needs), that gives each rank at least ``sequences``
    and a multiple of ``group``."""
    size = max(dp, -(-batch // dp) * dp)
    while True:
        per_rank = size * samples // dp
        if per_rank >= sequences and per_rank % group == 0:
            return size
        size += dp


# --- the launchers and schedulers -----------------------------------------------------------------


def servers_span_whole_nodes(run: Run) -> str | None:
    """An inference server wider than a node spans whole nodes.

    areal/infra/launcher/sglang_server.py run(): "Cross-nodes SGLang only supports
    utilizing all gpus in one node" when gpus_per_server > n_gpus_per_node and not a
    multiple; areal/infra/scheduler/ray.py _build_node_plan: "Ray multi-node instances
    must use an integer number of nodes". A server of at most a node needs no
    divisibility: n_gpus_per_node // gpus_per_server servers share each node.
    """
    per_node = run.n_gpus_per_node
    if per_node == 0:
        return None
    for engine in run.engines:
        a = engine.allocation
        if not engine.active or not a.is_inference:
            continue
        size = a.instance_size
        if size > per_node and size % per_node:
            p = a.parallel
            whole = -(-size // per_node) * per_node
            return (
                f"{engine.backend_key}={engine.spec!r}: one {a.backend} instance spans "
                f"t{p.tp_size}·p{p.pp_size} = {size} GPUs, more than cluster.n_gpus_per_node="
                f"{per_node} and not whole nodes ({size} % {per_node} = {size % per_node}); "
                f"a server wider than a node takes whole nodes: use {per_node} or {whole} GPUs "
                f"per instance"
            )
    return None


def slurm_takes_whole_nodes(run: Run) -> str | None:
    """``scheduler.type: slurm`` allocates whole nodes to each separated engine.

    areal/infra/scheduler/slurm.py _generate_sbatch_script: "Slurm only supports
    allocating entire nodes" unless the role's GPUs (workers × GPUs each) are a
    multiple of n_gpus_per_node.
    """
    per_node = run.n_gpus_per_node
    if per_node == 0 or run.startup.scheduler_type != "slurm":
        return None
    for engine in run.engines:
        if engine.gpus and engine.gpus % per_node:
            return (
                f"{engine.backend_key}={engine.spec!r} takes {engine.gpus} GPUs, but "
                f"scheduler.type='slurm' allocates whole nodes of cluster.n_gpus_per_node="
                f"{per_node} ({engine.gpus} % {per_node} = {engine.gpus % per_node}): use a "
                f"multiple of {per_node} GPUs, or scheduler.type=local or ray"
            )
    return None


def local_colocation_has_the_targets_workers(run: Run) -> str | None:
    """``scheduler.type: local`` colocates a role on its target's workers one for one.

    LocalScheduler.create_workers raises "Colocated role must have same replica count as
    target (… != …)" (areal/infra/scheduler/local.py l.692-699 at cbff54d6). A v1 rollout
    asks for one worker per instance, its d (RolloutController.initialize,
    areal/infra/controller/rollout_controller.py l.175-197); a training engine for one per
    GPU, its world size (train_controller.py l.274-284), and the trainer creates the training
    engines' workers first (rl_trainer.py _init_impl l.311-318). The ray scheduler also takes
    workers that reuse all the target's GPUs (ray.py l.1531-1540).
    """
    if run.startup.scheduler_type != "local":
        return None
    for engine in run.engines:
        a = engine.allocation
        strategy = a.scheduling_strategy
        if not (engine.active and a.is_inference and strategy.is_colocated):
            continue
        target = run.engine(strategy.target or "")
        if target is None or target.allocation.is_inference or engine.version != "v1":
            continue
        mine, theirs = a.parallel.dp_size, target.allocation.parallel.world_size
        if mine == theirs:
            continue
        size = a.instance_size
        return (
            f"{engine.backend_key}={engine.spec!r} colocated with {target.backend_key}="
            f"{target.spec!r} under scheduler.type='local': the rollout asks for one worker per "
            f"instance ({mine} instances of t{a.parallel.tp_size}·p{a.parallel.pp_size} = "
            f"{size} GPUs) and {target.key} has one per GPU ({theirs}), and the local "
            f"scheduler raises 'Colocated role must have same replica count as target ({mine} "
            f"!= {theirs})'; use instances of one GPU ({a.backend}:d{theirs}), or "
            f"scheduler.type=ray"
        )
    return None


def epochs_are_positive(run: Run) -> str | None:
    """BaseExperimentConfig.__post_init__ (areal/api/cli_args.py): total_train_epochs > 0."""
    epochs = run.startup.total_train_epochs  # read by the one reader of numbers
    if epochs is None or epochs > 0:
        return None
    return f"total_train_epochs={epochs!r}: must be ≥ 1 (the reference's loader refuses it)"


def prox_logp_method_is_known(run: Run) -> str | None:
    """PPOActorConfig.__post_init__ builds ``ProxLogpMethod(prox_logp_method)``, which raises
    ValueError for any other value (areal/api/cli_args.py l.1911-1913, areal/utils/constants.py
    l.36-55 at cbff54d6)."""
    method = run.startup.prox_logp_method
    if run.engine("actor") is None or method is None or method in PROX_LOGP_METHODS:
        return None
    choices = ", ".join(repr(m) for m in PROX_LOGP_METHODS)
    return f"actor.prox_logp_method={shown(method)}: must be one of {choices}"


def delta_update_needs_one_minibatch(run: Run) -> str | None:
    """PPOActorConfig.__post_init__ (areal/api/cli_args.py): delta updates need one minibatch."""
    if run.engine("actor") is None or not run.startup.enable_delta_weight_update:
        return None
    minibatches = run.startup.ppo_n_minibatches  # defaults.PPO_MINIBATCHES when not written
    if minibatches == 1:
        return None
    return (
        f"actor.enable_delta_weight_update=true needs actor.ppo_n_minibatches=1 (one optimizer "
        f"step between weight updates), got {minibatches!r}: set actor.ppo_n_minibatches=1"
    )


def memory_efficient_load_needs_weights(run: Run) -> str | None:
    """TrainEngineConfig.__post_init__ (areal/api/cli_args.py): a CPU load needs weights to load."""
    for key in ("actor", "critic", "ref"):
        engine = run.engine(key)
        if engine is None or engine.training is None or not engine.training.init_from_scratch:
            continue
        if engine.training.memory_efficient_load:
            return (
                f"{key}.fsdp.memory_efficient_load=true loads pretrained weights, but "
                f"{key}.init_from_scratch=true loads none: set one of them to false"
            )
    return None


def _online(run: Run) -> bool:
    return run.startup.agent_mode == "online"


#: the weight update modes the v1 trainer dispatches on (rl_trainer.py _init_impl l.400-450 at
#: cbff54d6; TrainEngineConfig.weight_update_mode's "choices", cli_args.py l.1340)
WEIGHT_UPDATE_MODES = ("disk", "xccl", "awex")


def weight_update_mode_is_known(run: Run) -> str | None:
    """rl_trainer._init_impl: with the v1 controllers (``actor._version`` v1, the default)
    the weight update is dispatched on ``actor.weight_update_mode``, and any other text
    raises "Invalid weight update mode: …" (l.448-450); v2 picks its transport from
    ``use_lora`` and reads no mode."""
    if not _rl(run) or run.version("actor") == "v2":
        return None
    mode = run.experiment.weight_update_mode
    if mode is None or mode in WEIGHT_UPDATE_MODES:
        return None
    return (
        f"actor.weight_update_mode={mode!r}: the trainer raises 'Invalid weight update mode: "
        f"{mode}' (it dispatches on disk, xccl or awex: areal/trainer/rl_trainer.py "
        f"_init_impl); set actor.weight_update_mode=xccl (the reference's default), disk or "
        f"awex"
    )


def v2_awex_needs_sglang_and_fsdp_or_megatron(run: Run) -> str | None:
    """The v2 controllers send weights by awex unless the actor trains LoRA (rl_trainer.py
    _init_impl l.380-399): connecting asks both sides for ``/awex/report_parallelism``
    (areal/v2/weight_update/gateway/app.py l.265-275), which only the SGLang inference
    service serves (areal/v2/inference_service/sglang/awex.py; its vllm package has no awex),
    and the training side has an awex adapter for the FSDP and Megatron engines only
    (areal/v2/training_service/worker/awex.py l.195-211: TypeError otherwise)."""
    if not _rl(run) or run.version("actor") != "v2":
        return None
    actor, rollout = run.engine("actor"), run.engine("rollout")
    if actor is None or rollout is None or actor.training is None or actor.training.use_lora:
        return None
    if rollout.allocation.backend != "sglang":
        return (
            f"actor._version='v2' without use_lora sends weights by awex, which needs an "
            f"sglang rollout, but {rollout.backend_key}={rollout.spec!r}: the vLLM inference "
            f"service has no /awex endpoints (areal/v2/weight_update/gateway/app.py asks it for "
            f"/awex/report_parallelism); serve with sglang, train LoRA (disk), or use v1"
        )
    if actor.allocation.backend not in ("fsdp", "megatron"):
        return (
            f"actor._version='v2' without use_lora sends weights by awex, which has training "
            f"adapters for fsdp and megatron only, but {actor.backend_key}={actor.spec!r}: "
            f"the worker raises 'Unsupported engine type for weight update' "
            f"(areal/v2/training_service/worker/awex.py); train with fsdp or megatron, or use v1"
        )
    return None


def online_mode_runs_by_steps(run: Run) -> str | None:
    """rl_trainer._init_impl: online RL (rollout.agent.mode='online') has no dataset to count.

    valid_dataset must not be set; total_train_steps must be, and be ≥ total_train_epochs.
    """
    if not _rl(run) or not _online(run):
        return None
    if run.startup.valid_dataset:
        return (
            "valid_dataset is set, but rollout.agent.mode='online' has no validation: remove "
            "valid_dataset (or ~valid_dataset on the command line)"
        )
    steps = run.startup.total_train_steps
    epochs = run.startup.epochs
    if steps is None:
        return (
            f"rollout.agent.mode='online' needs total_train_steps (each epoch runs "
            f"total_train_steps // total_train_epochs steps): set total_train_steps, e.g. "
            f"total_train_steps={100 * epochs}"
        )
    if steps < epochs:
        return (
            f"total_train_steps={steps} is less than total_train_epochs={epochs}, so an epoch "
            f"of rollout.agent.mode='online' would have {steps} // {epochs} = 0 steps: raise "
            f"total_train_steps to at least {epochs}"
        )
    return None


_RL = "areal/trainer/rl_trainer.py"

#: Every rule, in the order the reference meets them: its loader (``__post_init__``), then
#: the RL trainer's ``_validate_cfg`` and ``_init_impl``, the engines' construction, then the
#: dataloader and the launchers.
RULES: tuple[Rule, ...] = (
    Rule(
        "total_train_epochs ≥ 1",
        "areal/api/cli_args.py BaseExperimentConfig.__post_init__",
        epochs_are_positive,
    ),
    Rule(
        "_version is v1 or v2",
        "areal/api/cli_args.py TrainEngineConfig/InferenceEngineConfig.__post_init__",
        versions_are_known,
    ),
    Rule(
        "actor.prox_logp_method is a ProxLogpMethod",
        "areal/api/cli_args.py PPOActorConfig.__post_init__",
        prox_logp_method_is_known,
    ),
    Rule(
        "actor.enable_delta_weight_update needs ppo_n_minibatches 1",
        "areal/api/cli_args.py PPOActorConfig.__post_init__",
        delta_update_needs_one_minibatch,
    ),
    Rule(
        "fsdp.memory_efficient_load cannot init_from_scratch",
        "areal/api/cli_args.py TrainEngineConfig.__post_init__",
        memory_efficient_load_needs_weights,
    ),
    Rule(
        "offload (colocated actor↔rollout, any engine's offload) needs enable_offload",
        f"{_RL} _validate_cfg",
        offload_needs_enable_offload,
    ),
    Rule(
        "colocated actor↔rollout needs actor.weight_update_mode disk or awex",
        f"{_RL} _validate_cfg",
        colocation_needs_disk_or_awex,
    ),
    Rule("awex needs a megatron actor", f"{_RL} _validate_cfg", awex_needs_megatron_actor),
    Rule("awex needs an sglang rollout", f"{_RL} _validate_cfg", awex_needs_sglang_rollout),
    Rule(
        "vLLM cannot rollout.return_routed_experts",
        f"{_RL} _validate_cfg",
        vllm_cannot_return_routed_experts,
    ),
    Rule(
        "megatron actor with use_lora cannot update an sglang rollout",
        f"{_RL} _validate_cfg",
        megatron_lora_cannot_update_sglang,
    ),
    Rule("actor._version equals rollout._version", f"{_RL} _validate_cfg", versions_match),
    Rule(
        "online RL: no valid_dataset, total_train_steps ≥ total_train_epochs",
        f"{_RL} _init_impl",
        online_mode_runs_by_steps,
    ),
    Rule(
        "megatron engine with use_lora needs megatron.bridge_type megatron-bridge",
        "areal/engine/megatron_engine.py MegatronEngine.__init__ (line 475)",
        megatron_lora_needs_megatron_bridge,
    ),
    Rule(
        "megatron engine: virtual pipeline stages need megatron.bridge_type mbridge or "
        "megatron-bridge",
        "areal/models/mcore/registry.py make_mcore_model (lines 528-536)",
        megatron_vpp_needs_a_bridge,
    ),
    Rule(
        "archon: the model's type is one archon builds",
        "areal/experimental/engine/archon_engine.py ArchonEngine.__init__ (lines 157-161), "
        "_validate_model_type (lines 883-891)",
        archon_builds_the_model_type,
    ),
    Rule(
        "archon: etp is 1 or t, and e is a multiple of c (etp=t) or of c·t (etp=1)",
        "areal/experimental/models/archon/parallel_dims.py ArchonParallelDims.__post_init__ "
        "(lines 137-168)",
        archon_expert_mesh_fits,
    ),
    Rule(
        "full recomputation: megatron.recompute_method and recompute_num_layers are not null",
        "areal/engine/megatron_engine.py MegatronEngine._build_hf_mcore_bridge (lines 722-729); "
        "areal/models/mcore/registry.py make_mcore_model (lines 444-450)",
        full_recompute_needs_method_and_layers,
    ),
    Rule(
        "selective recomputation: megatron.recompute_num_layers is null",
        "areal/engine/megatron_engine.py MegatronEngine._build_hf_mcore_bridge (lines 722-729); "
        "areal/models/mcore/registry.py make_mcore_model (lines 444-450)",
        selective_recompute_needs_no_layer_count,
    ),
    Rule(
        "selective recomputation: recompute_modules moe_act needs a MoE model",
        "areal/engine/megatron_engine.py MegatronEngine._build_hf_mcore_bridge (lines 722-729); "
        "areal/models/mcore/registry.py make_mcore_model (lines 444-450)",
        moe_act_recompute_needs_experts,
    ),
    Rule(
        "selective recomputation: recompute_modules mla_up_proj needs MLA",
        "areal/engine/megatron_engine.py MegatronEngine._build_hf_mcore_bridge (lines 722-729); "
        "areal/models/mcore/registry.py make_mcore_model (lines 444-450)",
        mla_up_proj_recompute_needs_mla,
    ),
    Rule(
        "selective recomputation: no recompute_modules shared_experts with shared experts "
        "(mbridge; megatron-bridge: DeepSeek-V2/V3, GLM-4.5, Kimi-K2)",
        "areal/engine/megatron_engine.py MegatronEngine._build_hf_mcore_bridge (lines 722-729); "
        "areal/models/mcore/registry.py make_mcore_model (lines 425-500)",
        shared_experts_recompute_refuses_overlap,
    ),
    Rule(
        "megatron-bridge: the layers split evenly over p (and vpp)",
        "areal/models/mcore/registry.py make_mcore_model (lines 425-500)",
        megatron_bridge_splits_evenly,
    ),
    Rule(
        "archon p > 1: the model does not tie its embeddings",
        "areal/experimental/engine/archon_utils.py prepare_training_config (lines 353-363)",
        archon_pipeline_needs_untied_embeddings,
    ),
    Rule(
        "archon: the layers + embedding + output fill p × (stages per rank) virtual stages",
        "areal/experimental/models/archon/pipeline_parallel.py pipeline_llm (lines 409-453), "
        "generate_llm_fqn_per_model_part (lines 118-155)",
        archon_layers_fill_the_stages,
    ),
    Rule(
        "mbridge: megatron.moe_enable_deepep needs moe_token_dispatcher_type flex",
        "areal/engine/megatron_engine.py MegatronEngine._build_hf_mcore_bridge (lines 716-750)",
        megatron_deepep_needs_flex,
    ),
    Rule(
        "mbridge: no megatron.moe_token_dispatcher_type allgather",
        "areal/engine/megatron_engine.py MegatronEngine._build_hf_mcore_bridge (lines 716-750)",
        mbridge_allgather_needs_fixed_lengths,
    ),
    Rule(
        "mbridge, a MoE model: megatron.moe_token_dispatcher_type is allgather, alltoall or flex",
        "areal/engine/megatron_engine.py MegatronEngine._build_hf_mcore_bridge (lines 716-750)",
        moe_dispatcher_is_known,
    ),
    Rule(
        "tree training: no critic, c, archon p, megatron-bridge or chunked logits",
        "areal/engine/fsdp_engine.py initialize (lines 388-391); areal/engine/megatron_engine.py "
        "_prepare_mb_list (lines 2677-2682); areal/experimental/engine/archon_utils.py "
        "force_pad_to_maximum (lines 284-293)",
        tree_training_needs_no_context_parallelism,
    ),
    Rule(
        "fsdp engine: optimizer.type is adam, adam_bf16 or sgd",
        "areal/engine/fsdp_engine.py _create_optimizer (lines 1150-1160)",
        fsdp_builds_the_optimizer,
    ),
    Rule(
        "fsdp.per_layer_optim_step needs an adam optimizer",
        "areal/engine/fsdp_engine.py initialize (lines 473-477)",
        per_layer_optim_step_needs_adam,
    ),
    Rule(
        "megatron engine: optimizer.type is adam, adam_bf16 (as adam) or sgd",
        "areal/engine/megatron_engine.py _normalize_adam_bf16_config (lines 1650-1663), "
        "_create_optimizer (lines 1813-1816)",
        megatron_builds_the_optimizer,
    ),
    Rule(
        "archon engine: optimizer.type is adam or sgd",
        "areal/experimental/engine/archon_utils.py create_optimizer (lines 44-71)",
        archon_builds_the_optimizer,
    ),
    Rule(
        "actor.weight_update_mode is disk, xccl or awex (v1)",
        f"{_RL} _init_impl (lines 400-450)",
        weight_update_mode_is_known,
    ),
    Rule(
        "v2 without LoRA (awex): an sglang rollout and an fsdp or megatron actor",
        "areal/v2/weight_update/gateway/app.py (lines 265-275); areal/v2/training_service/"
        "worker/awex.py _create_training_adapter (lines 195-211)",
        v2_awex_needs_sglang_and_fsdp_or_megatron,
    ),
    Rule(
        "train_dataset.batch_size splits over the actor's data-parallel ranks",
        "areal/utils/dataloader.py create_dataloader; areal/utils/seqpack.py "
        "balanced_greedy_partition",
        batch_splits_over_data_parallel,
    ),
    Rule(
        "megatron engine: mb_spec.n_mbs is not null",
        "areal/engine/megatron_engine.py MegatronEngine._prepare_mb_list (lines 2705-2716)",
        megatron_micro_batches_are_counted,
    ),
    Rule(
        "each minibatch has a sequence for each of the actor's micro-batches",
        "areal/trainer/ppo/actor.py; areal/engine/megatron_engine.py min_n_mbs; "
        "areal/utils/seqpack.py ffd_allocate",
        minibatches_fill_their_micro_batches,
    ),
    Rule(
        "an inference server wider than a node spans whole nodes",
        "areal/infra/launcher/sglang_server.py run; areal/infra/scheduler/ray.py _build_node_plan",
        servers_span_whole_nodes,
    ),
    Rule(
        "scheduler.type slurm: each engine takes whole nodes",
        "areal/infra/scheduler/slurm.py _generate_sbatch_script",
        slurm_takes_whole_nodes,
    ),
    Rule(
        "scheduler.type local: a colocated rollout has one worker per target GPU",
        "areal/infra/scheduler/local.py LocalScheduler.create_workers (lines 692-699); "
        "areal/infra/controller/rollout_controller.py initialize (lines 175-197)",
        local_colocation_has_the_targets_workers,
    ),
)


def check_startup(experiment: Experiment) -> None:
    """Raise the first rule the reference would stop on, in its order."""
    run = Run(experiment, experiment.cluster.n_gpus_per_node)
    for rule in RULES:
        problem = rule.check(run)
        if problem is not None:
            raise AllocationValidationError(problem)


def startup_warnings(experiment: Experiment) -> list[str]:
    """What only one launch path refuses (the legacy SPMD launchers, or the single-controller
    trainers: an unknown ``scheduler.type``), the dispatcher settings megatron-bridge ignores,
    and micro-batch budgets a long sequence overflows."""
    run = Run(experiment, 0)
    out = _megatron_bridge_ignores(run)
    found = _batch(run)
    if found is not None:
        batch, items, dp, actor = found
        if batch % dp:
            out.append(
                f"train_dataset.batch_size={batch} is not a multiple of the {dp} data-parallel "
                f"ranks of {actor.backend_key}={actor.spec!r}: the single-controller trainer "
                f"splits its {items} trajectories evenly, but the legacy SPMD launchers "
                f"(areal.infra.launcher.local/ray/slurm) refuse it in their dataloader "
                f"(areal/utils/dataloader.py)"
            )
    out.extend(_budgets_below_a_sequence(run))
    kind = run.startup.scheduler_type
    if kind is not None and kind not in SCHEDULER_TYPES:
        out.append(
            f"scheduler.type={kind!r}: the single-controller trainers (python3 train.py) raise "
            f"NotImplementedError('Unknown scheduler type: {kind}') in _init_scheduler "
            f"(areal/trainer/rl_trainer.py, sft_trainer.py, rw_trainer.py, dpo_trainer.py); "
            f"only the legacy SPMD launchers (areal.infra.launcher.*) do not read it: set "
            f"scheduler.type=local, ray or slurm"
        )
    return out


#: the schedulers the single-controller trainers build (rl_trainer.py _init_scheduler
#: l.1051-1059 at cbff54d6; null is the examples' own, given on the command line)
SCHEDULER_TYPES = ("local", "ray", "slurm")


def _budgets_below_a_sequence(run: Run) -> list[str]:
    """In RL, a training engine's ``mb_spec.max_tokens_per_mb`` below the longest sequence of
    one turn: a prompt the dataset keeps (``train_dataset.max_length``: "Longer sequences
    are filtered out", _DatasetConfig) with a completion of ``gconfig.max_new_tokens``, at
    most ``gconfig.max_tokens`` (the rollout caps max_new_tokens at max_tokens − the prompt,
    areal/infra/remote_inf_engine.py l.942-944; a multi-turn trajectory can grow to
    max_tokens). seqpack packs whole sequences and raises on one over the budget
    (areal/utils/seqpack.py ffd_allocate l.239–240, kk_allocate l.497–500 at cbff54d6), so a
    step that meets one stops the run; shorter sequences run, so this warns, not refuses.
    And a prompt of ``gconfig.max_tokens`` tokens or more leaves nothing to generate: the
    rollout raises "max_new_tokens (…) is non-positive!" (l.945-950)."""
    shape = run.experiment.run
    if not _rl(run):  # SFT, reward modelling, DPO: the dataset's sequences, whole
        return _budgets_below_the_dataset(run, shape.max_length)
    out = []
    if shape.max_length is not None and shape.max_length >= shape.tokens_cap:
        out.append(
            f"train_dataset.max_length={shape.max_length} is not below gconfig.max_tokens "
            f"{shape.tokens_cap:,} (prompt and completion together): a prompt of "
            f"{shape.tokens_cap:,} tokens or more leaves no token to generate, and the rollout "
            f"raises 'max_new_tokens (…) is non-positive!' (areal/infra/remote_inf_engine.py); "
            f"set gconfig.max_tokens above it or lower train_dataset.max_length"
        )
    prompt = f"train_dataset.max_length {shape.max_length:,} + " if shape.max_length else ""
    longest = min((shape.max_length or 0) + shape.new_tokens, shape.tokens_cap)
    made = f"{prompt}gconfig.max_new_tokens {shape.new_tokens:,}"
    if shape.max_length is None:
        made += " (train_dataset.max_length unset: a completion alone)"
    if longest < (shape.max_length or 0) + shape.new_tokens:
        made = f"gconfig.max_tokens {shape.tokens_cap:,} (the cap on {made})"
    return out + _budgets_below(
        run, longest, f"is below the longest sequence of one turn, {made} = {longest:,} tokens"
    )


def _budgets_below_the_dataset(run: Run, max_length: int | None) -> list[str]:
    """Without a rollout, a training engine's budget below ``train_dataset.max_length``: a
    sequence the dataset keeps can be that long, and seqpack raises on it (a pair of them
    for reward modelling and DPO, which pack chosen and rejected together: longer still)."""
    if max_length is None:
        return []
    said = (
        f"is below train_dataset.max_length {max_length:,}, the longest sequence the dataset keeps"
    )
    return _budgets_below(run, max_length, said)


def _budgets_below(run: Run, longest: int, said: str) -> list[str]:
    """Each active training engine whose ``mb_spec.max_tokens_per_mb`` is below ``longest``
    tokens (``said``: why that long), for :func:`_budgets_below_a_sequence`."""
    out = []
    for engine in run.engines:
        training = engine.training
        if not engine.active or training is None or engine.allocation.is_inference:
            continue
        budget = training.max_tokens_per_mb
        if budget is None or budget >= longest:
            continue
        key = f"{engine.path}.mb_spec.max_tokens_per_mb"
        out.append(
            f"{key}={budget} {said}: a step with a sequence over {budget:,} stops the run in "
            f"seqpack (a value over its capacity {budget}, areal/utils/seqpack.py); set "
            f"{key}={longest} or more"
        )
    return out


def _megatron_bridge_ignores(run: Run) -> list[str]:
    """A dispatcher other than alltoall, or DeepEP, written for a megatron-bridge engine.

    areal/models/mcore/registry.py make_mcore_model (l.474-481 at cbff54d6) logs "Ignoring
    mcore_config.moe_token_dispatcher_type=… for bridge_type='megatron-bridge'; using
    'alltoall'" and sets alltoall; it passes no ``moe_enable_deepep`` to the provider.
    """
    out = []
    for engine in run.engines:
        training = engine.training
        if (
            not engine.active
            or engine.allocation.backend != "megatron"
            or training is None
            or training.bridge_type != "megatron-bridge"
        ):
            continue
        ignored = []
        if training.token_dispatcher != "alltoall":
            ignored.append(
                f"{engine.path}.megatron.moe_token_dispatcher_type={shown(training.token_dispatcher)}"
            )
        if training.moe_enable_deepep:
            ignored.append(f"{engine.path}.megatron.moe_enable_deepep=true")
        if ignored:
            out.append(
                f"{' and '.join(ignored)} ignored: with {engine.path}.megatron.bridge_type="
                f"'megatron-bridge' the reference's Megatron engine dispatches MoE tokens with "
                f"alltoall, without DeepEP (areal/models/mcore/registry.py make_mcore_model)"
            )
    return out
