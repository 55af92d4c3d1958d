"""One reading of the experiment: a composed config to one frozen, typed :class:`Experiment`.

A config comes as a DictConfig (``hydra.compose``, ``OmegaConf.load``), a plain
mapping, or the dataclass objects the reference's ``load_expr_config`` returns;
every key is read here once, through ``areal_alloc._config`` and the one reader
of numbers, with the reference's defaults (``areal_alloc.defaults``). What reads
an experiment after this (the plan's checks, memory, speed, ``suggest --config``)
takes the :class:`Experiment`, never the raw config:

- the cluster: ``cluster.n_nodes`` and ``cluster.n_gpus_per_node`` (the
  reference's defaults 32 × 8, said when assumed), and the GPU the settings
  resolve (:meth:`Experiment.resolved`);
- each engine (actor, critic, ref, rollout, teacher): its role, its
  ``ModelAllocation`` with its scheduling (colocation target), ``offload``, the
  model it runs (:class:`ModelChoice`: every key naming it, by the reference's
  rules in :mod:`areal_alloc.experiment.models`, resolved once to a
  :class:`~areal_alloc.model_shape.ModelShape` and an
  :class:`~areal_alloc.architecture.Architecture`, both from the one config.json
  reader), and its settings (:class:`TrainConfig` or :class:`InferenceConfig`);
- the run: ``train_dataset.batch_size`` / ``max_length``, ``gconfig.n_samples`` /
  ``max_new_tokens``, ``rollout.max_head_offpolicyness`` /
  ``max_concurrent_rollouts`` and ``actor.recompute_logprob`` (:class:`RunConfig`).

Reference: areal-project/AReaL at cbff54d645d2cd8ee1f1c358a82f3f473588433d
(areal/api/cli_args.py for every key and default).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from areal_alloc import defaults
from areal_alloc._config import (
    child,
    is_mapping,
    keys,
    read_bool,
    section,
    setting_float,
    setting_int,
    shown,
    strict_schema,
    unset,
    whole_number,
)
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.experiment.loader import is_dpo, refuse_at_load
from areal_alloc.experiment.models import ModelSource, model_sources
from areal_alloc.experiment.nulls import refuse_nulls
from areal_alloc.experiment.reference_keys import check_reference_keys
from areal_alloc.limits import MAX_COUNT, MAX_GPUS, MAX_GPUS_PER_NODE, MAX_NODES, grouped
from areal_alloc.model import ModelAllocation
from areal_alloc.model_shape import ModelShape, local_config
from areal_alloc.strategy import SchedulingStrategy, SchedulingStrategyType
from areal_alloc.vocab import (
    ENGINE_ORDER,
    ENGINE_ROLES,
    EXAMPLE_BACKEND,
    INHERITS_ACTOR,
    SCHEDULING_KEYS,
    SCHEDULING_TYPES,
    did_you_mean,
    role_problem,
    scheduling_problem,
)

if TYPE_CHECKING:
    from areal_alloc.architecture import Architecture
    from areal_alloc.settings import ChosenGPU, Resolved, Settings

__all__ = [
    "DEFAULT_GPUS_PER_NODE",
    "DEFAULT_N_NODES",
    "DEFAULT_RECOMPUTE_MODULES",
    "DISPATCHER_TYPES",
    "MAX_KL_CTL",
    "MAX_VPP",
    "RECOMPUTE_MODULES",
    "Cluster",
    "Engine",
    "Experiment",
    "InferenceConfig",
    "ModelChoice",
    "RunConfig",
    "TrainConfig",
    "archon_stages_per_rank",
    "has_engines",
    "model_from_path",
    "read_experiment",
    "recompute_module_names",
    "shape_from_path",
    "shape_of_architecture",
]

#: The reference's cluster defaults (ClusterSpecConfig in areal/api/cli_args.py).
DEFAULT_N_NODES = 32
DEFAULT_GPUS_PER_NODE = 8
#: Bound of actor.kl_ctl either side of 0 (the reference's default is 0.1).
MAX_KL_CTL = 1_000_000.0
#: Largest virtual pipeline size read from a config (far beyond any real schedule).
MAX_VPP = 1 << 20


# --- the experiment --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Cluster:
    """``cluster.n_nodes × cluster.n_gpus_per_node``, and the GPU when resolved."""

    n_nodes: int
    n_gpus_per_node: int
    #: what was assumed because the config did not say (the reference's defaults)
    assumptions: tuple[str, ...] = ()
    #: the GPU, speeds, efficiencies and reserve (``areal_alloc.settings``), once resolved
    machine: Resolved | None = None

    @property
    def capacity(self) -> int:
        return self.n_nodes * self.n_gpus_per_node

    @property
    def gpu(self) -> ChosenGPU | None:
        """The GPU the settings resolved (with where it came from), once resolved."""
        return self.machine.gpu if self.machine is not None else None


#: What Megatron's selective recomputation can recompute (``megatron.recompute_modules``):
#: megatron-core's choices, which it asserts for ``recompute_granularity="selective"``
#: ("Invalid choices for recompute_modules"), and its default ["core_attn"] when unset
#: (megatron/core/transformer/transformer_config.py l.483-495 and l.1360-1378,
#: NVIDIA/Megatron-LM core_v0.17.0; the reference passes the key to mbridge's
#: ``set_extra_args`` when ``gradient_checkpointing``, areal/engine/megatron_engine.py
#: l.722-729, MegatronEngineConfig ``recompute_modules: list[str] | None = None``,
#: areal/api/cli_args.py l.969, AReaL cbff54d6). "moe_act", "layernorm" and "mla_up_proj"
#: discard their outputs and recompute them; the others checkpoint the module.
RECOMPUTE_MODULES = (
    "core_attn",
    "moe_act",
    "layernorm",
    "mla_up_proj",
    "mlp",
    "moe",
    "shared_experts",
)
DEFAULT_RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn",)
#: MegatronEngineConfig.recompute_method's default (areal/api/cli_args.py l.966 at cbff54d6)
RECOMPUTE_METHOD = "uniform"


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """A training engine's settings that change its memory and speed, with the defaults.

    Read from the engine's section (areal/api/cli_args.py TrainEngineConfig and its
    ``optimizer``, ``mb_spec``, ``fsdp`` and ``megatron`` sections).
    """

    dtype: str = defaults.DTYPE
    #: ``optimizer.type``; None: forward only (a ref or a teacher without one)
    optimizer: str | None = "adam"
    #: the optimizer was not configured and adam was assumed (an actor or critic trains)
    optimizer_assumed: bool = False
    optimizer_dtype: str = defaults.OPTIMIZER_DTYPE
    gradient_checkpointing: bool = False
    #: ``megatron.recompute_granularity`` (read when checkpointing, and for megatron-bridge
    #: always: full, selective, or none for null)
    recompute: str = "none"
    #: megatron-bridge recomputes although ``gradient_checkpointing`` is false (the estimate
    #: says so)
    recompute_unasked: bool = False
    max_tokens_per_mb: int | None = None
    n_mbs: int = defaults.MICRO_BATCHES
    #: ``mb_spec.n_mbs: null`` written (MicroBatchSpec's ``int | None`` takes it; the Megatron
    #: engine cannot: a start-up rule). A strict schema's null is its unset key, not this.
    n_mbs_null: bool = False
    #: ``enable_tree_training`` (TrainEngineConfig l.1392, default false): the Megatron engine
    #: packs a prefix tree instead (``build_packed_tree_batch``, megatron_engine.py l.2677)
    tree_training: bool = False
    #: ``megatron.enable_chunked_logits`` (MegatronEngineConfig l.1017, default false): AReaL's
    #: vocab-parallel LM head, which refuses tree training (a start-up rule); its logits'
    #: memory: ``execution.LOGITS`` (``areal_lm_head*``). Read for the Megatron backend only.
    chunked_logits: bool = False
    #: ``megatron.entropy_requires_grad`` (l.1025, default false): with the LM head, true
    #: turns off its logits-storage reuse. Read for the Megatron backend only.
    entropy_requires_grad: bool = False
    #: ``megatron.lm_head_loss_chunk_size`` (l.1034, default 0: off; its rules:
    #: :mod:`areal_alloc.experiment.loader`); read for the Megatron backend only
    lm_head_chunk: int = 0
    use_lora: bool = False
    lora_rank: int = defaults.LORA_RANK
    target_modules: tuple[str, ...] = ()
    is_critic: bool = False
    memory_efficient_load: bool = False
    offload_params: bool = False
    #: ``fsdp.per_layer_optim_step`` (FSDPEngineConfig l.503, default false): the FSDP engine
    #: keeps AdamW's states on the CPU and streams them to the GPU layer by layer
    #: (``PerLayerOptimWrapper``, areal/engine/fsdp_utils/optimizer.py l.323-470 at
    #: cbff54d6), ``optim_step_prefetch_layers`` (l.512, default 1) ahead of the one stepped
    per_layer_optim_step: bool = False
    optim_prefetch_layers: int = 1
    distributed_optimizer: bool = True
    precision_aware_optimizer: bool = False
    #: a Megatron engine's ``megatron.virtual_pipeline_parallel_size`` as written (None: 1;
    #: the archon engine's virtual stages per rank: :func:`archon_stages_per_rank`)
    virtual_pipeline_size: int | None = None
    #: archon: ``archon.pp_schedule`` as written, as torch names it (``defaults.
    #: ARCHON_PP_SCHEDULES``; None: unset, its default ``defaults.ARCHON_PP_SCHEDULE``)
    archon_pp_schedule: str | None = None
    #: archon: ``archon.pp_layers_per_stage`` (None: the schedule's default stages per rank)
    archon_layers_per_stage: int | None = None
    #: archon: ``archon.pp_first_stage_less_layers`` and ``pp_last_stage_less_layers``
    #: (ArchonEngineConfig, default 1 each, areal/api/cli_args.py l.693-705 at cbff54d6)
    archon_less_layers: tuple[int, int] = (1, 1)
    #: each micro-batch padded to ``mb_spec.max_tokens_per_mb`` (TrainEngineConfig.
    #: pad_to_maximum, default false, cli_args.py l.1288); the archon engine forces it
    #: with pipeline parallelism, ``archon.enable_compile`` or tree training (archon_utils.py
    #: force_pad_to_maximum l.258-300 at cbff54d6)
    pad_to_maximum: bool = False
    #: ``init_from_scratch`` (TrainEngineConfig.init_from_scratch, default false)
    init_from_scratch: bool = False
    #: ``megatron.bridge_type`` (MegatronEngineConfig.bridge_type, ``defaults.BRIDGE_TYPE``)
    bridge_type: str = defaults.BRIDGE_TYPE
    #: ``megatron.moe_enable_deepep`` (MegatronEngineConfig, ``defaults.MOE_ENABLE_DEEPEP``)
    moe_enable_deepep: bool = defaults.MOE_ENABLE_DEEPEP
    #: ``megatron.moe_token_dispatcher_type`` (MegatronEngineConfig, ``defaults.
    #: TOKEN_DISPATCHER``): any text, as the reference's ``str`` field takes it (the start-up
    #: rules say which values its Megatron engine refuses)
    token_dispatcher: str = defaults.TOKEN_DISPATCHER
    #: ``megatron.recompute_modules`` when ``recompute`` is selective (:data:`RECOMPUTE_
    #: MODULES`; unset: megatron-core's default, the core attention)
    recompute_modules: tuple[str, ...] = DEFAULT_RECOMPUTE_MODULES
    #: ``megatron.recompute_num_layers`` (``defaults.RECOMPUTE_NUM_LAYERS``; None: null), read
    #: when a Megatron engine recomputes: megatron-core refuses a number under selective, None
    #: under full (the start-up rules)
    recompute_num_layers: int | None = defaults.RECOMPUTE_NUM_LAYERS
    #: ``megatron.recompute_method`` (MegatronEngineConfig's "uniform", areal/api/cli_args.py
    #: l.966 at cbff54d6; None: null), read when a Megatron engine recomputes: full
    #: granularity needs block or uniform (the start-up rules)
    recompute_method: str | None = RECOMPUTE_METHOD
    #: ``megatron.moe_shared_expert_overlap`` (MegatronEngineConfig, ``defaults.
    #: MOE_SHARED_EXPERT_OVERLAP``)
    moe_shared_expert_overlap: bool = defaults.MOE_SHARED_EXPERT_OVERLAP


@dataclass(frozen=True, slots=True)
class InferenceConfig:
    """An inference engine's server settings (the top-level ``sglang`` / ``vllm`` section)."""

    dtype: str = defaults.DTYPE
    kv_cache_dtype: str = "auto"
    memory_fraction: float = defaults.MEMORY_FRACTION
    context_length: int = defaults.CONTEXT_LENGTH
    #: ``<engine>.max_concurrent_rollouts`` as written (None: not given)
    max_concurrent_rollouts: int | None = None
    #: vLLM's ``max_num_seqs`` as written (None: not given; vLLMConfig ``max_num_seqs: int =
    #: 256``, areal/api/cli_args.py at cbff54d6)
    max_num_seqs: int | None = None
    #: SGLang's ``max_running_requests`` as written (None: not given; SGLangConfig
    #: ``max_running_requests: int | None = None``, areal/api/cli_args.py at cbff54d6)
    max_running_requests: int | None = None
    #: the keys the fraction and the length were read from (``sglang.context_length`` …)
    fraction_key: str = "sglang.mem_fraction_static"
    length_key: str = "sglang.context_length"


