"""``explain``'s speed: one inference instance's generation or a training engine's step, from
its speed flags, term by term."""

from __future__ import annotations

import argparse

from areal_alloc.catalogue import find_model
from areal_alloc.cli.args import (
    count,
    positive,
)
from areal_alloc.cli.flags import (
    BATCH_HELP,
    GEN_LEN_HELP,
    PROMPT_LEN_HELP,
    SEQ_LEN_TRAINING_HELP,
    TOKENS_PER_STEP_HELP,
    calibration_flag,
    hardware_flags,
    mean_gen_len_flag,
)
from areal_alloc.cli.machine import gpu_spec, hardware_from_flags, machine, settings_from_flags
from areal_alloc.cli.render import table
from areal_alloc.defaults import (
    CONTEXT_LENGTH,
    NEW_TOKENS,
    PROMPT_TOKENS,
    TOKENS_PER_STEP,
)
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.speed_inference import instance_generation
from areal_alloc.estimate.speed_training import settings_step
from areal_alloc.model import ModelAllocation

#: ``explain``'s flags that ask for a speed: inference, then training.
_GENERATION_FLAGS = ("batch", "prompt_len", "gen_len", "mean_gen_len")


_TRAINING_FLAGS = ("tokens_per_step", "seq_len")


def explain_speed_flags(parser: argparse.ArgumentParser) -> None:
    """``explain``'s speed flags: one instance's generation (--batch, --prompt-len,
    --gen-len) or the whole training engine's step (--tokens-per-step, --seq-len, with
    memory_flags' --tokens and --recompute), at the GPU's speeds."""
    group = parser.add_argument_group("speed (with --model and a GPU with speeds)")
    group.add_argument(
        "--batch", type=count, default=None, metavar="B", help=f"{BATCH_HELP} (needed)"
    )
    group.add_argument(
        "--prompt-len", type=count, default=None, metavar="P", help=f"inference: {PROMPT_LEN_HELP}"
    )
    group.add_argument(
        "--gen-len",
        type=count,
        default=None,
        metavar="O",
        help=f"inference: {GEN_LEN_HELP} (default {NEW_TOKENS:,})",
    )
    # None: not given (a speed is estimated when one is); the default is the same
    group.add_argument(
        "--tokens-per-step", type=count, default=None, metavar="N", help=TOKENS_PER_STEP_HELP
    )
    group.add_argument(
        "--seq-len", type=count, default=None, metavar="N", help=SEQ_LEN_TRAINING_HELP
    )
    group.add_argument("--gpus-per-node", type=positive, default=None, metavar="N")
    hardware_flags(parser)
    mean_gen_len_flag(parser)
    calibration_flag(parser)


def explain_speed(alloc: ModelAllocation, ns: argparse.Namespace) -> dict[str, object]:
    """``{"generation": …}`` for an inference layout or ``{"training": …}`` for a training
    one, when a speed flag was given; ``{}`` otherwise."""
    given = [f for f in (*_GENERATION_FLAGS, *_TRAINING_FLAGS) if getattr(ns, f) is not None]
    if not given:
        return {}
    flags = ", ".join("--" + f.replace("_", "-") for f in given)
    if not ns.model:
        raise AllocationValidationError(f"{flags} need --model: the speed of which model?")
    wrong = _TRAINING_FLAGS if alloc.is_inference else _GENERATION_FLAGS
    misplaced = [f for f in given if f in wrong]
    if misplaced:
        kind = "an inference" if alloc.is_inference else "a training"
        fits = "--batch, --gen-len" if alloc.is_inference else "--tokens-per-step, --seq-len"
        named = ", ".join("--" + f.replace("_", "-") for f in misplaced)
        raise AllocationValidationError(
            f"{alloc.spec} is {kind} layout: {named} do not apply (give {fits})"
        )
    arch = find_model(ns.model)
    hardware = hardware_from_flags(ns, arch)
    training, inference = settings_from_flags(ns, alloc.backend)
    if alloc.is_inference:
        if ns.batch is None:
            raise AllocationValidationError(
                f"{alloc.spec}: the generation speed needs --batch, the sequences in flight "
                f"(given: {flags})"
            )
        memory = estimate_allocation(alloc, arch, gpu_spec(ns).capacity, training, inference)
        kv = memory.kv_cache
        prompt = ns.prompt_len or PROMPT_TOKENS
        mean = machine(ns).mean_gen_len  # --mean-gen-len, then AREAL_ALLOC_MEAN_GEN_LEN
        # None: not given anywhere (the longest); else its value and where it came from
        mean_from = None if mean is None else (mean.value, mean.source)
        run = instance_generation(
            arch,
            alloc.parallel,
            hardware,
            ns.batch,
            prompt,
            ns.gen_len or NEW_TOKENS,
            kv,
            mean_from,
            ns.prompt_len,
        )
        return {"generation": run}
    tokens_mb = training.tokens_per_micro_batch
    step = settings_step(
        alloc.backend,
        arch,
        alloc.parallel,
        hardware,
        training,
        tokens=ns.tokens_per_step or TOKENS_PER_STEP,
        sequence_length=ns.seq_len or min(tokens_mb, CONTEXT_LENGTH),
    )
    return {
        "training": {
            **step.to_dict(),
            "tokens_per_step": step.tokens,
            "tokens_per_micro_batch": tokens_mb,
            "sequence_length": ns.seq_len or min(tokens_mb, CONTEXT_LENGTH),
            "recompute": training.recompute,
        }
    }


def explain_speed_lines(speed: dict[str, object]) -> list[str]:
    """``explain``'s text for :func:`explain_speed`: the figures, the terms, the assumptions."""
    lines: list[str] = []
    for kind, found in speed.items():
        if not isinstance(found, dict):
            continue
        if kind == "generation":
            lines.append(
                f"generation (one instance; an estimate): {found['tokens_per_second']:,.0f} "
                f"generated tokens/s, {found['seconds']:.3g} s for {found['batch']} × "
                f"{found['mean_gen_len']:,} tokens"
            )
        else:
            lines.append(
                f"training (the whole engine; an estimate): {found['tokens_per_second']:,.0f} "
                f"tokens/s, {found['step_seconds']:.3g} s per step, MFU {found['mfu']:.0%}"
            )
        rows = [["term", "seconds", "formula"]]
        for term in found["terms"]:
            hidden = " (hidden)" if term.get("hidden") else ""
            rows.append([term["name"] + hidden, f"{term['seconds']:.3g}", term["formula"]])
        lines.extend("  " + row for row in table(rows))
        # a stored calibration is named as one (with how to turn it off), not as a guess
        lines.extend(
            f"# {a}" if a.startswith("calibrated: ") else f"# assumed: {a}"
            for a in found["assumptions"]
        )
    return lines
