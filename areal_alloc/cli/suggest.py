"""``areal-alloc suggest``: split the GPUs between rollout and training (the search:
areal_alloc.search.split), from flags or an experiment's --config."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from areal_alloc.catalogue import find_model
from areal_alloc.cli.args import (
    command_parser,
    count,
    positive,
    reference_flag,
)
from areal_alloc.cli.flags import (
    CONTEXT_LENGTH_HELP,
    GEN_LEN_HELP,
    PROMPT_LEN_HELP,
    RECOMPUTE_HELP,
    TOKENS_HELP,
    at_the_edge,
    calibration_flag,
    chosen_gpu,
    footer,
    gpu_flags,
    gpu_spec,
    hardware_flags,
    hardware_from_flags,
    host_share,
    machine,
    mean_gen_len_flag,
    memory_fixes,
    settings_of,
)
from areal_alloc.compose import compose_file
from areal_alloc.defaults import (
    MAX_TOKENS,
    MICRO_BATCH_TOKENS,
    NEW_TOKENS,
    PPO_MINIBATCHES,
    PROMPT_TOKENS,
    SAMPLES,
    STEP_PROMPTS,
    WEIGHT_UPDATE_MODE,
)
from areal_alloc.defaults import RECOMPUTE as RECOMPUTE_DEFAULT
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.estimate import rl_step
from areal_alloc.estimate.execution import (
    RECOMPUTE,
    InferenceSettings,
    ServerLimit,
    TrainingSettings,
    inference_settings,
    sequences_in_flight,
    server_limit,
    training_settings,
)
from areal_alloc.estimate.memory import readable_bytes
from areal_alloc.estimate.rl_step import Pace
from areal_alloc.estimate.speed_host import SOURCE as HOST_SOURCE
from areal_alloc.experiment.read import read_experiment
from areal_alloc.experiment.records import Experiment, RunConfig
from areal_alloc.limits import MAX_COUNT
from areal_alloc.model_shape import local_config
from areal_alloc.plan import plan_config
from areal_alloc.search.split import RunShape, suggest


def _suggest_from_config(ns: argparse.Namespace) -> tuple[bool, bool]:
    """Fill what the flags left unset from an experiment config, composed as the
    reference composes it; returns whether it has a ref and a critic."""
    experiment = read_experiment(
        compose_file(ns.config, list(ns.overrides)),
        reference=ns.reference_version,
        app_keys=ns.app_keys or (),
    )
    plan = plan_config(experiment, on_memory="off")
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
    machine(ns, experiment.config)  # the flags, the environment, nvidia-smi, then cluster.gpu & co
    if ns.gpus_per_node is None:
        ns.gpus_per_node = plan.n_gpus_per_node or None
    if ns.batch_size is None:
        ns.batch_size = run.batch_size or None
    if ns.n_samples is None:
        ns.n_samples = run.n_samples or None
    if ns.prompt_len is None:
        ns.prompt_len = run.max_length
    _cap_generation(ns, run, f"gconfig.max_tokens {run.tokens_cap:,}", "raise gconfig.max_tokens")
    # the step as the plan's pace reads it (areal_alloc.estimate.rl_step): its mode, concurrency,
    # log-prob recomputation and weight update; ``current`` is the plan's own pace
    mode = rl_step.mode_of(run.max_head_offpolicyness, False)
    try:  # check's own plan (its settings: the flags, the environment, nvidia-smi)
        pace = plan_config(experiment, on_memory="warn", settings=settings_of(ns)).pace
    except AllocationError:
        pace = None
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
    _config_execution(ns, experiment)
    by_key = {e.key: e for e in plan.engines if e.active}
    if ns.train_backend is None and "actor" in by_key:
        ns.train_backend = by_key["actor"].allocation.backend
    if ns.rollout_backend is None and "rollout" in by_key:
        ns.rollout_backend = by_key["rollout"].allocation.backend
    return ("ref" in by_key) and not ns.no_ref, ("critic" in by_key) or ns.critic


def _cap_generation(ns: argparse.Namespace, run: RunConfig, cap: str, fix: str) -> None:
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


def _step_sequences(ns: argparse.Namespace) -> int:
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


def _config_execution(ns: argparse.Namespace, experiment: Experiment) -> None:
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


def _suggest_settings(
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


def _current(pace: Pace | None) -> dict[str, object] | None:
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


def suggest_command(args: list[str]) -> int:
    parser = command_parser(
        "suggest",
        "Propose how to split the GPUs between rollout and training, and each engine's "
        "layout, so that generation and training balance. Every figure is an estimate "
        "printed with its terms (see layouts --rank); check the finalists with a short real "
        "run.",
        "examples:\n  areal-alloc suggest --model Qwen3-8B --gpus 64 --gpu H100-80GB "
        "--batch-size 64 --n-samples 8 --prompt-len 1024 --gen-len 8192\n"
        "  areal-alloc suggest --config gsm8k_grpo.yaml --gpu H100-80GB",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="an experiment YAML: the model (actor.path), GPUs (cluster), batch "
        "(train_dataset.batch_size × gconfig.n_samples), lengths and engines come from it; "
        "flags override",
    )
    parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="overrides for --config")
    reference_flag(parser)  # --config's keys, checked as check checks them
    parser.add_argument("--model", metavar="M", help="path, hub id or name")
    parser.add_argument("--gpus", type=positive, metavar="N", help="GPUs in all")
    gpu_flags(parser)  # --gpu and --memory-reserve-gib, as check, layouts and explain take them
    parser.add_argument("--gpus-per-node", type=positive, default=None, metavar="N")
    parser.add_argument(
        "--batch-size",
        type=count,
        default=None,
        metavar="N",
        help=f"prompts per RL step, train_dataset.batch_size (default: the config's, else "
        f"{STEP_PROMPTS})",
    )
    parser.add_argument(
        "--n-samples",
        type=count,
        default=None,
        metavar="N",
        help=f"sequences sampled per prompt, gconfig.n_samples (default: the config's, else "
        f"{SAMPLES})",
    )
    parser.add_argument("--batch", type=count, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--prompt-len",
        type=count,
        default=None,
        metavar="N",
        help=f"{PROMPT_LEN_HELP[: -len(')')]}; --config: its own)",
    )
    parser.add_argument(
        "--gen-len",
        type=count,
        default=None,
        metavar="N",
        help=f"{GEN_LEN_HELP} (default {NEW_TOKENS:,}; --config: its own)",
    )
    parser.add_argument("--no-ref", action="store_true", help="no reference model (kl_ctl=0)")
    parser.add_argument("--critic", action="store_true", help="a critic colocated with actor")
    parser.add_argument(
        "--sync", action="store_true", help="synchronous RL: generation and training alternate"
    )
    parser.add_argument(
        "--train-backend",
        choices=("megatron", "fsdp", "archon"),
        default=None,
        help="default: the config's actor backend, else megatron",
    )
    parser.add_argument(
        "--rollout-backend",
        choices=("sglang", "vllm"),
        default=None,
        help="default: the config's rollout backend, else sglang",
    )
    parser.add_argument(
        "--tokens",
        type=count,
        default=None,
        metavar="N",
        help=f"{TOKENS_HELP[: -len(')')]}; --config: the actor's own)",
    )
    parser.add_argument(
        "--recompute",
        choices=RECOMPUTE,
        default=None,
        help=f"{RECOMPUTE_HELP[: -len(')')]}; --config: the actor's own)",
    )
    parser.add_argument(
        "--context-length",
        type=count,
        default=None,
        metavar="N",
        help=f"{CONTEXT_LENGTH_HELP[: -len(')')]}; --config: the rollout's own)",
    )
    parser.add_argument("--top", type=positive, default=3, metavar="K")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="the finalists' overrides, one job per line, for a short real run each",
    )
    hardware_flags(parser)
    mean_gen_len_flag(parser)
    calibration_flag(parser)
    ns = parser.parse_args(args)
    if ns.batch is not None:  # explain's and calibrate's --batch is one instance's
        parser.error(
            "--batch is not suggest's: give --batch-size (train_dataset.batch_size, prompts "
            "per step) and --n-samples (gconfig.n_samples); --batch is one inference "
            "instance's sequences in flight in explain and calibrate"
        )
    ref, critic = not ns.no_ref, ns.critic
    if ns.config:
        ref, critic = _suggest_from_config(ns)
    elif ns.overrides:
        raise AllocationValidationError("KEY=VALUE overrides go with --config FILE")
    else:  # the reference's own cap, gconfig.max_tokens unset
        default = f"the reference's default gconfig.max_tokens {MAX_TOKENS:,}"
        _cap_generation(ns, RunConfig(), default, "pass --config with a larger gconfig.max_tokens")
    for flag in ("model", "gpus", "gpu"):
        missing = chosen_gpu(ns) is None if flag == "gpu" else getattr(ns, flag) is None
        if missing:
            raise AllocationValidationError(
                f"--{flag} is needed (or an experiment --config that sets it)"
            )
    arch = find_model(ns.model)
    hardware = hardware_from_flags(ns, arch)
    gpu = gpu_spec(ns)
    step: dict[str, object] = getattr(ns, "config_step", None) or {}
    mean = machine(ns).mean_gen_len  # --mean-gen-len, the environment
    shape = RunShape(
        batch=_step_sequences(ns),
        prompt_len=ns.prompt_len or PROMPT_TOKENS,
        gen_len=ns.gen_len or NEW_TOKENS,
        ref=ref,
        critic=critic,
        asynchronous=not ns.sync,
        mean_gen_len=mean.value if mean is not None else None,
        in_flight=step.get("in_flight"),  # type: ignore[arg-type]
        server=step.get("server") or ServerLimit(),  # type: ignore[arg-type]
        recompute_logprob=bool(step.get("recompute_logprob", False)),
        update_mode=str(step.get("update_mode", WEIGHT_UPDATE_MODE)),
        mode=rl_step.SYNCHRONOUS if ns.sync else step.get("mode"),  # type: ignore[arg-type]
        minibatches=int(step.get("minibatches", PPO_MINIBATCHES)),  # type: ignore[call-overload]
        critic_minibatches=int(step.get("critic_minibatches", PPO_MINIBATCHES)),  # type: ignore[call-overload]
        dynamic_bs=bool(step.get("dynamic_bs", False)),
    )
    training, ref_training, critic_training, inference = _suggest_settings(ns)
    reserve = machine(ns).memory_reserve  # --memory-reserve-gib, the environment, cluster keys
    proposals = suggest(
        arch,
        ns.gpus,
        gpu.capacity,
        hardware,
        shape,
        train_backend=ns.train_backend or "megatron",
        rollout_backend=ns.rollout_backend or "sglang",
        training=training,
        top=ns.top,
        memory_reserve=reserve.value if reserve is not None else None,
        inference=inference,
        ref_training=ref_training,
        critic_training=critic_training,
    )
    if not proposals:
        raise AllocationError(
            f"no split of {ns.gpus} {gpu.name} GPUs fits {ns.model}: the rollout or the "
            f"trainer does not fit on any share; {memory_fixes(ns)}"
            + getattr(ns, "config_execution_note", "")
        )
    if ns.json:
        listed = [p.to_dict() for p in proposals]
        if ns.config:  # the config's own split (the plan's pace) beside the proposals
            current = getattr(ns, "current", None)
            print(json.dumps({"current": _current(current), "proposals": listed}, indent=1))
        else:
            print(json.dumps(listed, indent=1))
        return 0
    if ns.sweep:
        print("# one job per finalist: Hydra's -m takes a Cartesian product, which would pair")
        print("# rollout and actor layouts that do not share the GPUs; run each line")
        for p in proposals:
            print(" ".join(p.overrides()))
        return 0
    mode = shape.step_mode
    print(
        f"{ns.gpus} × {gpu.name}, {ns.model}: {shape.batch} sequences of {shape.prompt_len:,} + "
        f"{shape.gen_len:,} tokens per step, {mode}"
    )
    current = getattr(ns, "current", None)
    if current is not None:  # the config's own split: the plan's pace, the same figures
        print(
            f"current split (the plan's pace): generation {current.generate_seconds:.1f} s, "
            f"training {current.train_seconds:.1f} s, step {current.step_seconds:.1f} s "
            f"{current.mode} — {current.advice}"
        )
    for rank, p in enumerate(proposals, 1):
        r, a = p.rollout, p.actor
        print()
        print(
            f"{rank}. rollout {p.rollout_gpus} GPUs {r.spec}, training {p.train_gpus} GPUs "
            f"{a.spec}"
            + (f", {p.free_gpus} GPUs free" if p.free_gpus else "")
            + f": step ≈ {p.step_seconds:.1f} s — {p.advice}"
        )
        print(
            f"   generation {p.generate_seconds:.1f} s: {r.speed.tokens_per_second:,.0f} "
            f"tokens/s, bottleneck {r.speed.bottleneck}, {readable_bytes(r.memory.total)} per GPU"
            + at_the_edge(r.memory)
        )
        print(
            f"   training   {p.train_seconds:.1f} s: {a.speed.tokens_per_second:,.0f} tokens/s "
            f"(actor), MFU {a.speed.mfu:.0%}, bottleneck {a.speed.bottleneck}, "
            f"{readable_bytes(a.memory.total)} per GPU"
            + at_the_edge(a.memory)
            + (" (+ ref forward)" if shape.ref else "")
            + (" (+ critic)" if shape.critic else "")
            + host_share(a.speed)
        )
        print("   " + " ".join(p.overrides()))
        print("   " + p.yaml().rstrip().replace("\n", "\n   "))
    print()
    for note in dict.fromkeys(p.search_note for p in proposals if p.search_note):
        print(f"# searched: {note}")
    cap = getattr(ns, "cap_note", None)
    host = (
        (f"host time per decoder layer and pass {HOST_SOURCE}",)
        if any(host_share(p.actor.speed) for p in proposals)
        else ()
    )
    footer(ns, proposals[0].actor.speed.assumptions + ((cap,) if cap else ()) + host)
    return 0