@dataclass(frozen=True, slots=True)
class RunConfig:
    """The run's shape as written; None where the config does not say.

    ``batch``, ``samples``, ``new_tokens`` and ``prompt`` apply the reference's defaults
    (areal/api/cli_args.py _DatasetConfig, GenerationHyperparameters; a prompt of
    ``defaults.PROMPT_TOKENS`` is areal-alloc's own assumption, said where used).
    """

    batch_size: int | None = None
    max_length: int | None = None
    n_samples: int | None = None
    max_new_tokens: int | None = None
    #: ``gconfig.max_tokens`` (None: the reference's 32,768): prompt + completion at most
    max_tokens: int | None = None
    max_head_offpolicyness: int | None = None
    max_concurrent_rollouts: int | None = None
    #: the actor's extra forward each step (``compute_logp``), as the reference decides it
    #: from ``recompute_logprob``, ``use_decoupled_loss`` and ``prox_logp_method``
    #: (:func:`_computes_prox_logp`); None: none of them written
    recompute_logprob: bool | None = None

    @property
    def batch(self) -> int:
        return defaults.TRAIN_BATCH if self.batch_size is None else self.batch_size

    @property
    def samples(self) -> int:
        return defaults.SAMPLES if self.n_samples is None else self.n_samples

    @property
    def new_tokens(self) -> int:
        return defaults.NEW_TOKENS if self.max_new_tokens is None else self.max_new_tokens

    @property
    def prompt(self) -> int:
        return defaults.PROMPT_TOKENS if self.max_length is None else self.max_length

    @property
    def tokens_cap(self) -> int:
        return defaults.MAX_TOKENS if self.max_tokens is None else self.max_tokens

    def generation_after(self, prompt: int) -> int:
        """The most tokens a request generates after ``prompt`` tokens: min(max_tokens −
        prompt, max_new_tokens) (areal/infra/remote_inf_engine.py l.942-944 at cbff54d6);
        where that leaves nothing (the rollout raises, which a start-up warning says)
        ``gconfig.max_new_tokens``."""
        room = self.tokens_cap - prompt
        return room if 0 < room < self.new_tokens else self.new_tokens

    @property
    def generation(self) -> int:
        """:meth:`generation_after` a prompt of :attr:`prompt` tokens."""
        return self.generation_after(self.prompt)

    @property
    def longest(self) -> int:
        """The longest sequence of one turn: the prompt and ``gconfig.max_new_tokens``, at
        most ``gconfig.max_tokens`` (the rollout caps each request's max_new_tokens at
        max_tokens − its prompt: areal/infra/remote_inf_engine.py l.942-944 at cbff54d6)."""
        return min(self.prompt + self.new_tokens, self.tokens_cap)


@dataclass(frozen=True, slots=True)
class StartupConfig:
    """The keys only the reference's start-up rules read, with its defaults
    (areal/api/cli_args.py at cbff54d6; each default is a row of ``areal_alloc.defaults``)."""

    #: ``enable_offload`` (BaseExperimentConfig)
    enable_offload: bool = defaults.ENABLE_OFFLOAD
    #: ``total_train_epochs`` as written (None: ``defaults.TRAIN_EPOCHS``); a bool is None
    total_train_epochs: int | None = None
    #: ``total_train_steps`` (BaseExperimentConfig; None: not set), read in online mode only
    total_train_steps: int | None = None
    #: ``valid_dataset`` is set (not absent, null or an all-null section)
    valid_dataset: bool = False
    #: ``scheduler.type`` (SchedulerConfig.type; None: not set)
    scheduler_type: str | None = None
    #: ``dynamic_bs`` (PPOConfig.dynamic_bs, default false)
    dynamic_bs: bool = False
    #: ``rollout.agent`` is given, and its ``mode`` (AgentConfig.mode; None without an agent)
    agent_mode: str | None = None
    #: ``rollout.return_routed_experts`` (InferenceEngineConfig, default false)
    return_routed_experts: bool = False
    #: ``actor.enable_delta_weight_update`` (TrainEngineConfig, default false)
    enable_delta_weight_update: bool = False
    #: ``actor.ppo_n_minibatches`` (``defaults.PPO_MINIBATCHES``) as the actor runs it: 1
    #: under ``prox_logp_method: reuse_train_logp``, which PPOActorConfig.__post_init__
    #: forces to one minibatch, with a warning, before any check reads it
    #: (areal/api/cli_args.py l.1911-1923 at cbff54d6)
    ppo_n_minibatches: int = defaults.PPO_MINIBATCHES
    #: ``critic.ppo_n_minibatches`` (PPOCriticConfig, the same default)
    critic_ppo_n_minibatches: int = defaults.PPO_MINIBATCHES
    #: ``actor.prox_logp_method`` as written (None: not set; ``defaults.PROX_LOGP_METHOD``)
    prox_logp_method: str | None = None
    #: the ``actor.ppo_n_minibatches`` written when reuse_train_logp forced it to 1 (None:
    #: nothing forced), for the estimate to say so as the reference warns
    forced_minibatches: int | None = None
    #: an RL run (a rollout and an actor: the RL trainer's rules apply); otherwise SFT, RW or
    #: DPO, which train a step's whole batch in one optimizer step
    rl: bool = True
    #: RW (``actor.is_critic``) or DPO (a ``ref`` beside the actor) without a rollout: each
    #: item is two sequences, chosen and rejected ("rw_modeling_collate_fn produces 2
    #: sequences (chosen + rejected) per example", areal/trainer/rw/rw_engine.py l.85-91;
    #: dpo_engine.py l.98-101, group_size=2, at cbff54d6), which the engines pack whole
    #: (``mb_spec.granularity = 2``): a pair is the unit a micro-batch counts
    pairs: bool = False

    @property
    def epochs(self) -> int:
        return defaults.TRAIN_EPOCHS if self.total_train_epochs is None else self.total_train_epochs

    def minibatches_of(self, key: str) -> int:
        """The optimizer steps trainer ``key`` takes per RL step (:func:`minibatches_of`)."""
        return minibatches_of(key, self.ppo_n_minibatches, self.critic_ppo_n_minibatches)


@dataclass(frozen=True, slots=True)
class ModelChoice:
    """The model an engine runs: every key naming it, first to last
    (:func:`areal_alloc.experiment.models.model_sources`), resolved once on demand."""

    sources: tuple[ModelSource, ...] = ()
    _resolved: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def named(self) -> bool:
        return bool(self.sources)

    def shape(self) -> ModelShape | None:
        """The sizes a layout must divide: the first ``model_shape`` section, or the first
        path when it is found here (no other path stands in for a model not found)."""
        if "shape" not in self._resolved:
            self._resolved["shape"] = _resolve_shape(self.sources)
        found: ModelShape | None = self._resolved["shape"]
        return found

    def architecture(self) -> tuple[Architecture | None, str | None]:
        """(the architecture, a note): the note says how a path was read, or why the
        model it names was not found (then the architecture is None)."""
        if "architecture" not in self._resolved:
            self._resolved["architecture"] = _resolve_architecture(self.sources)
        found: tuple[Architecture | None, str | None] = self._resolved["architecture"]
        return found


