"""The keys the plan reads that the reference's loader refuses as ``null``.

``load_expr_config`` merges the experiment into ``OmegaConf.structured(config_cls)``, and
OmegaConf refuses ``None`` for a field typed without it ("Incompatible value 'None' for
field of type 'bool'"; "field 'target_modules' is not Optional" for a list or a section).
areal-alloc's reader takes a null as "not set" (its strict schema writes every field null),
so a plain config's null is checked here, once, against the reference's own types: each
row is (key, its type, its line in areal/api/cli_args.py at areal-project/AReaL@
cbff54d645d2cd8ee1f1c358a82f3f473588433d). A null where the field is Optional (``mb_spec.
max_tokens_per_mb``, ``megatron.recompute_granularity``, a ``critic`` section …) passes.
"""

from __future__ import annotations

from areal_alloc._config import child, is_mapping, keys, strict_schema
from areal_alloc.errors import AllocationValidationError

__all__ = ["NOT_NULL", "null_refusal", "refuse_nulls"]

#: TrainEngineConfig and the sections it holds (MicroBatchSpec l.127, FSDPEngineConfig,
#: ArchonEngineConfig, MegatronEngineConfig, DistributedDataParallelConfig, OptimizerConfig,
#: SchedulingStrategy)
_TRAIN: tuple[tuple[str, str, int], ...] = (
    ("_version", "str", 1419),
    ("backend", "str", 1410),
    ("path", "str", 1253),
    ("dtype", "str", 1305),
    ("optimizer_dtype", "str", 1312),
    ("gradient_checkpointing", "bool", 1302),
    ("init_from_scratch", "bool", 1269),
    ("is_critic", "bool", 1272),
    ("pad_to_maximum", "bool", 1288),
    ("enable_tree_training", "bool", 1392),
    ("weight_update_mode", "str", 1335),
    ("enable_delta_weight_update", "bool", 1343),
    ("offload", "bool", 1366),
    ("scheduling_spec", "tuple[SchedulingSpec, ...]", 1398),
    ("use_lora", "bool", 1374),
    ("lora_rank", "int", 1380),
    ("target_modules", "list[str]", 1382),
    ("mb_spec", "MicroBatchSpec", 1287),
    ("mb_spec.granularity", "int", 109),
    ("mb_spec.n_mbs_divisor", "int", 121),
    ("mb_spec.packing_algorithm", "str", 127),
    ("fsdp", "FSDPEngineConfig", 1361),
    ("fsdp.offload_params", "bool", 489),
    ("fsdp.memory_efficient_load", "bool", 493),
    ("fsdp.per_layer_optim_step", "bool", 503),
    ("fsdp.optim_step_prefetch_layers", "int", 512),
    ("archon", "ArchonEngineConfig", 1362),
    ("archon.enable_compile", "bool", 625),
    ("archon.ac_mode", "str", 631),
    ("archon.selective_ac_option", "str", 639),
    ("archon.pp_schedule", "str", 668),
    ("archon.pp_first_stage_less_layers", "int", 693),
    ("archon.pp_last_stage_less_layers", "int", 700),
    ("archon.reshard_after_forward_policy", "str", 709),
    ("archon.fp8_config", "ArchonFP8Config", 721),
    ("archon.fp8_config.mode", "str", 536),
    ("archon.fp8_config.use_triton", "bool", 572),
    ("megatron", "MegatronEngineConfig", 1363),
    ("megatron.ddp", "DistributedDataParallelConfig", 912),
    ("megatron.ddp.use_distributed_optimizer", "bool", 790),
    ("megatron.virtual_pipeline_parallel_size", "int", 915),
    ("megatron.use_precision_aware_optimizer", "bool", 929),
    ("megatron.moe_shared_expert_overlap", "bool", 973),
    ("megatron.moe_enable_deepep", "bool", 980),
    ("megatron.moe_token_dispatcher_type", "str", 981),
    ("megatron.enable_chunked_logits", "bool", 1017),
    ("megatron.entropy_requires_grad", "bool", 1025),
    ("megatron.lm_head_loss_chunk_size", "int", 1034),
    ("megatron.enable_mtp", "bool", 1099),
    ("megatron.disable_grad_buffers_cpu_backup", "bool", 1089),
    ("megatron.bridge_type", "str", 1064),
    ("optimizer.type", "str", 382),
    ("scheduling_strategy", "SchedulingStrategy", 1450),
    ("scheduling_strategy.type", "str", 1132),
    ("logprobs_chunk_size", "int", 1279),
    ("attn_impl", "str", 1254),
)
#: PPOActorConfig's own (the actor; ``ref`` is one too, PPOConfig l.3411, and
#: ``teacher.train``, TeacherConfig l.3353)
_ACTOR = (
    ("kl_ctl", "float", 1771),
    ("recompute_logprob", "bool", 1804),
    ("use_decoupled_loss", "bool", 1810),
    ("prox_logp_method", "str", 1832),
    ("ppo_n_minibatches", "int", 1676),
    # the loader's checks (areal_alloc.experiment.loader); NormConfig l.76 and
    # RejectionSamplingConfig l.1533-1582 under the Optional reward_norm, adv_norm and
    # rejection_sampling
    ("gae_timestep_unit", "str", 1757),
    ("gae_lambda", "Union[float, str]", 1737),
    ("use_sapo_loss", "bool", 1778),
    ("sapo_tau_pos", "float", 1782),
    ("sapo_tau_neg", "float", 1786),
    ("use_cispo_loss", "bool", 1792),
    ("importance_sampling_level", "str", 1824),
    ("reward_norm.group_size", "int", 76),
    ("adv_norm.group_size", "int", 76),
    ("rejection_sampling.level", "str", 1533),
    ("rejection_sampling.action", "str", 1544),
    ("rejection_sampling.metric", "str", 1555),
    ("rejection_sampling.agg", "str", 1568),
    ("rejection_sampling.upper", "float", 1582),
)
#: InferenceEngineConfig (the rollout, a served teacher)
_INFERENCE = (
    ("_version", "str", 2628),
    ("backend", "str", 2585),
    ("max_head_offpolicyness", "int", 2502),
    ("return_routed_experts", "bool", 2620),
    ("agent", "AgentConfig", 2612),
    ("agent.mode", "str", 2359),
    ("scheduling_strategy", "SchedulingStrategy", 2592),
    ("scheduling_strategy.type", "str", 1132),
    ("deterministic_sampling", "bool", 2516),
    ("scheduling_spec", "tuple[SchedulingSpec, ...]", 2573),
)
#: the experiment's own (BaseExperimentConfig, PPOConfig, TeacherConfig, the servers, the
#: cluster, the dataset and the generation settings)
_TOP = (
    ("enable_offload", "bool", 3206),
    ("total_train_epochs", "int", 3213),
    ("dynamic_bs", "bool", 3424),
    ("rollout", "InferenceEngineConfig", 3409),
    ("actor", "PPOActorConfig", 3410),
    ("cluster", "ClusterSpecConfig", 3193),
    ("cluster.n_nodes", "int", 3054),
    ("cluster.n_gpus_per_node", "int", 3060),
    ("train_dataset", "TrainDatasetConfig", 3235),
    ("train_dataset.batch_size", "int", 3097),
    ("gconfig", "GenerationHyperparameters", 3400),
    ("gconfig.n_samples", "int", 167),
    ("gconfig.max_new_tokens", "int", 170),
    ("gconfig.max_tokens", "int", 176),
    ("gconfig.reward_normalization", "bool", 243),
    ("eval_gconfig.n_samples", "int", 167),
    # the modes the loader checks (SaverConfig, RecoverConfig, StatsLoggerConfig and its
    # trackers' configs)
    ("saver", "SaverConfig", 3238),
    ("saver.mode", "str", 2738),
    ("stats_logger", "StatsLoggerConfig", 3240),
    ("stats_logger.wandb", "WandBConfig", 2910),
    ("stats_logger.wandb.mode", "str", 2809),
    ("stats_logger.swanlab", "SwanlabConfig", 2914),
    ("stats_logger.swanlab.mode", "str", 2845),
    ("stats_logger.trackio", "TrackioConfig", 2922),
    ("stats_logger.trackio.mode", "str", 2884),
    ("recover", "RecoverConfig", 3251),
    ("recover.mode", "str", 2763),
    ("scheduler", "SchedulerConfig", 3256),
    ("sglang", "SGLangConfig", 3253),
    ("sglang.model_path", "str", 2158),
    ("sglang.dtype", "str", 2198),
    ("sglang.kv_cache_dtype", "str", 2199),
    ("sglang.cpu_offload_gb", "int", 2197),
    ("sglang.enable_dp_attention", "bool", 2169),
    ("sglang.enable_ep_moe", "bool", 2170),
    ("sglang.enable_memory_saver", "bool", 2182),
    ("sglang.max_prefill_tokens", "int", 2194),
    ("sglang.dp_size", "int", 2200),
    ("sglang.ep_size", "int", 2201),
    ("vllm", "vLLMConfig", 3254),
    ("vllm.model", "str", 2031),
    ("vllm.dtype", "str", 2035),
    ("vllm.max_num_seqs", "int", 2038),
    ("vllm.gpu_memory_utilization", "float", 2058),
    ("vllm.cpu_offload_gb", "float", 2041),
    ("vllm.enable_sleep_mode", "bool", 2062),
    ("teacher.engine_type", "str", 3344),
    ("teacher.path", "str", 3359),
    ("teacher.offload", "bool", 3365),
)


