"""``suggest --config``: the run, the engines' settings and the current split read from an
experiment, under the flags."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from areal_alloc.cli.machine import machine, settings_of
from areal_alloc.compose import compose_file
from areal_alloc.defaults import (
    MICRO_BATCH_TOKENS,
    NEW_TOKENS,
    PROMPT_TOKENS,
    SAMPLES,
    STEP_PROMPTS,
)
from areal_alloc.defaults import RECOMPUTE as RECOMPUTE_DEFAULT
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.estimate import rl_step
from areal_alloc.estimate.execution import (
    InferenceSettings,
    TrainingSettings,
    inference_settings,
    sequences_in_flight,
    server_limit,
    training_settings,
)
from areal_alloc.estimate.rl_step import Pace
from areal_alloc.experiment.read import read_experiment
from areal_alloc.experiment.records import Experiment, RunConfig
from areal_alloc.limits import MAX_COUNT
from areal_alloc.model_shape import local_config
from areal_alloc.plan import plan_config


def suggest_from_config(ns: argparse.Namespace) -> tuple[bool, bool]:
    """Fill what the flags left unset from an experiment config, composed as the
    reference composes it; returns whether it has a ref and a critic."""
    experiment = read_experiment(
        compose_file(ns.config, list(ns.overrides)),
        reference=ns.reference_version,
        app_keys=ns.app_keys or (),
    )
    machine(ns, experiment.config)  # the flags, the environment, nvidia-smi, then cluster.gpu & co
    try:  # the plan, once: check's own (its settings: the flags, the environment, nvidia-smi)
        plan = plan_config(experiment, on_memory="warn", settings=settings_of(ns))
        pace = plan.pace
    except AllocationError:  # a config check refuses still gives its cluster and engines
        plan, pace = plan_config(experiment, on_memory="off"), None
    run = experiment.run

    if ns.model is None:
        actor = experiment.get("actor")
        sources = actor.model.sources if actor is not None else ()
        path = next((s.value for s in sources if s.key == "actor.path"), None)
        if isinstance(path, str) and path:
            # a path that exists only on the cluster is matched by its last part
            local = local_config(path) is not None
            ns.model = path if local else Path(path.rstrip("/")).name or path
    if ns.gpus is None:
        ns.gpus = plan.capacity or None
    if ns.gpus_per_node is None:
        ns.gpus_per_node = plan.n_gpus_per_node or None
    if ns.batch_size is None:
        ns.batch_size = run.batch_size or None
    if ns.n_samples is None:
        ns.n_samples = run.n_samples or None
    if ns.prompt_len is None:
        ns.prompt_len = run.max_length
    cap_generation(ns, run, f"gconfig.max_tokens {run.tokens_cap:,}", "raise gconfig.max_tokens")
    # the step as the plan's pace reads it (areal_alloc.estimate.rl_step): its mode, concurrency,
    # log-prob recomputation and weight update; ``current`` is the plan's own pace
    mode = rl_step.mode_of(run.max_head_offpolicyness, False)
    ns.config_step = {
        # suggest proposes separate splits: a colocated config's run in the mode of its η
        "mode": pace.mode if pace is not None and pace.mode != rl_step.COLOCATED else mode,
        "in_flight": sequences_in_flight(run),
        "server": server_limit(experiment.get("rollout")),
        "recompute_logprob": bool(run.recompute_logprob),
        "update_mode": experiment.transport,
        "minibatches": experiment.startup.ppo_n_minibatches,
        "critic_minibatches": experiment.startup.critic_ppo_n_minibatches,
        "dynamic_bs": experiment.startup.dynamic_bs,
    }
    ns.current = pace
    config_execution(ns, experiment)
    by_key = {e.key: e for e in plan.engines if e.active}
    if ns.train_backend is None and "actor" in by_key:
        ns.train_backend = by_key["actor"].allocation.backend
    if ns.rollout_backend is None and "rollout" in by_key:
        ns.rollout_backend = by_key["rollout"].allocation.backend
    return ("ref" in by_key) and not ns.no_ref, ("critic" in by_key) or ns.critic


def cap_generation(ns: argparse.Namespace, run: RunConfig, cap: str, fix: str) -> None:
    """``--gen-len`` (``gconfig.max_new_tokens``: the flag, else ``run``'s) as the rollout
    caps it after the prompt: min(max_tokens − prompt, max_new_tokens)
    (``RunConfig.generation_after``, as the plan's pace). A known prompt (``--prompt-len``
    or ``train_dataset.max_length``) that leaves no room is one error line: the rollout
    raises "max_new_tokens … non-positive". ``cap`` names the bound, ``fix`` its remedy."""
    prompt = ns.prompt_len or run.prompt
    if ns.prompt_len is not None and prompt >= run.tokens_cap:
        raise AllocationValidationError(
            f"--prompt-len {prompt:,} is not below {cap} (prompt and completion together): "
            f"such a prompt leaves no token to generate (areal/infra/remote_inf_engine.py "
            f"raises); give a shorter --prompt-len or {fix}"
        )
    named = "--gen-len" if ns.gen_len else "gconfig.max_new_tokens"
    written = ns.gen_len or run.new_tokens
    ns.gen_len = replace(run, max_new_tokens=written).generation_after(prompt)
    if ns.gen_len < written:
        ns.cap_note = (
            f"{cap} caps the generation after a {prompt:,}-token prompt at "
            f"{run.tokens_cap:,} − {prompt:,} = {ns.gen_len:,} tokens, not {named} "
            f"{written:,} (areal/infra/remote_inf_engine.py l.942-944 at cbff54d6)"
        )


def step_sequences(ns: argparse.Namespace) -> int:
    """The sequences of one RL step: --batch-size × --n-samples (the config's
    train_dataset.batch_size × gconfig.n_samples, else STEP_PROMPTS × SAMPLES)."""
    batch = ns.batch_size or STEP_PROMPTS
    samples = ns.n_samples or SAMPLES
    sequences = batch * samples
    if sequences > MAX_COUNT:
        raise AllocationValidationError(
            f"train_dataset.batch_size={batch:,} × gconfig.n_samples={samples:,} = "
            f"{sequences:,} sequences per step: the limit is {MAX_COUNT:,} (--batch-size, "
            f"--n-samples)"
        )
    return sequences


def config_execution(ns: argparse.Namespace, experiment: Experiment) -> None:
    """The engines' own execution settings as the plan reads them
    (``areal_alloc.estimate.execution``): the actor's, the ref's and the critic's micro-batch
    tokens, recomputation and optimizer, and the rollout's server settings; the proposals
    are estimated with them (flags given still win), as ``current`` is."""
    resolved = machine(ns)
    reserve = resolved.memory_reserve.value if resolved.memory_reserve is not None else None
    engines = {e.key: e for e in experiment.engines if e.active}
    notes: list[str] = []  # what the plan says of them; suggest's own figures follow
    ns.config_training = {
        key: training_settings(
            engine, experiment.run, reserve, notes, experiment.startup.minibatches_of(key)
        )
        for key, engine in engines.items()
        if key in ("actor", "ref", "critic") and not engine.allocation.is_inference
    }
    rollout = engines.get("rollout")
    if rollout is not None and rollout.allocation.is_inference:
        chosen = resolved.gpu  # a server sizes its claim from the memory the device reports
        device = chosen.capacity if chosen else None
        ns.config_inference = inference_settings(rollout, reserve, device, experiment.run)


def suggest_settings(
    ns: argparse.Namespace,
) -> tuple[TrainingSettings, TrainingSettings | None, TrainingSettings | None, InferenceSettings]:
    """The actor's, the ref's, the critic's and the rollout's settings for the proposals:
    --config's engines (else every command's defaults: areal_alloc.defaults'
    MICRO_BATCH_TOKENS and RECOMPUTE), with --tokens, --recompute and --context-length
    over them."""
    found: dict[str, TrainingSettings] = getattr(ns, "config_training", None) or {}
    given: dict[str, object] = {}
    if ns.tokens is not None:  # every training engine's micro-batch
        given.update(
            tokens_per_micro_batch=ns.tokens,
            micro_batches=None,
            forward_tokens_per_micro_batch=None,
        )
        if found:  # a config's run: the shares the budget is balanced over, per d (at_dp)
            longest = (ns.prompt_len or PROMPT_TOKENS) + (ns.gen_len or NEW_TOKENS)
            given["sequence_tokens"] = longest
    if ns.recompute is not None:
        given["recompute"] = ns.recompute

    def flagged(settings: TrainingSettings) -> TrainingSettings:
        return replace(settings, **given)  # type: ignore[arg-type]

    actor = flagged(
        found.get("actor")
        or TrainingSettings(tokens_per_micro_batch=MICRO_BATCH_TOKENS, recompute=RECOMPUTE_DEFAULT)
    )
    ref, critic = (found.get(key) for key in ("ref", "critic"))
    ref = None if ref is None else flagged(ref)
    critic = None if critic is None else flagged(critic)
    if found.get("actor") is not None and not (ns.tokens and ns.recompute):
        micro_batch = (
            f"{actor.tokens_per_micro_batch:,} tokens per micro-batch"
            if actor.micro_batches is None  # else each rank's whole share (mb_spec unset)
            else "micro-batch of each rank's whole share of the step (max_tokens_per_mb unset)"
        )
        ns.config_execution_note = (
            f"; the actor's {micro_batch} and recomputation {actor.recompute} are the "
            f"config's (actor.mb_spec, gradient_checkpointing): --tokens and --recompute "
            f"override them"
        )
    ns.recompute = actor.recompute  # what a does-not-fit message names
    inference = getattr(ns, "config_inference", None) or InferenceSettings()
    if ns.context_length is not None:
        inference = replace(inference, context_length=ns.context_length)
    return actor, ref, critic, inference


def current_pace(pace: Pace | None) -> dict[str, object] | None:
    """The config's own split as the plan's pace gives it (the same figures)."""
    if pace is None:
        return None
    return {
        "generate_seconds": pace.generate_seconds,
        "train_seconds": pace.train_seconds,
        "step_seconds": pace.step_seconds,
        "mode": pace.mode,
        "advice": pace.advice,
        "calibration": pace.calibration or None,
    }