@dataclass(frozen=True, slots=True)
class Engine:
    """One configured engine: where its backend came from, what it runs, and how."""

    key: str
    backend_key: str
    allocation: ModelAllocation
    active: bool = True
    note: str | None = None
    #: ``<engine>.offload`` (the teacher's: ``teacher.offload``)
    offload: bool = False
    model: ModelChoice = field(default_factory=ModelChoice)
    training: TrainConfig | None = None
    inference: InferenceConfig | None = None
    #: ``<engine>._version`` (``defaults.ENGINE_VERSION`` when not written)
    version: str = defaults.ENGINE_VERSION

    @property
    def role(self) -> str:
        """``inference`` or ``training``: the kind of backend it runs."""
        return "inference" if self.allocation.is_inference else "training"

    @property
    def path(self) -> str:
        """The section holding the backend (``teacher.rollout`` for a served teacher)."""
        return self.backend_key.rsplit(".", 1)[0]

    @property
    def scheduling(self) -> SchedulingStrategy:
        return self.allocation.scheduling_strategy

    @property
    def gpus(self) -> int:
        """GPUs this engine adds to the run (0 when colocated or inactive)."""
        return self.allocation.world_size if self.active else 0

    @property
    def spec(self) -> str:
        return self.allocation.spec

    def shape(self) -> ModelShape | None:
        """Its model's shape, with a Megatron engine's virtual pipeline size, the archon
        engine's virtual stages per rank (:func:`archon_stages_per_rank`; its schedule's
        default where the config's are refused: the estimate's settings say why)."""
        shape = self.model.shape()
        vpp = self.training.virtual_pipeline_size if self.training is not None else None
        if shape is not None and self.allocation.backend == "megatron" and vpp is not None:
            shape = replace(shape, virtual_pipeline_size=vpp)
        if shape is not None and self.allocation.backend == "archon":
            config = self.training or TrainConfig()
            try:
                stages = archon_stages_per_rank(
                    config, shape.num_layers, self.allocation.parallel.pp_size, self.path
                )
            except AllocationError:
                stages = None
            schedule = config.archon_pp_schedule or defaults.ARCHON_PP_SCHEDULE
            shape = replace(
                shape, virtual_pipeline_size=stages or defaults.ARCHON_PP_SCHEDULES[schedule]
            )
        return shape


@dataclass(frozen=True, slots=True)
class Experiment:
    """The experiment as the reference reads it (see the module's docstring)."""

    cluster: Cluster
    engines: tuple[Engine, ...]
    run: RunConfig
    warnings: tuple[str, ...] = ()
    #: ``actor.weight_update_mode`` and ``actor._version`` as written (None: the
    #: reference's defaults, xccl and v1)
    weight_update_mode: str | None = None
    actor_version: str | None = None
    #: the config as given: its ``cluster`` keys are the settings' last source
    #: (:meth:`resolved`); nothing else reads it
    config: object = field(default=None, compare=False, repr=False)
    #: what the start-up rules read (``areal_alloc.experiment.rules``; ``suggest --config``
    #: also takes its ``ppo_n_minibatches``), with the reference's defaults
    startup: StartupConfig = field(default_factory=lambda: StartupConfig())

    def __getitem__(self, key: str) -> Engine:
        for engine in self.engines:
            if engine.key == key:
                return engine
        raise KeyError(key)

    def get(self, key: str) -> Engine | None:
        return next((e for e in self.engines if e.key == key), None)

    @property
    def update_mode(self) -> str:
        """``actor.weight_update_mode``, else the reference's default (xccl)."""
        mode = self.weight_update_mode
        return defaults.WEIGHT_UPDATE_MODE if mode is None else mode

    @property
    def transport(self) -> str:
        """How the actor's weights reach the rollout each step: with the v1 controllers
        :attr:`update_mode`; the v2 ones ignore it and take disk with LoRA, else awex
        (areal/trainer/rl_trainer.py _init_impl l.380-399 at cbff54d6). The start-up rules
        read the written mode (:attr:`update_mode`), as the reference's checks do."""
        if self.actor_version != "v2":
            return self.update_mode
        actor = self.get("actor")
        lora = actor is not None and actor.training is not None and actor.training.use_lora
        return "disk" if lora else "awex"

    @property
    def awex_v1(self) -> bool:
        """awex weight updates with the v1 controllers: the adapter hands the actor's GPUs
        to the rollout and back (areal/trainer/rl_trainer.py _is_v1_awex_colocate)."""
        return self.weight_update_mode == "awex" and self.actor_version in (None, "v1")

    @property
    def names_a_model(self) -> bool:
        """Whether any engine's model is named (only then is memory estimated)."""
        return any(e.model.named for e in self.engines)

    def resolved(self, settings: Settings) -> Experiment:
        """This experiment with the GPU and speeds ``settings`` resolve (flags, the hook's
        parameters, the environment, nvidia-smi, then the config's ``cluster`` keys)."""
        return self.with_machine(settings.resolve(self.config))

    def with_machine(self, machine: Resolved) -> Experiment:
        """This experiment with the GPU and speeds already resolved."""
        return replace(self, cluster=replace(self.cluster, machine=machine))


def has_engines(cfg: object) -> bool:
    """Whether the config has any engine section (``check --skip-without-engines``)."""
    return any(child(cfg, key) is not None for key in ENGINE_ORDER)


def read_experiment(
    cfg: object,
    settings: Settings | None = None,
    *,
    reference: str | None = None,
    app_keys: tuple[str, ...] = (),
) -> Experiment:
    """Read ``cfg`` once; one error line naming the key for anything it cannot read.

    ``settings``: resolve the GPU and speeds now (see :meth:`Experiment.resolved`).
    ``reference``, ``app_keys``: the reference version the keys are checked against (None:
    ``AREAL_ALLOC_REFERENCE_VERSION``, else the newest; ``off``: not checked) and an app's
    own top-level keys (areal_alloc.experiment.reference_keys).
    """
    if not is_mapping(cfg):
        raise AllocationValidationError(
            f"expected a config mapping (DictConfig, dict or a dataclass instance), "
            f"got {type(cfg).__name__}"
        )
    _legacy_check(cfg)
    check_reference_keys(cfg, reference, app_keys)
    refuse_nulls(cfg)
    refuse_at_load(cfg)
    cluster = _cluster(cfg)
    read, warnings = _read_engines(cfg)
    warnings += _not_inference_keys(cfg)
    engines = _apply_run_rules(cfg, read)
    engines = [_with_details(cfg, e) for e in engines]
    engines = [replace(e, version=_version(cfg, e)) for e in engines]
    run = _run(cfg)
    actor = child(cfg, "actor")
    mode = child(actor, "weight_update_mode") if is_mapping(actor) else None
    version = child(actor, "_version") if is_mapping(actor) else None
    experiment = Experiment(
        cluster,
        tuple(engines),
        run,
        tuple(warnings),
        None if mode is None else str(mode),
        None if version is None else str(version),
        cfg,
        _startup(cfg, *_trainer_kind(cfg, engines)),
    )
    return experiment.resolved(settings) if settings is not None else experiment


# --- the engines -----------------------------------------------------------------------


def _fail(key: str, value: object, error: AllocationError | str) -> AllocationValidationError:
    """``key='value': message``, keeping the caret of a parse error."""
    if isinstance(error, str):
        return AllocationValidationError(f"{key}={shown(value)}: {error}")
    cls = type(error) if isinstance(error, AllocationValidationError) else AllocationValidationError
    out = cls(f"{key}={shown(value)}: {error.message}")
    if error.column is not None and error.text is not None:
        out.text, out.column = error.text, error.column
    return out


def _scheduling(node_section: object, path: str) -> SchedulingStrategy:
    node = child(node_section, "scheduling_strategy")
    if node is None:
        return SchedulingStrategy()
    path = f"{path}.scheduling_strategy"
    if not is_mapping(node):
        raise AllocationValidationError(
            f"{path}={shown(node)}: must be a mapping with type and target, e.g. "
            f"{{type: colocation, target: actor}}"
        )
    for key in keys(node):
        if key not in SCHEDULING_KEYS:
            hint = did_you_mean(key, SCHEDULING_KEYS)
            raise AllocationValidationError(
                f"{path}.{key}: unknown key; {hint}scheduling_strategy takes "
                f"{', '.join(SCHEDULING_KEYS)}"
            )
    kind = child(node, "type")
    target = child(node, "target")
    if kind is None:
        kind = "separation"
    if kind == "separation":
        target = None  # a leftover target has no meaning without colocation
    problem = scheduling_problem(kind, target)
    if problem is not None:
        if kind not in SCHEDULING_TYPES:
            raise AllocationValidationError(f"{path}.type={shown(kind)}: {problem}")
        if target:
            raise AllocationValidationError(f"{path}.target={shown(target)}: {problem}")
        raise AllocationValidationError(
            f"{path}.target is empty: {problem}, e.g. {path}.target=actor"
        )
    return SchedulingStrategy(SchedulingStrategyType(kind), target)


class _Source(NamedTuple):
    """Where an engine's backend lives, and which kind of backend it must be."""

    backend_key: str
    value: object
    section: object  # holds the backend and the scheduling_strategy
    role: str  # "inference", "training" or "any"
    warning: str | None = None


