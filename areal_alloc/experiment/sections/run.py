"""The run's sections: its shape (``train_dataset``, ``gconfig``, the rollout's
off-policyness and concurrency, the actor's extra forward) into a
:class:`~areal_alloc.experiment.records.RunConfig`, the trainer it runs (RL, SFT, RW,
DPO), and the keys only the start-up rules read into a
:class:`~areal_alloc.experiment.records.StartupConfig` (areal/api/cli_args.py at
cbff54d6)."""

from __future__ import annotations

from typing import TypedDict

from areal_alloc import defaults
from areal_alloc._config import child, is_mapping, section, setting_int, unset, whole_number
from areal_alloc.experiment.loader import is_dpo
from areal_alloc.experiment.records import Engine, RunConfig, StartupConfig
from areal_alloc.experiment.sections.values import flag
from areal_alloc.limits import MAX_COUNT

__all__ = ["computes_prox_logp", "read_run", "read_startup", "trainer_kind"]


def read_run(cfg: object) -> RunConfig:
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
        recompute_logprob=computes_prox_logp(actor),
    )


def computes_prox_logp(actor: object) -> bool | None:
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
    decoupled = flag(actor, "use_decoupled_loss", False, "actor.use_decoupled_loss")
    if decoupled:
        method = _prox_logp_method(actor) or defaults.PROX_LOGP_METHOD
        return method not in defaults.PROX_LOGP_SKIPS_FORWARD
    return flag(actor, "recompute_logprob", False, "actor.recompute_logprob")


def trainer_kind(cfg: object, engines: list[Engine]) -> tuple[bool, bool]:
    """(an RL run, a trainer of pairs): RL with a rollout and an actor; without a rollout, RW
    (the actor ``is_critic``: RWConfig requires it, cli_args.py l.3287-3293) or DPO (the
    loader's one test, :func:`areal_alloc.experiment.loader.is_dpo`) train on
    chosen/rejected pairs, SFT on sequences."""
    keys = {e.key for e in engines}
    rl = {"rollout", "actor"} <= keys
    actor = next((e for e in engines if e.key == "actor"), None)
    critic = actor is not None and actor.training is not None and actor.training.is_critic
    return rl, not rl and actor is not None and (critic or is_dpo(cfg))


def read_startup(cfg: object, rl: bool = True, pairs: bool = False) -> StartupConfig:
    """The keys only the start-up rules read (areal/api/cli_args.py at cbff54d6:
    BaseExperimentConfig, SchedulerConfig, PPOConfig, AgentConfig, InferenceEngineConfig,
    TrainEngineConfig, PPOActorConfig)."""
    epochs = _epochs(cfg)
    scheduler = child(cfg, "scheduler")
    kind = child(scheduler, "type") if is_mapping(scheduler) else None
    rollout = child(cfg, "rollout")
    rollout = rollout if is_mapping(rollout) else None
    agent_mode = _agent_mode(rollout)
    actor = child(cfg, "actor")
    actor = actor if is_mapping(actor) else None
    steps = _minibatches(cfg, actor, rl)
    return StartupConfig(
        **steps,
        enable_offload=flag(cfg, "enable_offload", defaults.ENABLE_OFFLOAD, "enable_offload"),
        total_train_epochs=epochs,
        # read for online RL only, the one mode whose rule counts steps (rl_trainer._init_impl)
        total_train_steps=(
            whole_number(cfg, "total_train_steps", "total_train_steps")
            if agent_mode == "online"
            else None
        ),
        valid_dataset=not unset(child(cfg, "valid_dataset")),
        scheduler_type=None if kind is None else str(kind),
        dynamic_bs=flag(cfg, "dynamic_bs", False, "dynamic_bs"),
        agent_mode=agent_mode,
        return_routed_experts=flag(
            rollout, "return_routed_experts", False, "rollout.return_routed_experts"
        ),
        enable_delta_weight_update=flag(
            actor, "enable_delta_weight_update", False, "actor.enable_delta_weight_update"
        ),
        rl=rl,
        pairs=pairs,
    )


def _epochs(cfg: object) -> int | None:
    """``total_train_epochs`` as written (None: unset, or a bool)."""
    from areal_alloc.numbers import read_int

    epochs_raw = child(cfg, "total_train_epochs")
    if epochs_raw is None or isinstance(epochs_raw, bool):
        return None
    # the one reader of numbers: 2.5, 'abc' or a Unicode digit are refused naming the key
    return read_int(epochs_raw, "total_train_epochs", minimum=-MAX_COUNT, maximum=MAX_COUNT)


def _agent_mode(rollout: object) -> str | None:
    """``rollout.agent.mode`` when an agent is given (``defaults.AGENT_MODE`` unset)."""
    agent = child(rollout, "agent") if rollout is not None else None
    if agent is None:
        return None
    mode = child(agent, "mode") if is_mapping(agent) else None
    return defaults.AGENT_MODE if mode is None else str(mode)


class _Minibatches(TypedDict):
    ppo_n_minibatches: int
    critic_ppo_n_minibatches: int
    prox_logp_method: str | None
    forced_minibatches: int | None


def _minibatches(cfg: object, actor: object, rl: bool) -> _Minibatches:
    """The actor's and the critic's ``ppo_n_minibatches`` as they run. Without a rollout
    (``rl`` false: SFT, RW, DPO) no trainer splits a step into minibatches:
    ``LMEngine._train_lm`` trains the whole batch in one ``train_batch``
    (areal/trainer/sft/lm_engine.py l.27-34 at cbff54d6), and the actor is a plain
    TrainEngineConfig without ``ppo_n_minibatches``."""
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
    return _Minibatches(
        ppo_n_minibatches=defaults.PPO_MINIBATCHES if minibatches is None else minibatches,
        critic_ppo_n_minibatches=(
            defaults.PPO_MINIBATCHES if critic_minibatches is None else critic_minibatches
        ),
        prox_logp_method=method,
        forced_minibatches=forced,
    )


def _prox_logp_method(actor: object) -> str | None:
    """``actor.prox_logp_method`` as written (None: not set), as a string."""
    value = child(actor, "prox_logp_method") if actor is not None else None
    return None if value is None else str(value)
