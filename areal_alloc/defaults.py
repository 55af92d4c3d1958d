"""The reference's defaults that change an estimate: one table, each row citing its source.

Every value is read from the reference (github.com/areal-project/AReaL) at snapshot
commit cbff54d645d2cd8ee1f1c358a82f3f473588433d (main, 2026-08-22); the file and
the field are named in the row. Modules that need one of these import the named
constant below; nothing else writes the number again.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AGENT_MODE",
    "ARCHON_PP_SCHEDULE",
    "ARCHON_PP_SCHEDULES",
    "ARCHON_STAGES_PER_RANK",
    "BRIDGE_TYPE",
    "CHUNKED_PREFILL_SIZE",
    "CONTEXT_LENGTH",
    "DTYPE",
    "ENABLE_OFFLOAD",
    "ENGINE_OPTIMIZERS",
    "ENGINE_VERSION",
    "LORA_ALPHA",
    "LORA_RANK",
    "MAX_PREFILL_TOKENS",
    "MAX_TOKENS",
    "MEMORY_FRACTION",
    "MICRO_BATCHES",
    "MICRO_BATCH_TOKENS",
    "MOE_ENABLE_DEEPEP",
    "MOE_SHARED_EXPERT_OVERLAP",
    "NEW_TOKENS",
    "OPTIMIZER_DTYPE",
    "PPO_MINIBATCHES",
    "PROMPT_TOKENS",
    "PROX_LOGP_METHOD",
    "PROX_LOGP_METHODS",
    "PROX_LOGP_SKIPS_FORWARD",
    "RECOMPUTE",
    "RECOMPUTE_NUM_LAYERS",
    "REFERENCE_COMMIT",
    "REFERENCE_DEFAULTS",
    "SAMPLES",
    "STEP_PROMPTS",
    "TOKENS_PER_STEP",
    "TOKEN_DISPATCHER",
    "TRAIN_BATCH",
    "TRAIN_EPOCHS",
    "WEIGHT_UPDATE_MODE",
    "ReferenceDefault",
]

REFERENCE_COMMIT = "cbff54d645d2cd8ee1f1c358a82f3f473588433d"


@dataclass(frozen=True, slots=True)
class ReferenceDefault:
    """One default: the config key(s), the value, and where the reference sets it."""

    keys: str
    value: object
    source: str


#: sglang.context_length and vllm.max_model_len (SGLangConfig.context_length,
#: vLLMConfig.max_model_len in areal/api/cli_args.py); also the sequence length a
#: tool assumes when told nothing else.
CONTEXT_LENGTH = 32768
#: sglang.mem_fraction_static / vllm.gpu_memory_utilization (areal/api/cli_args.py)
MEMORY_FRACTION = 0.9
#: SGLangConfig.chunked_prefill_size (-1: chunked prefill off, "to avoid precision issues")
#: and max_prefill_tokens (areal/api/cli_args.py l.2193-2194 at cbff54d6)
CHUNKED_PREFILL_SIZE = -1
MAX_PREFILL_TOKENS = 32768
#: TrainEngineConfig.dtype (areal/api/cli_args.py)
DTYPE = "bfloat16"
#: TrainEngineConfig.optimizer_dtype: FSDP's parameter storage (areal/api/cli_args.py)
OPTIMIZER_DTYPE = "float32"
#: TrainEngineConfig.lora_rank / lora_alpha (areal/api/cli_args.py)
LORA_RANK = 32
LORA_ALPHA = 16
#: MicroBatchSpec.n_mbs (areal/api/cli_args.py): with max_tokens_per_mb unset the
#: local batch is split into this many micro-batches by count (areal/utils/data.py)
MICRO_BATCHES = 1
#: GenerationHyperparameters.n_samples / max_new_tokens (areal/api/cli_args.py)
SAMPLES = 1
NEW_TOKENS = 16384
#: GenerationHyperparameters.max_tokens (areal/api/cli_args.py l.176-181): "Maximum number of
#: tokens including prompt and generated tokens"; the rollout caps each request's
#: max_new_tokens at max_tokens − its prompt (areal/infra/remote_inf_engine.py l.942-944)
MAX_TOKENS = 32768
#: _DatasetConfig.batch_size (areal/api/cli_args.py)
TRAIN_BATCH = 1
#: not a reference default: _DatasetConfig.max_length is None (no limit); areal-alloc
#: assumes prompts of this many tokens and says so
PROMPT_TOKENS = 1024
#: TrainEngineConfig.gradient_checkpointing = False (areal/api/cli_args.py line 1302):
#: no activation recomputation, the --recompute default of every command
RECOMPUTE = "none"
#: not a reference default: MicroBatchSpec.max_tokens_per_mb is None, and
#: areal/utils/data.py then splits by count with DEFAULT_MAX_TOKENS_PER_MB = 1e12 (a
#: micro-batch of each rank's whole share, whose size depends on the batch, which a command
#: given no config does not know). Every command's --tokens default is instead one sequence
#: of the default context length (CONTEXT_LENGTH): the smallest micro-batch that holds any
#: sequence the default server accepts.
MICRO_BATCH_TOKENS = CONTEXT_LENGTH
#: not a reference default: training tokens per optimizer step that explain, layouts
#: --rank and calibrate assume when --tokens-per-step is not given (2**20)
TOKENS_PER_STEP = 1 << 20
#: not a reference default (train_dataset.batch_size is TRAIN_BATCH = 1): the prompts per
#: RL step suggest assumes without a --config (--batch-size), each sampled SAMPLES times
STEP_PROMPTS = 512
#: The keys only the start-up rules read (areal_alloc.experiment.rules), each with its
#: line in areal/api/cli_args.py at REFERENCE_COMMIT.
#: BaseExperimentConfig.enable_offload (3206)
ENABLE_OFFLOAD = False
#: BaseExperimentConfig.total_train_epochs (3213)
TRAIN_EPOCHS = 1
#: TrainEngineConfig.weight_update_mode (1335)
WEIGHT_UPDATE_MODE = "xccl"
#: TrainEngineConfig._version (1419) and InferenceEngineConfig._version (2628)
ENGINE_VERSION = "v1"
#: PPOActorConfig.ppo_n_minibatches (1676) and PPOCriticConfig.ppo_n_minibatches (1993)
PPO_MINIBATCHES = 4
#: PPOActorConfig.prox_logp_method (1833, PROX_LOGP_METHOD_RECOMPUTE) and its choices,
#: areal/utils/constants.py ProxLogpMethod (l.36-55; PROX_LOGP_METHODS_ALL l.84); the two
#: that skip the extra forward (ProxLogpMethod.skips_forward_pass, l.53-55)
PROX_LOGP_METHOD = "recompute"
PROX_LOGP_METHODS = ("recompute", "loglinear", "metrics", "reuse_train_logp")
PROX_LOGP_SKIPS_FORWARD = ("loglinear", "reuse_train_logp")
#: MegatronEngineConfig.bridge_type (1064)
BRIDGE_TYPE = "mbridge"
#: MegatronEngineConfig.moe_enable_deepep (980)
MOE_ENABLE_DEEPEP = False
#: MegatronEngineConfig.moe_token_dispatcher_type (981; "Options: 'allgather','alltoall'
#: and 'flex'.")
TOKEN_DISPATCHER = "alltoall"
#: MegatronEngineConfig.moe_shared_expert_overlap (973)
MOE_SHARED_EXPERT_OVERLAP = False
#: MegatronEngineConfig.recompute_num_layers (967; passed to megatron-core with
#: gradient_checkpointing, which refuses a number under selective granularity)
RECOMPUTE_NUM_LAYERS: int | None = 1
#: AgentConfig.mode (2359)
AGENT_MODE = "inline"
#: ArchonEngineConfig.pp_schedule's choices (668-680) and the virtual stages per pipeline
#: rank each runs when pp_layers_per_stage is unset: 1 for a single-stage schedule (1F1B),
#: 2 for the others (areal/experimental/models/archon/pipeline_parallel.py pipeline_llm
#: l.450-453). ZBVZeroBubble places its two stages V-style (rank r: stages r and 2p − 1 − r,
#: _get_stage_indices l.316-327); the others loop (rank r: r, r + p, …).
ARCHON_PP_SCHEDULES: dict[str, int] = {
    "1F1B": 1,
    "Interleaved1F1B": 2,
    "InterleavedZeroBubble": 2,
    "ZBVZeroBubble": 2,
}
#: ArchonEngineConfig.pp_schedule (669): 2 virtual stages per rank
ARCHON_PP_SCHEDULE = "Interleaved1F1B"
#: the archon engine's virtual stages per pipeline rank without a config (its default schedule's)
ARCHON_STAGES_PER_RANK = ARCHON_PP_SCHEDULES[ARCHON_PP_SCHEDULE]
#: ``optimizer.type`` each training engine builds (the one home of the allowed types):
#: OptimizerConfig.type's choices adam, sgd, adam_bf16 (cli_args.py l.382-390) are not
#: checked by the loader; the FSDP engine asserts adam/adam_bf16/sgd (areal/engine/
#: fsdp_engine.py _create_optimizer l.1156-1160); the Megatron engine turns adam_bf16 into
#: adam with megatron-core's precision-aware optimizer first (megatron_engine.py
#: _normalize_adam_bf16_config l.1650-1663, called at initialize l.456), then asserts
#: adam/sgd (_create_optimizer l.1813-1816); archon builds adam or sgd and raises for the rest
#: (areal/experimental/engine/archon_utils.py create_optimizer l.55-71).
ENGINE_OPTIMIZERS: dict[str, tuple[str, ...]] = {
    "fsdp": ("adam", "adam_bf16", "sgd"),
    "megatron": ("adam", "adam_bf16", "sgd"),
    "archon": ("adam", "sgd"),
}

_CLI_ARGS = f"areal/api/cli_args.py@{REFERENCE_COMMIT[:8]}"

#: The table the README and the tests read; the constants above are its values.
REFERENCE_DEFAULTS: tuple[ReferenceDefault, ...] = (
    ReferenceDefault(
        "sglang.context_length, vllm.max_model_len",
        CONTEXT_LENGTH,
        f"{_CLI_ARGS} SGLangConfig.context_length (line 2188), vLLMConfig.max_model_len (2043)",
    ),
    ReferenceDefault(
        "sglang.mem_fraction_static, vllm.gpu_memory_utilization",
        MEMORY_FRACTION,
        f"{_CLI_ARGS} SGLangConfig.mem_fraction_static (2189), "
        f"vLLMConfig.gpu_memory_utilization (2058)",
    ),
    ReferenceDefault("<engine>.dtype", DTYPE, f"{_CLI_ARGS} TrainEngineConfig.dtype (1305)"),
    ReferenceDefault(
        "<engine>.optimizer_dtype",
        OPTIMIZER_DTYPE,
        f"{_CLI_ARGS} TrainEngineConfig.optimizer_dtype (1312)",
    ),
    ReferenceDefault(
        "<engine>.lora_rank", LORA_RANK, f"{_CLI_ARGS} TrainEngineConfig.lora_rank (1380)"
    ),
    ReferenceDefault(
        "<engine>.lora_alpha", LORA_ALPHA, f"{_CLI_ARGS} TrainEngineConfig.lora_alpha (1381)"
    ),
    ReferenceDefault(
        "<engine>.target_modules",
        "[] (all-linear)",
        f"{_CLI_ARGS} TrainEngineConfig.target_modules (1382); empty means all-linear in "
        f"areal/engine/fsdp_engine.py _apply_peft_wrapper and megatron_engine.py "
        f"_apply_megatron_bridge_lora",
    ),
    ReferenceDefault(
        "<engine>.mb_spec.max_tokens_per_mb",
        None,
        f"{_CLI_ARGS} MicroBatchSpec.max_tokens_per_mb (115); None: areal/utils/data.py "
        f"split_padded_tensor_dict_into_mb_list uses DEFAULT_MAX_TOKENS_PER_MB = 1e12 "
        f"(lines 697, 718), so the local batch is n_mbs micro-batches by count",
    ),
    ReferenceDefault(
        "<engine>.gradient_checkpointing",
        False,
        f"{_CLI_ARGS} TrainEngineConfig.gradient_checkpointing (1302); areal-alloc: "
        f"--recompute {RECOMPUTE}",
    ),
    ReferenceDefault(
        "<engine>.mb_spec.n_mbs", MICRO_BATCHES, f"{_CLI_ARGS} MicroBatchSpec.n_mbs (103)"
    ),
    ReferenceDefault(
        "<engine>.fsdp.memory_efficient_load",
        False,
        f"{_CLI_ARGS} FSDPEngineConfig.memory_efficient_load (493)",
    ),
    ReferenceDefault(
        "gconfig.n_samples", SAMPLES, f"{_CLI_ARGS} GenerationHyperparameters.n_samples (167)"
    ),
    ReferenceDefault(
        "gconfig.max_new_tokens",
        NEW_TOKENS,
        f"{_CLI_ARGS} GenerationHyperparameters.max_new_tokens (170)",
    ),
    ReferenceDefault(
        "gconfig.max_tokens",
        MAX_TOKENS,
        f"{_CLI_ARGS} GenerationHyperparameters.max_tokens (176)",
    ),
    ReferenceDefault(
        "train_dataset.batch_size", TRAIN_BATCH, f"{_CLI_ARGS} _DatasetConfig.batch_size (3097)"
    ),
    ReferenceDefault(
        "train_dataset.max_length",
        None,
        f"{_CLI_ARGS} _DatasetConfig.max_length (3121); areal-alloc assumes "
        f"{PROMPT_TOKENS:,}-token prompts",
    ),
    ReferenceDefault(
        "enable_offload", ENABLE_OFFLOAD, f"{_CLI_ARGS} BaseExperimentConfig.enable_offload (3206)"
    ),
    ReferenceDefault(
        "total_train_epochs",
        TRAIN_EPOCHS,
        f"{_CLI_ARGS} BaseExperimentConfig.total_train_epochs (3213)",
    ),
    ReferenceDefault(
        "<engine>.weight_update_mode",
        WEIGHT_UPDATE_MODE,
        f"{_CLI_ARGS} TrainEngineConfig.weight_update_mode (1335)",
    ),
    ReferenceDefault(
        "<engine>._version",
        ENGINE_VERSION,
        f"{_CLI_ARGS} TrainEngineConfig._version (1419), InferenceEngineConfig._version (2628)",
    ),
    ReferenceDefault(
        "actor.ppo_n_minibatches, critic.ppo_n_minibatches",
        PPO_MINIBATCHES,
        f"{_CLI_ARGS} PPOActorConfig.ppo_n_minibatches (1676), "
        f"PPOCriticConfig.ppo_n_minibatches (1993)",
    ),
    ReferenceDefault(
        "actor.prox_logp_method",
        PROX_LOGP_METHOD,
        f"{_CLI_ARGS} PPOActorConfig.prox_logp_method (1833)",
    ),
    ReferenceDefault(
        "<engine>.megatron.bridge_type",
        BRIDGE_TYPE,
        f"{_CLI_ARGS} MegatronEngineConfig.bridge_type (1064)",
    ),
    ReferenceDefault(
        "<engine>.megatron.moe_enable_deepep",
        MOE_ENABLE_DEEPEP,
        f"{_CLI_ARGS} MegatronEngineConfig.moe_enable_deepep (980)",
    ),
    ReferenceDefault(
        "<engine>.megatron.moe_token_dispatcher_type",
        TOKEN_DISPATCHER,
        f"{_CLI_ARGS} MegatronEngineConfig.moe_token_dispatcher_type (981)",
    ),
    ReferenceDefault(
        "<engine>.megatron.moe_shared_expert_overlap",
        MOE_SHARED_EXPERT_OVERLAP,
        f"{_CLI_ARGS} MegatronEngineConfig.moe_shared_expert_overlap (973)",
    ),
    ReferenceDefault(
        "<engine>.megatron.recompute_num_layers",
        RECOMPUTE_NUM_LAYERS,
        f"{_CLI_ARGS} MegatronEngineConfig.recompute_num_layers (967)",
    ),
    ReferenceDefault("rollout.agent.mode", AGENT_MODE, f"{_CLI_ARGS} AgentConfig.mode (2359)"),
)
