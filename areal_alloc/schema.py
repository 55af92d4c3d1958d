"""Structured-config dataclasses for the engines: the strict schema ``areal_alloc/schema``.

Hydra finds it through areal-alloc's config source (built when a config asks
for it); ``register_configs()`` also stores it in Hydra's ConfigStore for code
that looks there.

The default is lenient: experiment YAMLs carry many keys areal-alloc does not
own (optimizer, mb_spec, …), and the validation hook type-checks only the
fields it owns. Users who want every unknown key rejected put the strict schema
in their defaults list: ``- areal_alloc/schema``. It declares exactly the keys
the plan reads, with the reference's names (areal/api/cli_args.py); every field
defaults to null, and an engine section left all-null is an engine nobody
configured, so the schema accepts every config the plain hook accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from areal_alloc.kinds import SchedulingStrategyType

__all__ = [
    "ActorConfig",
    "AgentConfig",
    "ClusterConfig",
    "CriticConfig",
    "DatasetConfig",
    "DistributedDataParallelConfig",
    "EngineConfig",
    "ExperimentConfig",
    "FSDPConfig",
    "GenerationConfig",
    "MegatronConfig",
    "MicroBatchConfig",
    "ModelShapeConfig",
    "NormConfig",
    "OptimizerConfig",
    "PolicyConfig",
    "RecoverConfig",
    "RejectionSamplingConfig",
    "SaverConfig",
    "SchedulerConfig",
    "SchedulingConfig",
    "ServerConfig",
    "StatsLoggerConfig",
    "TeacherConfig",
    "TrackerConfig",
    "register_configs",
]


@dataclass
class SchedulingConfig:
    """``separation`` (own GPUs) or ``colocation`` onto ``target`` (an engine key)."""

    type: SchedulingStrategyType = SchedulingStrategyType.separation
    target: str | None = None
    fork: bool | None = None  # the reference's process-isolation flag; not read here


@dataclass
class ModelShapeConfig:
    """The model sizes a layout must divide, or ``path`` to a local model folder.

    With the widths too (``hidden_size`` …, Hugging Face's names) it is a whole
    architecture, and memory is estimated from it.
    """

    path: str | None = None
    num_layers: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    num_experts: int | None = None
    vocab_size: int | None = None
    virtual_pipeline_size: int | None = None
    hidden_size: int | None = None
    head_dim: int | None = None
    intermediate_size: int | None = None
    num_experts_per_tok: int | None = None
    moe_intermediate_size: int | None = None
    n_shared_experts: int | None = None
    first_k_dense_replace: int | None = None
    tie_word_embeddings: bool | None = None
    model_type: str | None = None


@dataclass
class OptimizerConfig:
    """``optimizer.type``: adam, adam_bf16 or sgd (the reference's choices)."""

    type: str | None = None


@dataclass
class MicroBatchConfig:
    """``mb_spec``: the tokens one micro-batch packs, the least count of micro-batches and
    the packing algorithm."""

    max_tokens_per_mb: int | None = None
    n_mbs: int | None = None
    packing_algorithm: str | None = None  # ffd or kk (the reference's loader refuses the rest)
    n_mbs_divisor: int | None = None
    granularity: int | None = None


@dataclass
class DistributedDataParallelConfig:
    use_distributed_optimizer: bool | None = None


@dataclass
class MegatronConfig:
    """The Megatron settings that change memory."""

    recompute_granularity: str | None = None
    #: what selective recomputation recomputes (megatron-core's names; TrainingSettings)
    recompute_modules: list[str] | None = None
    virtual_pipeline_parallel_size: int | None = None
    use_precision_aware_optimizer: bool | None = None
    #: mbridge (the reference's default) or megatron-bridge (needed with use_lora)
    bridge_type: str | None = None
    #: the MoE token dispatcher and DeepEP (the start-up rules; TrainingSettings)
    moe_enable_deepep: bool | None = None
    moe_token_dispatcher_type: str | None = None
    #: the recompute_modules start-up rules (megatron-core's TransformerConfig)
    recompute_num_layers: int | None = None
    #: full recomputation needs block or uniform (the start-up rules)
    recompute_method: str | None = None
    moe_shared_expert_overlap: bool | None = None
    enable_chunked_logits: bool | None = None  # refuses tree training (the start-up rules)
    #: the loader's lm_head_loss_chunk_size checks (MegatronEngineConfig.__post_init__)
    lm_head_loss_chunk_size: int | None = None
    entropy_requires_grad: bool | None = None
    enable_mtp: bool | None = None
    #: torch_memory_saver keeps no CPU copy of the gradient buffers (the host estimate)
    disable_grad_buffers_cpu_backup: bool | None = None
    ddp: DistributedDataParallelConfig = field(default_factory=DistributedDataParallelConfig)


@dataclass
class ArchonFP8Config:
    """``archon.fp8_config``: the mode and Triton kernel the loader checks."""

    mode: str | None = None
    use_triton: bool | None = None


@dataclass
class ArchonConfig:
    """The archon engine's activation checkpointing (with gradient_checkpointing), its
    pipeline schedule and split, and compilation (which pads every micro-batch)."""

    ac_mode: str | None = None
    selective_ac_option: str | None = None
    pp_schedule: str | None = None
    pp_layers_per_stage: int | None = None
    pp_first_stage_less_layers: int | None = None
    pp_last_stage_less_layers: int | None = None
    enable_compile: bool | None = None
    #: refused at load outside their choices, in any training section (the loader)
    reshard_after_forward_policy: str | None = None
    moe_router_dtype: str | None = None
    fp8_config: ArchonFP8Config = field(default_factory=ArchonFP8Config)


@dataclass
class FSDPConfig:
    offload_params: bool | None = None
    memory_efficient_load: bool | None = None
    #: the optimizer's states on the CPU, streamed per layer (memory; a start-up rule)
    per_layer_optim_step: bool | None = None
    optim_step_prefetch_layers: int | None = None


@dataclass
class AgentConfig:
    """``rollout.agent``: ``mode: online`` runs by steps (areal_alloc.experiment.rules)."""

    mode: str | None = None


@dataclass
class SchedulerConfig:
    """``scheduler.type``: ``slurm`` allocates whole nodes (areal_alloc.experiment.rules)."""

    type: str | None = None


@dataclass
class EngineConfig:
    """One engine: its backend string and scheduling (null: not configured), the model it
    runs, and the settings that change its memory per GPU."""

    backend: str | None = None
    scheduling_strategy: SchedulingConfig = field(default_factory=SchedulingConfig)
    path: str | None = None
    model_shape: ModelShapeConfig = field(default_factory=ModelShapeConfig)
    dtype: str | None = None
    optimizer_dtype: str | None = None
    gradient_checkpointing: bool | None = None
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    mb_spec: MicroBatchConfig = field(default_factory=MicroBatchConfig)
    megatron: MegatronConfig = field(default_factory=MegatronConfig)
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    archon: ArchonConfig = field(default_factory=ArchonConfig)
    offload: bool | None = None
    #: the reference's SchedulingSpec list; its first's cpu, gpu and mem are read (the host
    #: estimate), the rest (cmd, env_vars, image …) passes as the reference's loader takes it
    scheduling_spec: list[Any] | None = None
    pad_to_maximum: bool | None = None
    enable_tree_training: bool | None = None
    is_critic: bool | None = None
    lora_rank: int | None = None
    target_modules: list[str] | None = None
    max_concurrent_rollouts: int | None = None
    max_head_offpolicyness: int | None = None  # rollout
    # read by the reference's start-up rules (areal_alloc.experiment.rules)
    _version: str | None = None
    use_lora: bool | None = None
    init_from_scratch: bool | None = None
    return_routed_experts: bool | None = None  # rollout
    agent: AgentConfig = field(default_factory=AgentConfig)  # rollout
    # refused at load outside their range (areal_alloc.experiment.loader)
    logprobs_chunk_size: int | None = None
    attn_impl: str | None = None
    deterministic_sampling: bool | None = None  # rollout


@dataclass
class NormConfig:
    """``reward_norm`` / ``adv_norm``: the levels and group size the loader checks."""

    mean_level: str | None = None
    std_level: str | None = None
    group_size: int | None = None


@dataclass
class RejectionSamplingConfig:
    """``rejection_sampling``: the choices and bounds the loader checks."""

    level: str | None = None
    action: str | None = None
    metric: str | None = None
    agg: str | None = None
    upper: float | None = None
    lower: float | None = None


@dataclass
class PolicyConfig(EngineConfig):
    """A PPOActorConfig (actor, ref, teacher.train): the loss settings its loader checks
    (areal_alloc.experiment.loader); a section left all-null is one nobody set."""

    use_sapo_loss: bool | None = None
    sapo_tau_pos: float | None = None
    sapo_tau_neg: float | None = None
    use_cispo_loss: bool | None = None
    eps_clip_higher: float | None = None
    importance_sampling_level: str | None = None
    gae_timestep_unit: str | None = None
    gae_lambda: float | str | None = None  # a number or a dotted function path
    use_decoupled_loss: bool | None = None
    loss_type: str | None = None  # a DPO run's actor and ref: sigmoid or ipo (the loader)
    reward_norm: NormConfig | None = field(default_factory=NormConfig)
    adv_norm: NormConfig | None = field(default_factory=NormConfig)
    rejection_sampling: RejectionSamplingConfig | None = field(
        default_factory=RejectionSamplingConfig
    )


@dataclass
class ServerConfig:
    """``sglang`` / ``vllm``: the model served and how much memory its KV cache gets."""

    model_path: str | None = None  # sglang
    model: str | None = None  # vllm
    dtype: str | None = None
    kv_cache_dtype: str | None = None
    mem_fraction_static: float | None = None  # sglang
    context_length: int | None = None  # sglang
    max_running_requests: int | None = None  # sglang
    gpu_memory_utilization: float | None = None  # vllm
    max_model_len: int | None = None  # vllm
    max_num_seqs: int | None = None  # vllm
    cpu_offload_gb: float | None = None  # GiB of weights per GPU in host memory (both)
    # the servers' start-up rules (areal_alloc.experiment.server_rules)
    dp_size: int | None = None  # sglang
    ep_size: int | None = None  # sglang
    enable_dp_attention: bool | None = None  # sglang
    enable_ep_moe: bool | None = None  # sglang
    enable_memory_saver: bool | None = None  # sglang
    chunked_prefill_size: int | None = None  # sglang
    max_prefill_tokens: int | None = None  # sglang
    enable_sleep_mode: bool | None = None  # vllm


@dataclass
class ActorConfig(PolicyConfig):
    """The actor, with the run settings that decide which other engines exist."""

    kl_ctl: float | None = None
    weight_update_mode: str | None = None
    enable_delta_weight_update: bool | None = None
    ppo_n_minibatches: int | None = None
    # the actor's extra forward each step (PPOActorConfig.should_compute_prox_logp)
    recompute_logprob: bool | None = None
    prox_logp_method: str | None = None


@dataclass
class CriticConfig(EngineConfig):
    """The critic, with its own optimizer steps per RL step."""

    ppo_n_minibatches: int | None = None


@dataclass
class TeacherConfig(EngineConfig):
    """The teacher: ``engine_type`` selects ``rollout`` or ``train``; flat ``backend`` is older."""

    engine_type: str | None = None
    rollout: EngineConfig = field(default_factory=EngineConfig)
    train: PolicyConfig = field(default_factory=PolicyConfig)


@dataclass
class ClusterConfig:
    """The cluster; null sizes take the reference's defaults (32 nodes × 8 GPUs)."""

    n_nodes: int | None = None
    n_gpus_per_node: int | None = None
    gpu: str | None = None  # a catalogue name: H100-80GB, H200, A100-40GB …
    gpu_memory_gib: float | None = None
    memory_reserve_gib: float | None = None
    peak_tflops: float | None = None
    hbm_tbps: float | None = None
    nvlink_gbps: float | None = None
    inter_node_gbps: float | None = None
    disk_gbps: float | None = None
    compute_efficiency: float | None = None
    comm_efficiency: float | None = None


@dataclass
class DatasetConfig:
    """``train_dataset``: prompts per step and their length (the run's pace)."""

    batch_size: int | None = None
    max_length: int | None = None


@dataclass
class GenerationConfig:
    """``gconfig``: samples per prompt and tokens generated (the run's pace)."""

    n_samples: int | None = None
    max_new_tokens: int | None = None
    max_tokens: int | None = None  # prompt + completion at most
    reward_normalization: bool | None = None  # refused with actor.reward_norm (the loader)
    seed: int | None = None  # refused with deterministic grouped rollouts (the loader)


@dataclass
class SaverConfig:
    """``saver.mode``: auto, sync or async (areal_alloc.experiment.loader)."""

    mode: str | None = None


@dataclass
class RecoverConfig:
    """``recover.mode``: on, off, auto or disabled (areal_alloc.experiment.loader)."""

    mode: str | None = None


@dataclass
class TrackerConfig:
    """``stats_logger.wandb`` / ``swanlab`` / ``trackio``: each one's ``mode``."""

    mode: str | None = None


@dataclass
class StatsLoggerConfig:
    wandb: TrackerConfig = field(default_factory=TrackerConfig)
    swanlab: TrackerConfig = field(default_factory=TrackerConfig)
    trackio: TrackerConfig = field(default_factory=TrackerConfig)


@dataclass
class ExperimentConfig:
    """The strict schema: every engine, the cluster and the model shape, nothing else."""

    rollout: EngineConfig = field(default_factory=EngineConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    ref: PolicyConfig = field(default_factory=PolicyConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    model_shape: ModelShapeConfig = field(default_factory=ModelShapeConfig)
    sglang: ServerConfig = field(default_factory=ServerConfig)
    vllm: ServerConfig = field(default_factory=ServerConfig)
    train_dataset: DatasetConfig = field(default_factory=DatasetConfig)
    valid_dataset: DatasetConfig = field(default_factory=DatasetConfig)
    gconfig: GenerationConfig = field(default_factory=GenerationConfig)
    eval_gconfig: GenerationConfig | None = field(default_factory=GenerationConfig)
    # the modes the reference's loader checks (areal_alloc.experiment.loader)
    saver: SaverConfig = field(default_factory=SaverConfig)
    recover: RecoverConfig = field(default_factory=RecoverConfig)
    stats_logger: StatsLoggerConfig = field(default_factory=StatsLoggerConfig)
    # the run settings the reference's start-up rules read (areal_alloc.experiment.rules)
    enable_offload: bool | None = None
    total_train_epochs: int | None = None
    total_train_steps: int | None = None
    dynamic_bs: bool | None = None
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    # Declared so the deprecated key reaches the hook's migration message
    # instead of a generic "not in struct" error.
    allocation_mode: str | None = None


def register_configs() -> None:
    """Store the strict schema as ``areal_alloc/schema`` (safe to call again)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(
        group="areal_alloc", name="schema", node=ExperimentConfig, package="_global_"
    )