def _teacher_source(node: object) -> _Source:
    """The teacher as the reference reads it (``TeacherConfig`` in areal/api/cli_args.py).

    ``engine_type`` (default ``rollout``) selects ``teacher.rollout`` (an inference
    engine) or ``teacher.train`` (a training engine); the selected one must be
    set. Older configs write a flat ``teacher.backend`` of any kind.
    """
    engine_type = child(node, "engine_type")
    rollout, train = child(node, "rollout"), child(node, "train")
    rollout = None if unset(rollout) else rollout  # a strict schema's empty sections
    train = None if unset(train) else train
    if engine_type is None and rollout is None and train is None:
        return _Source("teacher.backend", child(node, "backend"), node, "any")
    if engine_type is None:
        engine_type = "rollout"  # the reference's default
    if engine_type not in ("rollout", "train"):
        raise AllocationValidationError(
            f"teacher.engine_type={shown(engine_type)}: must be 'rollout' or 'train'"
        )
    role = "inference" if engine_type == "rollout" else "training"
    sub = rollout if engine_type == "rollout" else train
    if sub is None:
        raise AllocationValidationError(
            f"teacher.{engine_type} must be provided when teacher.engine_type={engine_type!r}: "
            f"set it, e.g. ++teacher.{engine_type}.backend={EXAMPLE_BACKEND[role]} "
            f"({'an inference' if role == 'inference' else 'a training'} backend)"
        )
    if not is_mapping(sub):
        raise AllocationValidationError(
            f"teacher.{engine_type}={shown(sub)}: must be a section with a backend field, "
            f"e.g. teacher.{engine_type}.backend={EXAMPLE_BACKEND[role]}"
        )
    warnings = []
    if rollout is not None and train is not None:
        warnings.append(
            f"teacher.rollout and teacher.train are both set; "
            f"teacher.engine_type={engine_type!r} selects teacher.{engine_type}"
        )
    if child(node, "backend") not in (None, ""):
        warnings.append(
            f"teacher.backend is not read when teacher.engine_type or teacher.rollout/train is "
            f"set; the teacher runs teacher.{engine_type}.backend"
        )
    return _Source(
        f"teacher.{engine_type}.backend",
        child(sub, "backend"),
        sub,
        role,
        "; ".join(warnings) or None,
    )


def _source(key: str, node: object) -> _Source:
    if key == "teacher":
        return _teacher_source(node)
    return _Source(f"{key}.backend", child(node, "backend"), node, ENGINE_ROLES[key])


def _allocation(key: str, source: _Source, scheduling: SchedulingStrategy) -> ModelAllocation:
    backend_key, value, role = source.backend_key, source.value, source.role
    if not isinstance(value, str):
        raise AllocationValidationError(
            f"{backend_key}={shown(value)}: must be a string such as {EXAMPLE_BACKEND[role]!r}"
        )
    if "${" in value:
        raise AllocationValidationError(
            f"{backend_key}={shown(value)}: an unresolved interpolation; the config was read "
            f"without OmegaConf (e.g. yaml.safe_load), so ${{…}} stayed text. Load it with "
            f"OmegaConf.load(path), or compose it with Hydra, then validate"
        )
    try:
        allocation = ModelAllocation.from_str(value, name=key, scheduling_strategy=scheduling)
    except AllocationError as error:
        raise _fail(backend_key, value, error) from None
    problem = role_problem(backend_key.rsplit(".", 1)[0], role, allocation.backend)
    if problem is not None:
        raise _fail(backend_key, value, problem)
    return allocation


def _legacy_check(cfg: object) -> None:
    value = child(cfg, "allocation_mode")
    if value is None or value == "":
        return
    # imported here, not at the top: the deprecated string is rare, and this module
    # is loaded at the start of every run that enables the hook
    from areal_alloc.legacy import NOT_READ, migration_overrides

    try:
        migration = migration_overrides(str(value))
    except AllocationError as error:
        raise AllocationValidationError(
            f"allocation_mode={shown(value)} {NOT_READ}; give each engine its own backend "
            f"field (rollout.backend=…, actor.backend=…); it also does not parse: "
            f"{error.message}"
        ) from None
    notes = f" ({'; '.join(migration.notes)})" if migration.notes else ""
    raise AllocationValidationError(
        f"allocation_mode={shown(value)} {NOT_READ}; remove it and give each engine its own "
        f"backend field: {' '.join(migration.overrides)}{notes}"
    )


#: keys areal-alloc reads under an inference engine that the reference's
#: InferenceEngineConfig lacks (areal/api/cli_args.py l.2478-2690 at cbff54d6): its loader
#: refuses them ("Key … not in 'InferenceEngineConfig'"), and where the servers' own keys
#: say the same
_NOT_INFERENCE_KEYS = {
    "path": "name the model in sglang.model_path or vllm.model (or teacher.path)",
    "offload": "the reference offloads a colocated rollout itself (a teacher: teacher.offload)",
}


def _not_inference_keys(cfg: object) -> list[str]:
    """A warning for each key of :data:`_NOT_INFERENCE_KEYS` written under ``rollout`` or
    ``teacher.rollout`` (read for plain Hydra apps, whose configs take any key)."""
    out = []
    for dotted in ("rollout", "teacher.rollout"):
        node = _at(cfg, dotted)
        if not is_mapping(node) or strict_schema(node):
            continue
        for key, instead in _NOT_INFERENCE_KEYS.items():
            if key in keys(node):  # a struct dataclass refuses the key, whatever its value
                out.append(
                    f"{dotted}.{key}: the reference's InferenceEngineConfig has no '{key}', so "
                    f"its loader refuses this config; {instead}"
                )
    return out


def _read_engines(cfg: object) -> tuple[list[Engine], list[str]]:
    actor_section = child(cfg, "actor")
    actor_backend = child(actor_section, "backend") if is_mapping(actor_section) else None
    engines: list[Engine] = []
    warnings: list[str] = []
    for key in ENGINE_ORDER:
        node = child(cfg, key)
        if node is None:
            continue
        if not is_mapping(node):
            raise AllocationValidationError(
                f"{key}={shown(node)}: {key} must be a mapping (a section with a backend "
                f"field), not {type(node).__name__}; e.g. {key}.backend="
                f"{EXAMPLE_BACKEND[ENGINE_ROLES[key]]}"
            )
        if unset(node):
            continue
        source = _source(key, node)
        value, note = source.value, None
        if (value is None or value == "") and key in INHERITS_ACTOR and actor_backend:
            value, note = actor_backend, "backend from actor.backend"
            source = source._replace(value=value)
        if value is None or value == "":
            raise AllocationValidationError(
                f"{source.backend_key} is empty: set it, e.g. "
                f"++{source.backend_key}={EXAMPLE_BACKEND[source.role]}"
            )
        path = source.backend_key.rsplit(".", 1)[0]
        allocation = _allocation(key, source, _scheduling(source.section, path))
        engines.append(Engine(key, source.backend_key, allocation, True, note))
        if source.warning:
            warnings.append(source.warning)
    if not engines:
        raise AllocationValidationError(
            "no engine found: the config needs at least one of "
            f"{', '.join(ENGINE_ORDER)} with a backend field, e.g. actor.backend=fsdp:d4"
        )
    return engines, warnings


def _apply_run_rules(cfg: object, engines: list[Engine]) -> list[Engine]:
    """Engines the run will not create, and implicit colocation, as the reference does."""
    actor = child(cfg, "actor")
    # any finite coefficient the reference runs; ≤ 0 creates no reference model
    kl_ctl = setting_float(actor, "kl_ctl", "actor.kl_ctl", minimum=-MAX_KL_CTL, maximum=MAX_KL_CTL)
    mode = child(actor, "weight_update_mode") if actor is not None else None
    version = child(actor, "_version") if actor is not None else None
    present = {e.key for e in engines}
    out: list[Engine] = []
    for engine in engines:
        if engine.key == "ref" and kl_ctl is not None and kl_ctl <= 0:
            written = child(actor, "kl_ctl")
            engine = replace(
                engine,
                active=False,
                note=f"inactive: actor.kl_ctl={written}, so the run creates no reference model",
            )
        elif (
            engine.key == "rollout"
            and mode == "awex"
            and version in (None, "v1")
            and "actor" in present
            and not engine.allocation.scheduling_strategy.is_colocated
        ):
            colocated = SchedulingStrategy(SchedulingStrategyType.colocation, "actor")
            engine = replace(
                engine,
                allocation=replace(engine.allocation, scheduling_strategy=colocated),
                note="colocated with actor: actor.weight_update_mode=awex with the v1 "
                "controller shares the actor's GPUs",
            )
        out.append(engine)
    return out


def _with_details(cfg: object, engine: Engine) -> Engine:
    """The engine's model, ``offload`` and settings (an inactive engine: its model only)."""
    sources = model_sources(cfg, engine.key, engine.path, engine.allocation.backend)
    choice = ModelChoice(tuple(sources))
    offload_path = "teacher" if engine.key == "teacher" else engine.path
    offload = _flag(_at(cfg, offload_path), "offload", False, f"{offload_path}.offload")
    if not engine.active:
        return replace(engine, model=choice, offload=offload)
    if engine.allocation.is_inference:
        return replace(
            engine, model=choice, offload=offload, inference=_inference_config(cfg, engine)
        )
    training = _train_config(
        _at(cfg, engine.path), engine.path, engine.key, engine.allocation.backend
    )
    return replace(engine, model=choice, offload=offload, training=training)


def _at(cfg: object, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        node = child(node, part)
    return node


def _flag(node: object, key: str, default: bool, path: str) -> bool:
    """A boolean setting as OmegaConf's bool fields read it (:func:`read_bool`), or
    ``default`` when absent or null; anything else names the key."""
    value = child(node, key) if node is not None else None
    return default if value is None else read_bool(value, path)


def _text(node: object, key: str, default: str) -> str:
    value = child(node, key) if node is not None else None
    return str(value) if value not in (None, "") else default


#: TrainEngineConfig.__post_init__'s aliases and choices (areal/api/cli_args.py l.1486-1502 at
#: cbff54d6): ``dtype`` fp32/bf16/fp16 → float32/bfloat16/float16, ``optimizer_dtype``
#: fp32/bf16 → float32/bfloat16 (fp16 is no optimizer dtype); the rest raises at load.
TRAIN_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}
TRAIN_DTYPES |= {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}
OPTIMIZER_DTYPES = {"float32": "float32", "bfloat16": "bfloat16"}
OPTIMIZER_DTYPES |= {"fp32": "float32", "bf16": "bfloat16"}
_TRAIN_CHECKS = "TrainEngineConfig.__post_init__, areal/api/cli_args.py l.1493-1502"


