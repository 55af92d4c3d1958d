"""``suggest``'s inputs (areal_alloc.search.inputs): the flags read once into a
:class:`~areal_alloc.search.inputs.Given`, alone or over an experiment's ``--config``
composed as the reference composes it, its plan run once."""

from __future__ import annotations

import argparse

from areal_alloc.cli.machine import machine, settings_of
from areal_alloc.compose import compose_file
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.estimate.pace import Pace
from areal_alloc.estimate.system import GPUSpec
from areal_alloc.experiment.read import read_experiment
from areal_alloc.plan import plan_config
from areal_alloc.search.inputs import Given, SearchInputs, from_experiment, from_flags
from areal_alloc.settings import Resolved


def suggest_inputs(ns: argparse.Namespace) -> tuple[SearchInputs, Resolved]:
    """The search's inputs: ``--config``'s experiment under the flags, else the flags; and
    the machine's settings they were read with."""
    if not ns.config:
        if ns.overrides:
            raise AllocationValidationError("KEY=VALUE overrides go with --config FILE")
        found = machine(ns)
        return from_flags(given_of(ns, found)), found
    experiment = read_experiment(
        compose_file(ns.config, list(ns.overrides)),
        reference=ns.reference_version,
        app_keys=ns.app_keys or (),
    )
    # the flags, the environment, nvidia-smi, then cluster.gpu & co
    found = settings_of(ns).resolve(experiment.config)
    try:  # the plan, once: check's own (its settings: the flags, the environment, nvidia-smi)
        plan = plan_config(experiment, on_memory="warn", settings=settings_of(ns))
        pace = plan.pace
    except AllocationError:  # a config check refuses still gives its cluster and engines
        plan, pace = plan_config(experiment, on_memory="off"), None
    inputs = from_experiment(
        experiment,
        given_of(ns, found),
        capacity=plan.capacity,
        gpus_per_node=plan.n_gpus_per_node,
        pace=pace,
    )
    return inputs, found


def given_of(ns: argparse.Namespace, found: Resolved) -> Given:
    """``suggest``'s flags, read once, and the machine's settings they resolve to."""
    chosen, reserve, mean = found.gpu, found.memory_reserve, found.mean_gen_len
    return Given(
        model=ns.model,
        gpus=ns.gpus,
        gpus_per_node=ns.gpus_per_node,
        gpu=GPUSpec(chosen.name, chosen.capacity) if chosen is not None else None,
        batch_size=ns.batch_size,
        n_samples=ns.n_samples,
        prompt_len=ns.prompt_len,
        gen_len=ns.gen_len,
        no_ref=ns.no_ref,
        critic=ns.critic,
        sync=ns.sync,
        train_backend=ns.train_backend,
        rollout_backend=ns.rollout_backend,
        tokens=ns.tokens,
        recompute=ns.recompute,
        context_length=ns.context_length,
        mean_gen_len=mean.value if mean is not None else None,
        memory_reserve=reserve.value if reserve is not None else None,
    )


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
