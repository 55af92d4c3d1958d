"""``areal-alloc calibrate``: fit the speed estimate to one measured step, and the stored fits."""

from __future__ import annotations

import argparse
import sys

from areal_alloc.catalogue import find_model
from areal_alloc.cli.args import (
    command_parser,
    count,
    positive,
    real,
)
from areal_alloc.cli.flags import BATCH_HELP, memory_flags, speed_flags
from areal_alloc.cli.machine import chosen_gpu, gpu_spec, hardware_from_flags, settings_from_flags
from areal_alloc.cli.render import table
from areal_alloc.defaults import (
    CONTEXT_LENGTH,
)
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate import calibration
from areal_alloc.estimate.engines import estimate_allocation
from areal_alloc.estimate.layout import instance_decode, training_speed
from areal_alloc.estimate.speed import fit_decode, fit_training
from areal_alloc.model import ModelAllocation


def calibrate(args: list[str]) -> int:
    parser = command_parser(
        "calibrate",
        "Fit the estimate to one real measurement: a training step's seconds, or an "
        "inference engine's generated tokens per second. The fitted efficiency is kept for "
        "this model and GPU, and explain, layouts --rank, suggest and the plan start from it.",
        "examples:\n  areal-alloc calibrate megatron:d4t2 --model Qwen3-8B --gpu H100-80GB "
        "--step-seconds 14.2 --tokens-per-step 1048576 --tokens 16384 --recompute full\n"
        "  areal-alloc calibrate sglang:d2t4 --model Qwen3-8B --gpu H100-80GB "
        "--tokens-per-second 9000 --batch 128 --seq-len 8192\n"
        "  areal-alloc calibrate --list\n"
        "  areal-alloc calibrate --forget --model Qwen3-8B --gpu H100-80GB",
    )
    parser.add_argument("spec", nargs="?", help="the layout that was measured")
    parser.add_argument(
        "--list", action="store_true", help="show the stored calibrations and where they came from"
    )
    parser.add_argument(
        "--forget",
        action="store_true",
        help="remove the stored calibrations (with --model and --gpu: only that one)",
    )
    parser.add_argument(
        "--step-seconds",
        type=real(0, calibration.MAX_STEP_SECONDS),
        metavar="S",
        help="one optimizer step (one train_batch over --tokens-per-step; an RL step's "
        "ppo_update runs ppo_n_minibatches of them)",
    )
    parser.add_argument(
        "--tokens-per-second",
        type=real(0, calibration.MAX_TOKENS_PER_SECOND),
        metavar="X",
        help="generated tokens/s (inference)",
    )
    parser.add_argument(
        "--batch",
        type=count,
        default=None,
        metavar="N",
        help=f"{BATCH_HELP} (default: what the KV cache holds, at most 256)",
    )
    parser.add_argument("--gpus-per-node", type=positive, default=None, metavar="N")
    memory_flags(parser)
    speed_flags(parser)
    ns = parser.parse_args(args)
    if ns.list or ns.forget:
        return _stored_calibrations(ns)
    if not ns.spec:
        raise AllocationValidationError(
            "calibrate needs the layout that was measured (e.g. megatron:d4t2), or --list "
            "or --forget"
        )
    if not ns.model or chosen_gpu(ns) is None:
        raise AllocationValidationError("calibrate needs --model and --gpu")
    alloc = ModelAllocation.from_str(ns.spec)
    arch = find_model(ns.model)
    hardware = hardware_from_flags(ns)
    training, inference = settings_from_flags(ns, alloc.backend)
    if alloc.is_inference:
        if ns.tokens_per_second is None:
            raise AllocationValidationError(
                f"{alloc.spec} is an inference layout: give --tokens-per-second"
            )
        memory = estimate_allocation(alloc, arch, gpu_spec(ns).capacity, training, inference)
        context = ns.seq_len or ns.context_length
        # the sequences the KV cache holds at this context (the plan's rule), unless --batch
        # says how many were in flight
        one, batch = instance_decode(arch, alloc.parallel, hardware, memory, context, ns.batch)
        instances = alloc.n_instances
        calibration.check_measured(
            ns.tokens_per_second, "--tokens-per-second", calibration.MAX_TOKENS_PER_SECOND
        )
        efficiency = fit_decode(ns.tokens_per_second, one, hardware, instances)
        source = (
            f"a measured {ns.tokens_per_second:g} generated tokens/s of {alloc.spec} "
            f"(batch {batch}, context {context:,})"
        )
        stored = calibration.Calibration(hbm_efficiency=efficiency, hbm_source=source)
        print(
            f"measured {ns.tokens_per_second:,.0f} tokens/s, estimated "
            f"{one.tokens_per_second * instances:,.0f} at HBM efficiency "
            f"{hardware.hbm_efficiency:g}: fitted HBM efficiency {efficiency:.3g}"
        )
    else:
        if ns.step_seconds is None:
            raise AllocationValidationError(
                f"{alloc.spec} is a training layout: give --step-seconds"
            )
        sequence = ns.seq_len or min(training.tokens_per_micro_batch, CONTEXT_LENGTH)
        estimate = training_speed(
            alloc.backend, arch, alloc.parallel, hardware, ns.tokens_per_step, sequence, training
        )
        efficiency = fit_training(ns.step_seconds, estimate, hardware)
        source = (
            f"a measured {ns.step_seconds:g} s step of {alloc.spec} ({ns.tokens_per_step:,} tokens)"
        )
        stored = calibration.Calibration(compute_efficiency=efficiency, compute_source=source)
        print(
            f"measured {ns.step_seconds:g} s, estimated {estimate.seconds:.3g} s at compute "
            f"efficiency {hardware.compute_efficiency:g}: fitted compute efficiency "
            f"{efficiency:.3g} (communication kept as estimated)"
        )
    path = calibration.save(arch, gpu_spec(ns).name, stored, model=ns.model)
    if path is None:
        print(
            f"areal-alloc calibrate: the cache folder {calibration.folder()} is not private to "
            "you (yours, no group or other write bit) or not writable; nothing was kept",
            file=sys.stderr,
        )
        return 1
    print(
        f"kept in {path}: explain, layouts --rank, suggest and the plan (check, the app, the "
        f"hook) for {ns.model} on {gpu_spec(ns).name} start from it ({calibration.OFF})"
    )
    return 0