def _choice(
    node: object, key: str, default: str, choices: Mapping[str, str], path: str, where: str
) -> str:
    """A text setting the reference's loader canonicalises through ``choices`` (alias →
    value) and refuses outside it, in ``where`` (a null or absent key: ``default``)."""
    value = child(node, key) if node is not None else None
    if value is None:
        return default
    found = choices.get(str(value)) if isinstance(value, str) else None
    if found is None:
        allowed = ", ".join(repr(name) for name in choices)
        raise AllocationValidationError(
            f"{path}.{key}={shown(value)}: must be one of {allowed} (the reference's loader "
            f"refuses the rest: {where})"
        )
    return found


#: MegatronEngineConfig.moe_token_dispatcher_type's options: "Options: 'allgather','alltoall'
#: and 'flex'." (areal/api/cli_args.py l.981-986, AReaL cbff54d6); megatron-core 0.17.0 (the
#: version the reference pins) types its TransformerConfig field
#: ``Literal['allgather', 'alltoall', 'flex']`` (megatron/core/transformer/transformer_config.py
#: l.750, NVIDIA/Megatron-LM core_v0.17.0). The config's values; the estimate's dispatchers
#: (flex being DeepEP) are ``estimate.execution.TOKEN_DISPATCHERS``.
DISPATCHER_TYPES = ("allgather", "alltoall", "flex")


def _recompute_modules(megatron: object, path: str) -> tuple[str, ...]:
    """``<engine>.megatron.recompute_modules`` under selective recomputation (unset or null:
    megatron-core's default, :data:`DEFAULT_RECOMPUTE_MODULES`; an empty list: nothing).
    A name megatron-core does not know is refused, as its assertion refuses it."""
    raw = child(megatron, "recompute_modules") if megatron is not None else None
    if raw is None:
        return DEFAULT_RECOMPUTE_MODULES
    return recompute_module_names(raw, f"{path}.megatron.recompute_modules")


def recompute_module_names(value: object, key: str) -> tuple[str, ...]:
    """The one rule for what selective recomputation recomputes, where the value enters (the
    reader for a config's ``megatron.recompute_modules``, ``TrainingSettings`` for the API):
    a list (a text, a mapping or a scalar is refused whole) of :data:`RECOMPUTE_MODULES`
    names, megatron-core's assertion refusing any other; a name given twice recomputes
    once."""
    if isinstance(value, str) or is_mapping(value) or not hasattr(value, "__iter__"):
        raise AllocationValidationError(
            f"{key}={shown(value)}: must be a list of module names among "
            f"{', '.join(RECOMPUTE_MODULES)}, e.g. [core_attn, layernorm]"
        )
    names = tuple(str(item) for item in value)
    unknown = [name for name in names if name not in RECOMPUTE_MODULES]
    if unknown:
        raise AllocationValidationError(
            f"{key}: {', '.join(map(repr, unknown))} not among megatron-core's "
            f"{', '.join(RECOMPUTE_MODULES)} (its TransformerConfig refuses it at start-up)"
        )
    return tuple(dict.fromkeys(names))


#: megatron-core's recompute_granularity and recompute_method values: its TransformerConfig.
#: __post_init__ raises for any other (megatron/core/transformer/transformer_config.py
#: l.1321-1332, NVIDIA/Megatron-LM core_v0.17.0; None skips the checks)
RECOMPUTE_GRANULARITIES = ("full", "selective")
RECOMPUTE_METHODS = ("block", "uniform")


def _megatron_recompute_choice(
    megatron: object, name: str, value: str, choices: tuple[str, ...], bridge: str, path: str
) -> str:
    """``value`` of ``<engine>.megatron.<name>`` when megatron-core takes it (one of
    ``choices``, or null); refused otherwise, in one line."""
    if value in choices:
        return value
    if name == "recompute_granularity":  # megatron-core's own spelling, l.1324
        said, fix = f'\'When using recompute_granuarlity: {value} must be "full"or ', "full"
        said += '"selective".\''
    else:
        said = f'\'recompute_method: {value} must be "block" or "uniform".\''
        fix = RECOMPUTE_METHOD
    raise AllocationValidationError(
        f"{path}.megatron.{name}={shown(child(megatron, name))}: must be "
        f"{', '.join(choices)} or null; megatron-core's TransformerConfig raises {said} when "
        f"{bridge} builds it; set {path}.megatron.{name}={fix}"
    )


def _recompute_method(megatron: object) -> str | None:
    """``<engine>.megatron.recompute_method`` (RECOMPUTE_METHOD unset; None when null, but
    the default in areal-alloc's strict schema, which cannot say null)."""
    if megatron is None or "recompute_method" not in keys(megatron):
        return RECOMPUTE_METHOD
    value = child(megatron, "recompute_method")
    if value is None:
        return None if not strict_schema(megatron) else RECOMPUTE_METHOD
    return str(value)


def _recompute_granularity(megatron: object, backend: str | None) -> str | None:
    """``<engine>.megatron.recompute_granularity`` as the Megatron engine passes it (None: no
    recomputation). Unset: the reference's default "full" (MegatronEngineConfig, areal/api/
    cli_args.py l.965 at cbff54d6). Null: None, megatron-core's own default, which recomputes
    nothing (transformer_config.py l.455, its checks under ``is not None`` l.1321; the block
    recomputes under ``== 'full'``, transformer_block.py l.783, a layer under
    ``== 'selective'``, transformer_layer.py l.407: megatron/core/transformer/,
    NVIDIA/Megatron-LM core_v0.17.0); areal-alloc's strict
    schema (every field null when unset, :mod:`areal_alloc.schema`) cannot say null, so there
    it is the default. Another backend's gradient checkpointing does not read the key."""
    if megatron is None or "recompute_granularity" not in keys(megatron):
        return "full"
    value = child(megatron, "recompute_granularity")
    if value is None:
        return None if backend == "megatron" and not strict_schema(megatron) else "full"
    return str(value) if value != "" else "full"


def _recompute_num_layers(megatron: object, path: str) -> int | None:
    """``<engine>.megatron.recompute_num_layers`` (``defaults.RECOMPUTE_NUM_LAYERS`` unset,
    None when null): MegatronEngineConfig's ``int | None`` (areal/api/cli_args.py l.967 at
    cbff54d6). Under selective granularity megatron-core takes only None (a start-up rule)."""
    if megatron is None or "recompute_num_layers" not in keys(megatron):
        return defaults.RECOMPUTE_NUM_LAYERS
    from areal_alloc.numbers import read_int

    value = child(megatron, "recompute_num_layers")
    if value is None:  # null (a strict schema's unset key too: areal-alloc does not refuse it)
        return None
    key = f"{path}.megatron.recompute_num_layers"
    try:
        return read_int(value, key, minimum=0, maximum=MAX_COUNT)
    except AllocationValidationError:
        raise AllocationValidationError(
            f"{key}={shown(value)}: must be null or a whole number (selective recomputation "
            f"takes null)"
        ) from None


def _token_dispatcher(megatron: object, path: str) -> str:
    """``<engine>.megatron.moe_token_dispatcher_type`` (``defaults.TOKEN_DISPATCHER`` unset).

    The reference's ``str`` field takes a number or a bool as its text (OmegaConf's
    StringNode) and any text: which texts its Megatron engine refuses is a start-up rule
    (:mod:`areal_alloc.experiment.rules`). A list or a mapping is no text.
    """
    value = child(megatron, "moe_token_dispatcher_type") if megatron is not None else None
    if value is None:
        return defaults.TOKEN_DISPATCHER
    if isinstance(value, (bool, int, float)):
        return str(value)
    if not isinstance(value, str):
        raise AllocationValidationError(
            f"{path}.megatron.moe_token_dispatcher_type={shown(value)}: must be one of "
            f"{', '.join(DISPATCHER_TYPES)}"
        )
    return value