def _under(prefix: str, rows: tuple[tuple[str, str, int], ...]) -> tuple[tuple[str, str, int], ...]:
    return tuple((f"{prefix}.{key}", kind, line) for key, kind, line in rows)


#: every key the plan reads that the reference types without None: (dotted key, type, line)
NOT_NULL: tuple[tuple[str, str, int], ...] = (
    *_TOP,
    *_under("actor", _TRAIN + _ACTOR),
    *_under("ref", _TRAIN + _ACTOR),
    # DPOConfig's engines (DPOEngineConfig, l.3297-3322): the loss the loader checks
    *_under("actor", (("loss_type", "str", 3305),)),
    *_under("ref", (("loss_type", "str", 3305),)),
    *_under("critic", (*_TRAIN, ("ppo_n_minibatches", "int", 1993))),
    *_under("rollout", _INFERENCE),
    *_under("teacher.train", _TRAIN + _ACTOR),
    *_under("teacher.rollout", _INFERENCE),
)


#: one node of :data:`NOT_NULL` as a tree: its keys (type, line) and its sections
_Tree = tuple[dict[str, tuple[str, int]], dict[str, "_Tree"]]


def _tree() -> _Tree:
    """:data:`NOT_NULL` as a tree of sections, walked once from the root."""
    root: _Tree = ({}, {})
    for dotted, kind, line in NOT_NULL:
        *parents, key = dotted.split(".")
        node = root
        for part in parents:
            node = node[1].setdefault(part, ({}, {}))
        node[0][key] = (kind, line)
    return root


