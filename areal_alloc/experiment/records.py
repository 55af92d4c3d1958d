"""The experiment as one frozen, typed record: what :func:`~areal_alloc.experiment.read.
read_experiment` returns and everything after it reads (the plan's checks, memory, speed,
``suggest --config``), never the raw config:

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
  ``max_concurrent_rollouts`` and ``actor.recompute_logprob`` (:class:`RunConfig`),
  and the keys only the start-up rules read (:class:`StartupConfig`).

Reference: areal-project/AReaL at cbff54d645d2cd8ee1f1c358a82f3f473588433d
(areal/api/cli_args.py for every key and default).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from areal_alloc import defaults
from areal_alloc.errors import AllocationError
from areal_alloc.experiment.models import ModelSource
from areal_alloc.experiment.sections.archon import archon_stages_per_rank
from areal_alloc.experiment.sections.megatron import DEFAULT_RECOMPUTE_MODULES, RECOMPUTE_METHOD
from areal_alloc.experiment.sections.model import resolve_architecture, resolve_shape
from areal_alloc.experiment.sections.scheduling import SchedulingSection
from areal_alloc.model import ModelAllocation
from areal_alloc.model_shape import ModelShape
from areal_alloc.strategy import SchedulingStrategy

if TYPE_CHECKING:
    from areal_alloc.architecture import Architecture
    from areal_alloc.settings import ChosenGPU, Resolved, Settings

__all__ = [
    "Cluster",
    "Engine",
    "Experiment",
    "InferenceConfig",
    "ModelChoice",
    "RunConfig",
    "StartupConfig",
    "TrainConfig",
    "minibatches_of",
]


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
    #: ``mb_spec.packing_algorithm``, ``n_mbs_divisor`` and ``granularity`` (MicroBatchSpec,
    #: areal/api/cli_args.py l.100-139 at cbff54d6; the rule that reads them:
    #: rules.minibatches_fill_their_micro_batches)
    packing: str = "ffd"
    n_mbs_divisor: int = 1
    granularity: int = 1
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
    #: ``<server>.cpu_offload_gb``: GiB of weights per GPU kept on the host (0: none)
    cpu_offload_gb: float = 0.0
    #: SGLang's ``dp_size``, ``ep_size``, ``enable_dp_attention``, ``enable_ep_moe``,
    #: ``enable_memory_saver``, ``chunked_prefill_size``, ``max_prefill_tokens`` and vLLM's
    #: ``enable_sleep_mode`` (the reference's defaults; the start-up rules of
    #: areal_alloc.experiment.server_rules read them)
    dp_size: int = 1
    ep_size: int = 1
    enable_dp_attention: bool = False
    enable_ep_moe: bool = False
    enable_memory_saver: bool = False
    chunked_prefill_size: int = defaults.CHUNKED_PREFILL_SIZE
    max_prefill_tokens: int = defaults.MAX_PREFILL_TOKENS
    enable_sleep_mode: bool = False


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
    #: (:func:`areal_alloc.experiment.sections.run.computes_prox_logp`); None: none of them written
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
            self._resolved["shape"] = resolve_shape(self.sources)
        found: ModelShape | None = self._resolved["shape"]
        return found

    def architecture(self) -> tuple[Architecture | None, str | None]:
        """(the architecture, a note): the note says how a path was read, or why the
        model it names was not found (then the architecture is None)."""
        if "architecture" not in self._resolved:
            self._resolved["architecture"] = resolve_architecture(self.sources)
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
    #: what the host estimate reads: each engine's ``scheduling_spec`` … (sections.scheduling)
    scheduling: SchedulingSection = field(default_factory=lambda: SchedulingSection())

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


def minibatches_of(key: str, actor: int, critic: int) -> int:
    """The optimizer steps engine ``key`` takes per RL step: the actor's and the critic's
    ``ppo_n_minibatches`` (``ppo_update``, areal/trainer/ppo/actor.py l.454-457, critic.py
    l.63-66 at cbff54d6), 1 for an engine without ``ppo_update``."""
    return max(1, {"actor": actor, "critic": critic}.get(key, 1))