def _train_config(node: object, path: str, key: str, backend: str | None = None) -> TrainConfig:
    """A training engine's settings (areal/api/cli_args.py TrainEngineConfig at cbff54d6)."""
    optimizer_node = section(node, "optimizer", f"{path}.optimizer")
    assumed = False
    if unset(optimizer_node):  # absent, or a strict schema's all-null section
        optimizer: str | None = "adam" if key in ("actor", "critic") else None
        assumed = key in ("actor", "critic")
    else:
        optimizer = _text(optimizer_node, "type", "adam")
    megatron = section(node, "megatron", f"{path}.megatron")
    # read for the estimate; the loader's rules on it (MegatronEngineConfig.__post_init__)
    # are areal_alloc.experiment.loader's, for every training section present
    chunk_key = f"{path}.megatron.lm_head_loss_chunk_size"
    lm_head_chunk = setting_int(megatron, chunk_key, 0, 0, MAX_COUNT) or 0
    checkpointing = _flag(node, "gradient_checkpointing", False, f"{path}.gradient_checkpointing")
    bridge = _text(megatron, "bridge_type", defaults.BRIDGE_TYPE)
    # megatron-bridge's provider gets the recompute settings whatever gradient_checkpointing
    # says (areal/models/mcore/registry.py make_mcore_model l.444-450, AReaL cbff54d6);
    # mbridge only with gradient_checkpointing (areal/engine/megatron_engine.py l.722-729)
    forced = backend == "megatron" and bridge == "megatron-bridge"
    recompute = "none"
    if checkpointing and backend == "archon":
        recompute = _archon_recompute(section(node, "archon", f"{path}.archon"), path)
    elif checkpointing or forced:
        granularity = _recompute_granularity(megatron, backend)
        if granularity is not None and backend == "megatron":  # it reaches megatron-core
            raw = child(megatron, "recompute_granularity") if megatron is not None else None
            written = granularity if raw is None else str(raw)
            granularity = _megatron_recompute_choice(
                megatron, "recompute_granularity", written, RECOMPUTE_GRANULARITIES, bridge, path
            )
        if granularity is not None:
            recompute = "selective" if granularity == "selective" else "full"
    modules = DEFAULT_RECOMPUTE_MODULES
    recompute_layers = defaults.RECOMPUTE_NUM_LAYERS
    method: str | None = RECOMPUTE_METHOD
    if recompute == "selective":
        modules = _recompute_modules(megatron, path)
        recompute_layers = _recompute_num_layers(megatron, path)
    elif recompute == "full" and backend == "megatron":
        recompute_layers = _recompute_num_layers(megatron, path)
        if recompute_layers is None and strict_schema(megatron):  # it cannot say null
            recompute_layers = defaults.RECOMPUTE_NUM_LAYERS
    if recompute != "none" and backend == "megatron":
        method = _recompute_method(megatron)
        if method is not None:
            method = _megatron_recompute_choice(
                megatron, "recompute_method", method, RECOMPUTE_METHODS, bridge, path
            )
    mb_spec = section(node, "mb_spec", f"{path}.mb_spec")
    tokens = whole_number(mb_spec, "max_tokens_per_mb", f"{path}.mb_spec.max_tokens_per_mb")
    count = whole_number(mb_spec, "n_mbs", f"{path}.mb_spec.n_mbs")
    count_null = (
        count is None
        and mb_spec is not None
        and "n_mbs" in keys(mb_spec)
        and not strict_schema(mb_spec)
    )
    use_lora, rank, targets = _lora(node, path)
    critic = _flag(node, "is_critic", False, f"{path}.is_critic")
    fsdp = section(node, "fsdp", f"{path}.fsdp")
    efficient_load = _flag(
        fsdp, "memory_efficient_load", False, f"{path}.fsdp.memory_efficient_load"
    )
    ddp = section(megatron, "ddp", f"{path}.megatron.ddp")
    distributed = _flag(
        ddp, "use_distributed_optimizer", True, f"{path}.megatron.ddp.use_distributed_optimizer"
    )
    precision_aware = _flag(
        megatron,
        "use_precision_aware_optimizer",
        False,
        f"{path}.megatron.use_precision_aware_optimizer",
    )
    vpp = None
    schedule: str | None = None
    layers_per_stage: int | None = None
    less = (1, 1)
    pad = _flag(node, "pad_to_maximum", False, f"{path}.pad_to_maximum")
    if backend == "archon":  # the archon engine reads no megatron section
        archon = section(node, "archon", f"{path}.archon")
        schedule, layers_per_stage, less = _archon_pipeline(archon, path)
        pad = pad or _flag(archon, "enable_compile", False, f"{path}.archon.enable_compile")
        # archon_utils.py force_pad_to_maximum pads for tree training too (l.294-300)
        pad = pad or _flag(node, "enable_tree_training", False, f"{path}.enable_tree_training")
    elif megatron is not None:
        vpp = setting_int(
            megatron, f"{path}.megatron.virtual_pipeline_parallel_size", 1, 1, MAX_VPP
        )
    offload = _flag(fsdp, "offload_params", False, f"{path}.fsdp.offload_params")
    # only the FSDP engine reads these; the loader's rules on them are
    # areal_alloc.experiment.loader's, for every training section present
    per_layer = _flag(fsdp, "per_layer_optim_step", False, f"{path}.fsdp.per_layer_optim_step")
    per_layer = per_layer and backend == "fsdp"
    prefetch = setting_int(fsdp, f"{path}.fsdp.optim_step_prefetch_layers", 1, 0, MAX_COUNT)
    scratch = _flag(node, "init_from_scratch", False, f"{path}.init_from_scratch")
    deepep = _flag(
        megatron,
        "moe_enable_deepep",
        defaults.MOE_ENABLE_DEEPEP,
        f"{path}.megatron.moe_enable_deepep",
    )
    dispatcher = _token_dispatcher(megatron, path)
    shared_overlap = _flag(
        megatron,
        "moe_shared_expert_overlap",
        defaults.MOE_SHARED_EXPERT_OVERLAP,
        f"{path}.megatron.moe_shared_expert_overlap",
    )
    return TrainConfig(
        dtype=_choice(node, "dtype", defaults.DTYPE, TRAIN_DTYPES, path, _TRAIN_CHECKS),
        optimizer=optimizer,
        optimizer_assumed=assumed,
        optimizer_dtype=_choice(
            node, "optimizer_dtype", defaults.OPTIMIZER_DTYPE, OPTIMIZER_DTYPES, path, _TRAIN_CHECKS
        ),
        gradient_checkpointing=checkpointing,
        recompute=recompute,
        recompute_unasked=forced and not checkpointing and recompute != "none",
        max_tokens_per_mb=tokens,
        n_mbs=max(1, defaults.MICRO_BATCHES if count is None else count),
        n_mbs_null=count_null,
        tree_training=_flag(node, "enable_tree_training", False, f"{path}.enable_tree_training"),
        chunked_logits=backend == "megatron"
        and _flag(
            megatron, "enable_chunked_logits", False, f"{path}.megatron.enable_chunked_logits"
        ),
        entropy_requires_grad=backend == "megatron"
        and _flag(
            megatron, "entropy_requires_grad", False, f"{path}.megatron.entropy_requires_grad"
        ),
        lm_head_chunk=lm_head_chunk if backend == "megatron" else 0,
        use_lora=use_lora,
        lora_rank=rank,
        target_modules=targets,
        is_critic=critic,
        memory_efficient_load=efficient_load,
        offload_params=offload,
        per_layer_optim_step=per_layer,
        optim_prefetch_layers=1 if prefetch is None else prefetch,
        distributed_optimizer=distributed,
        precision_aware_optimizer=precision_aware,
        virtual_pipeline_size=vpp,
        archon_pp_schedule=schedule,
        archon_layers_per_stage=layers_per_stage,
        archon_less_layers=less,
        pad_to_maximum=pad,
        init_from_scratch=scratch,
        bridge_type=bridge,
        moe_enable_deepep=deepep,
        token_dispatcher=dispatcher,
        recompute_modules=modules,
        recompute_num_layers=recompute_layers,
        recompute_method=method,
        moe_shared_expert_overlap=shared_overlap,
    )


def _archon_pipeline(archon: object, path: str) -> tuple[str | None, int | None, tuple[int, int]]:
    """The archon engine's pipeline settings: ``archon.pp_schedule`` (default
    Interleaved1F1B, ArchonEngineConfig l.668-680 at cbff54d6; one of its four listed names,
    in any case: torch's ``get_schedule_class``, unverified here), ``pp_layers_per_stage``
    (≥ 1 or null) and ``pp_{first,last}_stage_less_layers`` (≥ 0; ArchonEngineConfig.
    __post_init__ l.750-764 refuses the rest, as the loader does before)."""
    # The reference enforces no choice of its own: the field's "choices" are metadata it never
    # reads, and pipeline_llm hands the text unchanged (no strip) to torch's
    # get_schedule_class (pipeline_parallel.py l.383, l.409). torch is not mirrored here: that
    # it matches names case-insensitively, refuses '' and ' 1f1b ', and knows GPipe, LoopedBFS
    # or DualPipeV (which the reference treats as V-style, l.439-440) is unverified. So only
    # the four names the field lists (any case) are modelled, and the rest refused as not
    # modelled, not as the reference's refusal.
    value = child(archon, "pp_schedule") if archon is not None else None
    written = None if value is None else str(value)
    names = {name.lower(): name for name in defaults.ARCHON_PP_SCHEDULES}
    schedule = names.get(written.lower()) if written is not None else None
    if written is not None and schedule is None:
        raise AllocationValidationError(
            f"{path}.archon.pp_schedule={shown(written)}: not modelled; areal-alloc models "
            f"{', '.join(defaults.ARCHON_PP_SCHEDULES)} (the names ArchonEngineConfig."
            f"pp_schedule lists; default {defaults.ARCHON_PP_SCHEDULE}), and the reference "
            f"passes the text unchanged to torch's get_schedule_class"
        )
    # their bounds (pp_layers_per_stage ≥ 1, the less layers ≥ 0) are refused before, in the
    # reference's words, for every training section (loader._refuse_archon): read here only
    layers = setting_int(archon, f"{path}.archon.pp_layers_per_stage", 4, -MAX_COUNT, MAX_COUNT)
    first, last = (
        setting_int(archon, f"{path}.archon.pp_{end}_stage_less_layers", 1, -MAX_COUNT, MAX_COUNT)
        for end in ("first", "last")
    )
    return schedule, layers, (1 if first is None else first, 1 if last is None else last)