_TREE = _tree()


def _is_null(node: object, key: str) -> bool:
    """Whether ``node[key]`` is null; a DictConfig's plain value is read without resolving
    it (an interpolation is resolved, as the reference's merge resolves it)."""
    from omegaconf import DictConfig

    if isinstance(node, DictConfig):
        found = node._get_node(key)
        if found is not None and not found._is_interpolation():
            return bool(found._is_none())
    return child(node, key) is None


def refuse_nulls(cfg: object) -> None:
    """Raise for the first key of :data:`NOT_NULL` written as null (a plain mapping's or
    DictConfig's; the strict schema's nulls are its unset keys)."""
    _walk(cfg, _TREE, ())


def null_refusal(dotted: str, kind: str, where: str) -> AllocationValidationError:
    """``dotted=null`` refused for a field of type ``kind`` (``bool``, ``list[str]``, a
    section's class, ``Union[float, str]``), in OmegaConf's words; ``where`` cites the
    field (the strict-key check, areal_alloc.experiment.reference_keys, says it too)."""
    key = dotted.rsplit(".", 1)[-1]
    found = f"Incompatible value 'None' for field of type '{kind}'"
    if kind.startswith(("list", "dict")) or kind[0].isupper():
        found = f"field '{key}' is not Optional"
    if kind.startswith("Union["):  # OmegaConf's words for a union of primitives
        found = f"Value 'None' is incompatible with type hint '{kind}'"
    return AllocationValidationError(
        f"{dotted}=null: the reference's loader refuses it (the field is {kind}, not "
        f'Optional: OmegaConf raises "{found}"; {where}); remove the key to take the '
        f"reference's default"
    )


def _walk(node: object, tree: _Tree, path: tuple[str, ...]) -> None:
    if not is_mapping(node) or strict_schema(node):
        return
    rows, sections = tree
    for key in keys(node):
        if key in rows and _is_null(node, key):
            kind, line = rows[key]
            dotted = ".".join((*path, key))
            raise null_refusal(dotted, kind, f"areal/api/cli_args.py l.{line} at cbff54d6")
        if key in sections:
            _walk(_section(node, key), sections[key], (*path, key))


def _section(node: object, key: str) -> object:
    """``node[key]``; a DictConfig's section is taken as it is (no copy, no resolution)."""
    from omegaconf import DictConfig

    if isinstance(node, DictConfig):
        found = node._get_node(key)
        if isinstance(found, DictConfig) and not found._is_interpolation():
            return found
    return child(node, key)