def _stored_calibrations(ns: argparse.Namespace) -> int:
    """``calibrate --list`` and ``calibrate --forget [--model M --gpu G]``."""
    if ns.list and ns.forget:
        raise AllocationValidationError("give --list or --forget, not both")
    if ns.spec:
        raise AllocationValidationError(
            f"--list and --forget take no layout (got {ns.spec!r}); --forget takes --model "
            f"and --gpu to remove only that calibration"
        )
    if not calibration.usable():
        print(
            f"no calibration is read or kept: the cache folder {calibration.folder()} is not "
            "private to you (yours, no group or other write bit), so what it holds is ignored"
        )
        return 0
    if ns.forget:
        if bool(ns.model) != (chosen_gpu(ns) is not None):
            raise AllocationValidationError(
                "calibrate --forget removes every calibration, or with both --model and --gpu "
                "only that one"
            )
        if ns.model:
            gpu = gpu_spec(ns).name
            gone = calibration.forget(find_model(ns.model), gpu)
            print(
                f"removed the calibration of {ns.model} on {gpu}"
                if gone
                else f"no calibration of {ns.model} on {gpu} is stored"
            )
        else:
            gone = calibration.forget()
            print(f"removed {gone} stored calibration(s)" if gone else "no calibration is stored")
        return 0
    rows = [["model", "GPU", "compute", "HBM", "from"]]
    for key, model, stored in calibration.entries():
        gpu, _, shape = key.partition("|")
        sources = [s for s in (stored.compute_source, stored.hbm_source) if s]
        rows.append(
            [
                model or shape,
                gpu,
                f"{stored.compute_efficiency:.3g}" if stored.compute_efficiency else "-",
                f"{stored.hbm_efficiency:.3g}" if stored.hbm_efficiency else "-",
                "; ".join(sources),
            ]
        )
    if len(rows) == 1:
        print("no calibration is stored")
        return 0
    print("\n".join(table(rows)))
    print(f"# {len(rows) - 1} stored calibration(s): {calibration.OFF}")
    return 0