def archon_stages_per_rank(
    config: TrainConfig, num_layers: int | None, pp: int, path: str
) -> int | None:
    """The archon engine's virtual stages per pipeline rank (``pipeline_llm``,
    areal/experimental/models/archon/pipeline_parallel.py l.409-453, AReaL cbff54d6): with
    ``archon.pp_layers_per_stage`` unset, the schedule's default (1 for 1F1B, 2 for the
    others); set, ceil((layers + first + last) / pp_layers_per_stage) stages over p, which
    must divide them, one per rank for 1F1B, at least two for the others, exactly two for
    ZBVZeroBubble (the engine refuses the rest). None when the stages per rank need the
    model's layer count and it is unknown."""
    schedule = config.archon_pp_schedule or defaults.ARCHON_PP_SCHEDULE
    default = defaults.ARCHON_PP_SCHEDULES[schedule]
    per_stage = config.archon_layers_per_stage
    if per_stage is None or pp <= 1:
        return default
    if num_layers is None:
        return None
    first, last = config.archon_less_layers
    stages = -(-(num_layers + first + last) // per_stage)
    where = (
        f"{path}.archon.pp_layers_per_stage={per_stage}: ceil(({num_layers:,} layers + "
        f"{first} + {last}) / {per_stage}) = {stages:,} virtual stages"
    )
    if stages % pp:
        raise AllocationValidationError(
            f"{where}, not a multiple of p{pp} (the archon engine refuses it); choose "
            f"pp_layers_per_stage so that p divides the stages"
        )
    per_rank = stages // pp
    need = "1" if default == 1 else "2" if schedule == "ZBVZeroBubble" else "at least 2"
    if (
        (default == 1 and per_rank != 1)
        or (default == 2 and per_rank < 2)
        or (schedule == "ZBVZeroBubble" and per_rank != 2)
    ):
        raise AllocationValidationError(
            f"{where} = {per_rank} per rank over p{pp}: {schedule} runs {need} per rank "
            f"(the archon engine refuses it); change pp_layers_per_stage or pp_schedule"
        )
    return per_rank


def archon_split_refusal(
    num_layers: int, pp: int, stages_per_rank: int, first: int, last: int, key: str = "archon"
) -> str | None:
    """Why generate_llm_fqn_per_model_part (areal/experimental/models/archon/
    pipeline_parallel.py l.118-155, AReaL cbff54d6) refuses to split ``num_layers`` layers
    plus ``first`` (embedding) and ``last`` (output) over ``pp × stages_per_rank`` virtual
    stages, as one line (``key``: where pp_*_stage_less_layers are written); None when it
    splits them. The one home of these refusals: pipeline_split.archon_split raises them,
    the start-up rule (rules.archon_layers_fill_the_stages) checks the configured values."""
    stages = pp * stages_per_rank
    if stages == 1:
        return None
    effective = num_layers + first + last
    where = (
        f"the archon engine splits {num_layers:,} layers + {first} (embedding) + {last} "
        f"(output) = {effective:,} over p{pp} × {stages_per_rank} = {stages:,} virtual stages "
        f"(generate_llm_fqn_per_model_part)"
    )
    if stages > effective:
        return (
            f"{where}: more stages than effective layers; use a smaller p or fewer stages "
            f"per rank (archon.pp_schedule=1F1B runs 1)"
        )
    per = effective // stages
    for end, less in (("first", first), ("last", last)):
        if less > per:
            return (
                f"{where}: {key}.pp_{end}_stage_less_layers={less} exceeds the {per} layers "
                f"per stage ({effective:,} // {stages:,}; the engine raises '{end}_stage_less_"
                f"layers ({less}) exceeds layers_per_stage ({per})'); lower it"
            )
    return None


#: ArchonEngineConfig.ac_mode's choices (areal/api/cli_args.py line 631 at cbff54d6)
_ARCHON_AC_MODES = ("none", "full", "selective", "memory_budget")


def _archon_recompute(archon: object, path: str) -> str:
    """What the archon engine checkpoints when ``gradient_checkpointing`` is on.

    areal/experimental/engine/archon_utils.py build_ac_config and
    areal/experimental/models/archon/activation_checkpoint.py apply_ac (AReaL cbff54d6):
    ``archon.ac_mode`` (default ``selective``, cli_args.py line 631) with
    ``archon.selective_ac_option`` (default ``op``, line 639) is torchtitan's per-op
    policy ('op': every second mm and the attention outputs saved, no activation
    offload); ``full`` checkpoints every block; a layer option ``'1'`` (or ``'0'``) wraps
    every block, as full does. Every N-th block (N ≥ 2) and ``memory_budget`` (torch.compile's
    min-cut) are not modelled: estimated as without recomputation, an upper bound.
    """
    mode = _text(archon, "ac_mode", "selective")
    if mode not in _ARCHON_AC_MODES:
        raise AllocationValidationError(
            f"{path}.archon.ac_mode={shown(mode)}: must be none, full, selective or "
            f"memory_budget (the archon engine's ActivationCheckpointConfig refuses it)"
        )
    if mode in ("none", "full"):
        return mode
    if mode == "memory_budget":
        return "none"
    option = _text(archon, "selective_ac_option", "op").strip()
    if option == "op":
        return "op"
    if not option.isdigit():
        raise AllocationValidationError(
            f"{path}.archon.selective_ac_option={shown(option)}: must be 'op' or a "
            f"positive integer string such as '2' (every N-th block; the archon engine's "
            f"ActivationCheckpointConfig refuses it)"
        )
    return "full" if int(option) <= 1 else "none"


def _lora(node: object, path: str) -> tuple[bool, int, tuple[str, ...]]:
    """``use_lora``, ``lora_rank`` and ``target_modules`` (areal/api/cli_args.py
    TrainEngineConfig, lines 1374-1385, reference commit cbff54d6)."""
    if not _flag(node, "use_lora", False, f"{path}.use_lora"):
        return False, defaults.LORA_RANK, ()
    rank = whole_number(node, "lora_rank", f"{path}.lora_rank")
    raw = child(node, "target_modules")
    if raw is None or raw == "":
        targets: tuple[str, ...] = ()
    elif isinstance(raw, str):
        targets = (raw,)
    elif isinstance(raw, (list, tuple)) or (hasattr(raw, "__iter__") and not is_mapping(raw)):
        targets = tuple(str(item) for item in raw)
    else:
        raise AllocationValidationError(
            f"{path}.target_modules={shown(raw)}: must be a list of module names, e.g. "
            f"[q_proj, v_proj], or empty for all-linear"
        )
    return True, (defaults.LORA_RANK if rank is None else rank), targets


def _inference_config(cfg: object, engine: Engine) -> InferenceConfig:
    """The server section of the engine's backend (areal/api/cli_args.py SGLangConfig,
    vLLMConfig at cbff54d6) and the engine's ``max_concurrent_rollouts``."""
    backend = engine.allocation.backend
    server = section(cfg, backend, backend)
    if backend == "vllm":
        fraction_key, length_key = "gpu_memory_utilization", "max_model_len"
    else:
        fraction_key, length_key = "mem_fraction_static", "context_length"
    fraction = setting_float(
        server, fraction_key, f"{backend}.{fraction_key}", minimum=0, maximum=1, above=True
    )
    length = whole_number(server, length_key, f"{backend}.{length_key}")
    concurrency = whole_number(
        _at(cfg, engine.path), "max_concurrent_rollouts", f"{engine.path}.max_concurrent_rollouts"
    )
    # Each server's own key only (vLLMConfig.max_num_seqs, SGLangConfig.max_running_requests):
    # neither dataclass has max_num_batched_tokens (areal/api/cli_args.py at cbff54d6, and the
    # areal 1.0.4 wheel), so the reference's loader refuses it and it is never read here;
    # vLLM then takes its own default (memory_inference.vllm_default_batched_tokens).
    vllm = backend == "vllm"
    seqs = whole_number(server, "max_num_seqs", f"{backend}.max_num_seqs") if vllm else None
    running = (
        whole_number(server, "max_running_requests", f"{backend}.max_running_requests")
        if backend == "sglang"
        else None
    )
    return InferenceConfig(
        dtype=_text(server, "dtype", "bfloat16").replace("auto", "bfloat16"),
        kv_cache_dtype=_text(server, "kv_cache_dtype", "auto"),
        memory_fraction=defaults.MEMORY_FRACTION if fraction is None else fraction,
        context_length=length or defaults.CONTEXT_LENGTH,
        max_concurrent_rollouts=concurrency,
        max_num_seqs=seqs,
        max_running_requests=running,
        fraction_key=f"{backend}.{fraction_key}",
        length_key=f"{backend}.{length_key}",
    )


# --- the cluster and the run -----------------------------------------------------------


def _version(cfg: object, engine: Engine) -> str:
    """``<engine>._version`` as the reference's str field holds it (default v1)."""
    node = _at(cfg, engine.path)
    value = child(node, "_version") if is_mapping(node) else None
    return defaults.ENGINE_VERSION if value is None else str(value)


def _trainer_kind(cfg: object, engines: list[Engine]) -> tuple[bool, bool]:
    """(an RL run, a trainer of pairs): RL with a rollout and an actor; without a rollout, RW
    (the actor ``is_critic``: RWConfig requires it, cli_args.py l.3287-3293) or DPO (the
    loader's one test, :func:`areal_alloc.experiment.loader.is_dpo`) train on
    chosen/rejected pairs, SFT on sequences."""
    keys = {e.key for e in engines}
    rl = {"rollout", "actor"} <= keys
    actor = next((e for e in engines if e.key == "actor"), None)
    critic = actor is not None and actor.training is not None and actor.training.is_critic
    return rl, not rl and actor is not None and (critic or is_dpo(cfg))


def _startup(cfg: object, rl: bool = True, pairs: bool = False) -> StartupConfig:
    """The keys only the start-up rules read (areal/api/cli_args.py at cbff54d6:
    BaseExperimentConfig, SchedulerConfig, PPOConfig, AgentConfig, InferenceEngineConfig,
    TrainEngineConfig, PPOActorConfig). Without a rollout (``rl`` false: SFT, RW, DPO) no
    trainer splits a step into minibatches: ``LMEngine._train_lm`` trains the whole batch
    in one ``train_batch`` (areal/trainer/sft/lm_engine.py l.27-34 at cbff54d6), and the
    actor is a plain TrainEngineConfig without ``ppo_n_minibatches``."""
    from areal_alloc.numbers import read_int

    epochs_raw = child(cfg, "total_train_epochs")
    epochs = None
    if epochs_raw is not None and not isinstance(epochs_raw, bool):
        # the one reader of numbers: 2.5, 'abc' or a Unicode digit are refused naming the key
        epochs = read_int(epochs_raw, "total_train_epochs", minimum=-MAX_COUNT, maximum=MAX_COUNT)
    scheduler = child(cfg, "scheduler")
    kind = child(scheduler, "type") if is_mapping(scheduler) else None
    rollout = child(cfg, "rollout")
    rollout = rollout if is_mapping(rollout) else None
    agent = child(rollout, "agent") if rollout is not None else None
    agent_mode = None
    if agent is not None:
        mode = child(agent, "mode") if is_mapping(agent) else None
        agent_mode = defaults.AGENT_MODE if mode is None else str(mode)
    actor = child(cfg, "actor")
    actor = actor if is_mapping(actor) else None
    minibatches = whole_number(actor, "ppo_n_minibatches", "actor.ppo_n_minibatches")
    method = _prox_logp_method(actor)
    forced = None
    written = defaults.PPO_MINIBATCHES if minibatches is None else minibatches
    if method == "reuse_train_logp" and written > 1:  # __post_init__ l.1911-1923: forced to 1
        forced, minibatches = written, 1
    if not rl:  # one optimizer step over the whole batch
        forced, minibatches = None, 1
    critic = child(cfg, "critic")
    critic_minibatches = whole_number(
        critic if is_mapping(critic) else None, "ppo_n_minibatches", "critic.ppo_n_minibatches"
    )
    if not rl:
        critic_minibatches = 1
    return StartupConfig(
        enable_offload=_flag(cfg, "enable_offload", defaults.ENABLE_OFFLOAD, "enable_offload"),
        total_train_epochs=epochs,
        # read for online RL only, the one mode whose rule counts steps (rl_trainer._init_impl)
        total_train_steps=(
            whole_number(cfg, "total_train_steps", "total_train_steps")
            if agent_mode == "online"
            else None
        ),
        valid_dataset=not unset(child(cfg, "valid_dataset")),
        scheduler_type=None if kind is None else str(kind),
        dynamic_bs=_flag(cfg, "dynamic_bs", False, "dynamic_bs"),
        agent_mode=agent_mode,
        return_routed_experts=_flag(
            rollout, "return_routed_experts", False, "rollout.return_routed_experts"
        ),
        enable_delta_weight_update=_flag(
            actor, "enable_delta_weight_update", False, "actor.enable_delta_weight_update"
        ),
        ppo_n_minibatches=defaults.PPO_MINIBATCHES if minibatches is None else minibatches,
        critic_ppo_n_minibatches=(
            defaults.PPO_MINIBATCHES if critic_minibatches is None else critic_minibatches
        ),
        prox_logp_method=method,
        forced_minibatches=forced,
        rl=rl,
        pairs=pairs,
    )


def minibatches_of(key: str, actor: int, critic: int) -> int:
    """The optimizer steps engine ``key`` takes per RL step: the actor's and the critic's
    ``ppo_n_minibatches`` (``ppo_update``, areal/trainer/ppo/actor.py l.454-457, critic.py
    l.63-66 at cbff54d6), 1 for an engine without ``ppo_update``."""
    return max(1, {"actor": actor, "critic": critic}.get(key, 1))


def _prox_logp_method(actor: object) -> str | None:
    """``actor.prox_logp_method`` as written (None: not set), as a string."""
    value = child(actor, "prox_logp_method") if actor is not None else None
    return None if value is None else str(value)


# --- the cluster and the run -----------------------------------------------------------


def _cluster(cfg: object) -> Cluster:
    cluster = child(cfg, "cluster")
    if cluster is not None and not is_mapping(cluster):
        raise AllocationValidationError(
            f"cluster={shown(cluster)}: must be a mapping with n_nodes and n_gpus_per_node"
        )
    n_nodes = setting_int(cluster, "cluster.n_nodes", DEFAULT_N_NODES, 1, MAX_NODES)
    per_node = setting_int(
        cluster, "cluster.n_gpus_per_node", DEFAULT_GPUS_PER_NODE, 0, MAX_GPUS_PER_NODE
    )
    assumed = []
    if n_nodes is None:
        n_nodes = DEFAULT_N_NODES
        assumed.append(f"cluster.n_nodes={n_nodes}")
    if per_node is None:
        per_node = DEFAULT_GPUS_PER_NODE
        assumed.append(f"cluster.n_gpus_per_node={per_node}")
    if n_nodes * per_node > MAX_GPUS:
        raise AllocationValidationError(
            f"cluster.n_nodes={n_nodes} × cluster.n_gpus_per_node={per_node} = "
            f"{grouped(n_nodes * per_node)} GPUs is over the limit of {grouped(MAX_GPUS)}"
        )
    notes = []
    if assumed:
        notes.append(
            f"{' and '.join(assumed)} assumed (not set in the config; the reference's defaults)"
        )
    return Cluster(n_nodes, per_node, tuple(notes))


def _run(cfg: object) -> RunConfig:
    """The run's shape (areal/api/cli_args.py _DatasetConfig, GenerationHyperparameters,
    InferenceEngineConfig.max_head_offpolicyness / max_concurrent_rollouts,
    PPOActorConfig.recompute_logprob at cbff54d6)."""
    dataset = section(cfg, "train_dataset", "train_dataset")
    gconfig = section(cfg, "gconfig", "gconfig")
    rollout = child(cfg, "rollout")
    rollout = rollout if is_mapping(rollout) else None
    actor = child(cfg, "actor")
    actor = actor if is_mapping(actor) else None
    offpolicy = setting_int(rollout, "rollout.max_head_offpolicyness", 0, 0, MAX_COUNT)
    return RunConfig(
        batch_size=whole_number(dataset, "batch_size", "train_dataset.batch_size"),
        max_length=whole_number(dataset, "max_length", "train_dataset.max_length"),
        n_samples=whole_number(gconfig, "n_samples", "gconfig.n_samples"),
        max_new_tokens=whole_number(gconfig, "max_new_tokens", "gconfig.max_new_tokens"),
        max_tokens=whole_number(gconfig, "max_tokens", "gconfig.max_tokens"),
        max_head_offpolicyness=offpolicy,
        max_concurrent_rollouts=whole_number(
            rollout, "max_concurrent_rollouts", "rollout.max_concurrent_rollouts"
        ),
        recompute_logprob=_computes_prox_logp(actor),
    )


def _computes_prox_logp(actor: object) -> bool | None:
    """Whether the trainer runs the actor's extra forward (``compute_logp``) each step, as
    PPOActorConfig.should_compute_prox_logp decides it (areal/api/cli_args.py l.1861-1872 at
    cbff54d6; areal/trainer/rl_trainer.py l.784): with ``use_decoupled_loss``, unless
    ``prox_logp_method`` skips the forward (loglinear, reuse_train_logp); without it, when
    ``recompute_logprob``. None: none of the three keys is written."""
    if actor is None or all(
        child(actor, key) is None
        for key in ("recompute_logprob", "use_decoupled_loss", "prox_logp_method")
    ):
        return None
    decoupled = _flag(actor, "use_decoupled_loss", False, "actor.use_decoupled_loss")
    if decoupled:
        method = _prox_logp_method(actor) or defaults.PROX_LOGP_METHOD
        return method not in defaults.PROX_LOGP_SKIPS_FORWARD
    return _flag(actor, "recompute_logprob", False, "actor.recompute_logprob")


# --- the model an engine runs: its shape and its architecture, from one reader ------------


def shape_of_architecture(arch: Architecture, source: str) -> ModelShape:
    """The sizes of ``arch`` a layout must divide."""
    return ModelShape(
        num_layers=arch.num_layers,
        num_attention_heads=arch.num_attention_heads,
        num_key_value_heads=arch.kv_heads,
        num_experts=arch.num_experts or None,
        vocab_size=arch.vocab_size,
        source=source,
        model_type=arch.model_type or None,
    )


def _shape_section(node: object, key: str) -> ModelShape:
    if not is_mapping(node):
        raise AllocationValidationError(
            f"{key}={node!r}: must be a mapping (num_layers, num_attention_heads, …) "
            f"or {{path: /local/model/dir}}"
        )
    path = child(node, "path")
    if isinstance(path, str) and path:
        return ModelShape.from_hf_config(path)
    return ModelShape.from_mapping(node, source=key)


def shape_from_path(value: str, key: str) -> ModelShape | None:
    """The shape of a named model (a local config.json or its folder, a hub id in the
    local cache, a catalogue name, a cluster path by its last part), or None when it
    cannot be found here."""
    local = local_config(value)
    if local is not None:
        return ModelShape.from_hf_config(local)
    from areal_alloc.catalogue import find_model  # the catalogue loads only for named models

    try:
        return shape_of_architecture(find_model(value), f"{key}={value!r}")
    except AllocationError:
        pass
    name = Path(value.rstrip("/")).name  # a cluster path: /storage/models/Qwen3-8B
    if name and name != value:
        try:
            source = f"{key}={value!r}, read as the catalogue's {name}"
            return shape_of_architecture(find_model(name), source)
        except AllocationError:
            pass
    return None


def _resolve_shape(sources: tuple[ModelSource, ...]) -> ModelShape | None:
    path_tried = False
    for source in sources:
        if source.kind == "model_shape":
            return _shape_section(source.value, source.key)
        if path_tried:
            continue  # the engine's model is named but unknown here: no other path stands in
        path_tried = True
        shape = shape_from_path(str(source.value), source.key)
        if shape is not None:
            return shape
    return None


def model_from_path(value: object, key: str) -> tuple[Architecture | None, str | None]:
    """A model named by a path or id; (None, why) when it cannot be found here."""
    if not isinstance(value, str) or not value:
        return None, None
    from areal_alloc.catalogue import find_model

    try:
        return find_model(value), None
    except AllocationError:
        pass
    name = Path(value.rstrip("/")).name  # a cluster path: /storage/models/Qwen3-8B
    if name and name != value:
        try:
            return find_model(name), f"{key}={value!r} read as the catalogue's {name}"
        except AllocationError:
            pass
    return (
        None,
        f"{key}={shown(value)}: not found here (no local config.json, hub cache or "
        f"catalogue entry)",
    )


#: The keys of a ``model_shape`` section the memory estimate reads (our names and
#: Hugging Face's, as :meth:`Architecture.from_mapping` reads them).
_SHAPE_KEYS = (
    "hidden_size",
    "num_layers",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "tie_word_embeddings",
    "first_k_dense_replace",
    "n_shared_experts",
    "model_type",
)


def _shape_model(node: object, key: str) -> tuple[Architecture | None, str | None]:
    if unset(node) or not is_mapping(node):
        return None, None
    path = child(node, "path")
    if isinstance(path, str) and path:
        return model_from_path(path, f"{key}.path")
    from areal_alloc.architecture import Architecture

    data = {k: child(node, k) for k in _SHAPE_KEYS}
    data = {k: v for k, v in data.items() if v is not None}
    try:
        return Architecture.from_mapping(data, source=key), None
    except AllocationError as error:
        if "missing" in error.message:  # a shape for the layout checks only
            return None, None
        raise


def _resolve_architecture(
    sources: tuple[ModelSource, ...],
) -> tuple[Architecture | None, str | None]:
    for source in sources:
        if source.kind == "model_shape":
            found = _shape_model(source.value, source.key)
            if found[0] is not None:
                return found
            continue  # a shape for the layout checks only
        return model_from_path(str(source.value), source.key)
    return None, None
