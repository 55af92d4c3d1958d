"""``areal-alloc suggest``: split the GPUs between rollout and training (the search:
areal_alloc.search.split), from flags or an experiment's --config."""

from __future__ import annotations

import argparse
import json

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
    calibration_flag,
    gpu_flags,
    hardware_flags,
    mean_gen_len_flag,
)
from areal_alloc.cli.machine import (
    at_the_edge,
    chosen_gpu,
    footer,
    gpu_spec,
    hardware_from_flags,
    host_share,
    machine,
    memory_fixes,
)
from areal_alloc.cli.suggest_config import (
    cap_generation,
    current_pace,
    step_sequences,
    suggest_from_config,
    suggest_settings,
)
from areal_alloc.defaults import (
    MAX_TOKENS,
    NEW_TOKENS,
    PPO_MINIBATCHES,
    PROMPT_TOKENS,
    SAMPLES,
    STEP_PROMPTS,
    WEIGHT_UPDATE_MODE,
)
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.estimate import rl_step
from areal_alloc.estimate.execution import (
    RECOMPUTE,
    ServerLimit,
)
from areal_alloc.estimate.memory import readable_bytes
from areal_alloc.estimate.speed_host import SOURCE as HOST_SOURCE
from areal_alloc.experiment.records import RunConfig
from areal_alloc.search.split import RunShape, suggest


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
        ref, critic = suggest_from_config(ns)
    elif ns.overrides:
        raise AllocationValidationError("KEY=VALUE overrides go with --config FILE")
    else:  # the reference's own cap, gconfig.max_tokens unset
        default = f"the reference's default gconfig.max_tokens {MAX_TOKENS:,}"
        cap_generation(ns, RunConfig(), default, "pass --config with a larger gconfig.max_tokens")
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
        batch=step_sequences(ns),
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
    training, ref_training, critic_training, inference = suggest_settings(ns)
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
            print(json.dumps({"current": current_pace(current), "proposals": listed}, indent=1))
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
