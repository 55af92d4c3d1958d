"""The run's pace: every engine of an experiment on its own layout, in its run's shape
(``areal_alloc.estimate.execution.step_shape``), on the hardware ``build_hardware`` gives,
by the one RL-step model (:mod:`areal_alloc.estimate.rl_step`): the rollout's generation,
the training side one engine after another, the weight update and, colocated, the switch
between the sides; the step in the config's mode and which way GPUs should move.
:func:`estimate_pace` is the plan's pace (``Plan.pace``), and ``suggest --config``'s current
split."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from areal_alloc.architecture import Architecture
from areal_alloc.estimate.advice import Split, balance, balance_advice
from areal_alloc.estimate.execution import StepShape, TrainingSettings, step_shape
from areal_alloc.estimate.memory import MemoryEstimate
from areal_alloc.estimate.rl_step import (
    ASYNCHRONOUS,
    COLOCATED,
    SYNCHRONOUS,
    EnginePace,
    mode_of,
    step_generation,
    step_seconds,
    switch,
    training_pace,
    training_side,
    weight_update,
)
from areal_alloc.estimate.speed import StepEstimate, StepTerm
from areal_alloc.estimate.speed_host import SOURCE as HOST_SOURCE
from areal_alloc.estimate.system import Hardware, build_hardware, hardware_assumptions
from areal_alloc.experiment.records import Engine, Experiment
from areal_alloc.settings import Resolved, Settings
from areal_alloc.strategy import ParallelStrategy

__all__ = ["Pace", "estimate_pace"]


@dataclass(frozen=True, slots=True)
class Pace:
    engines: tuple[EnginePace, ...]
    generate_seconds: float
    train_seconds: float
    sequences: int
    assumptions: tuple[str, ...]
    #: The stored calibration the estimates start from, with how to turn it off, or "".
    calibration: str = ""
    mode: str = SYNCHRONOUS
    update_seconds: float = 0.0  # the weight update to the rollout
    switch_seconds: float = 0.0  # colocated: offload / onload between the sides
    step_terms: tuple[StepTerm, ...] = ()
    #: where the two sides' GPUs are (None: not known), for the advice
    split: Split | None = None
    #: which way GPUs should move (:func:`.advice.balance_advice`), worked out once when
    #: the pace is made: the plan's text and its JSON print the same line
    advice: str = field(init=False, default="")

    def __post_init__(self) -> None:
        advice = balance_advice(
            self.generate_seconds,
            self.train_seconds,
            self.mode,
            self.split,
            update=self.update_seconds,
        )
        object.__setattr__(self, "advice", advice)

    @property
    def step_seconds(self) -> float:
        """One RL step in the config's own mode (:func:`.step_seconds`)."""
        return self._in_mode(self.mode)

    def _in_mode(self, mode: str) -> float:
        """One RL step of these sides in ``mode`` (:func:`.step_seconds`)."""
        return step_seconds(
            mode,
            self.generate_seconds,
            self.train_seconds,
            self.update_seconds,
            self.switch_seconds if mode == COLOCATED else 0.0,
        )

    @property
    def balance(self) -> float | None:
        """Generation rate over training rate (:func:`.advice.balance`)."""
        return balance(self.generate_seconds, self.train_seconds)

    @property
    def host_text(self) -> str | None:
        """Each training engine's host time per RL step (its step's host term, scaled as
        the step is: ``speed_host``), hidden under its GPU time or beyond it, with the
        figures' source; None where no engine has a host term."""
        parts = []
        for e in self.engines:
            term = e.estimate.host
            if term is None or e.key == "rollout":
                continue
            step = e.estimate.seconds
            seconds = term.seconds * (e.seconds / step if step else 1.0)
            where = "hidden under its GPU time" if term.hidden else "beyond its GPU time"
            parts.append(f"{e.key} {seconds:.3g} s {where}")
        if not parts:
            return None
        return f"{', '.join(parts)} (per decoder layer and pass: {HOST_SOURCE})"

    def to_dict(self) -> dict[str, object]:
        return {
            "engines": {e.key: e.to_dict() for e in self.engines},
            "sequences_per_step": self.sequences,
            "generate_seconds": self.generate_seconds,
            "train_seconds": self.train_seconds,
            "step_seconds": self.step_seconds,
            "mode": self.mode,
            "update_seconds": self.update_seconds,
            "switch_seconds": self.switch_seconds,
            "step_terms": [
                {"name": t.name, "seconds": t.seconds, "formula": t.formula}
                for t in self.step_terms
            ],
            # the same step in the two other separate modes, by the one rule (with the update)
            "async_step_seconds": self._in_mode(ASYNCHRONOUS),
            "sync_step_seconds": self._in_mode(SYNCHRONOUS),
            "balance": self.balance,
            "advice": self.advice,
            "host": self.host_text,
            "assumptions": list(self.assumptions),
            "calibration": self.calibration or None,
        }


_MODE_RULE = {
    ASYNCHRONOUS: "rollout.max_head_offpolicyness > 0, a step takes the slower side "
    "plus the weight update",
    SYNCHRONOUS: "rollout.max_head_offpolicyness = 0 (the reference's default), a step "
    "takes generation + training + the weight update",
    COLOCATED: "the rollout shares the actor's GPUs, a step takes generation + "
    "training + the weight update + the offload/onload between them",
}


def estimate_pace(
    experiment: Experiment,
    memory: Sequence[MemoryEstimate | None],
    models: Sequence[Architecture | None],
    settings: Sequence[TrainingSettings | None],
    machine: Resolved | None = None,
) -> Pace | None:
    """Each engine of ``experiment``'s seconds per RL step (``memory``, ``models`` and
    ``settings`` in its engines' order, from ``areal_alloc.estimate.engines``); None without a
    GPU whose speeds are known.

    ``machine``: the GPU, speeds and efficiencies (``areal_alloc.settings``), else those
    the experiment was resolved with, else the config's ``cluster`` keys only."""
    per_node = experiment.cluster.n_gpus_per_node
    arch = next((m for m in models if m is not None), None)
    if arch is None or per_node < 1:
        return None
    if machine is None:
        machine = experiment.cluster.machine or Settings().resolve(experiment.config)
    hardware = build_hardware(machine, per_node, arch)
    if hardware is None:
        return None
    shape = step_shape(experiment, machine)  # the run's shape, with the reference's defaults
    mode = mode_of(shape.offpolicyness, shape.colocated)
    paces: list[EnginePace] = []
    generating: list[EnginePace] = []
    training: list[EnginePace] = []
    rollout_parallel = None
    resident: list[tuple[str, MemoryEstimate]] = []
    for engine, estimate, model, train_settings in zip(
        experiment.engines, memory, models, settings, strict=True
    ):
        if not engine.active or estimate is None or model is None:
            continue
        if engine.key in ("actor", "rollout"):
            resident.append((engine.key, estimate))  # what a colocated switch moves
        if engine.allocation.is_inference and engine.key == "rollout":
            pace = _rollout_pace(engine, estimate, model, hardware, shape, mode)
            rollout_parallel = engine.allocation.parallel
            generating.append(pace)
        elif engine.allocation.is_inference:  # a teacher scoring every token: a prefill
            pace = _prefill_pace(engine, model, hardware, shape.tokens)
            training.append(pace)
        else:
            allocation = engine.allocation
            pace = training_pace(
                engine.key,
                allocation.backend,
                allocation.parallel,
                model,
                hardware,
                shape,
                train_settings,
            )
            training.append(pace)
        paces.append(pace)
    if not paces:
        return None
    update, shift, terms = _update_terms(
        experiment, arch, hardware, mode, rollout_parallel, dict(resident)
    )
    assumptions = [
        *hardware_assumptions(hardware),
        *shape.assumptions,
        "training-side engines run one after another, as the reference calls them",
        f"mode {mode}: {_MODE_RULE[mode]}",
    ]
    return Pace(
        tuple(paces),
        sum(p.seconds for p in generating),
        training_side(training),
        shape.sequences,
        tuple(dict.fromkeys(assumptions)),
        hardware.calibration,
        mode,
        update,
        shift,
        terms,
        _split(experiment),
    )


def _split(experiment: Experiment) -> Split | None:
    """Where the rollout's and the training side's own GPUs are (engines colocated onto
    another hold none), and the cluster's."""
    rollout, actor = experiment.get("rollout"), experiment.get("actor")
    if rollout is None or actor is None or not rollout.active or not actor.active:
        return None
    training = sum(
        e.allocation.world_size
        for e in experiment.engines
        if e.active and e.key != "rollout" and not e.allocation.scheduling_strategy.is_colocated
    )
    r, a = rollout.allocation.parallel, actor.allocation.parallel
    cluster = experiment.cluster
    return Split(
        rollout.allocation.world_size,
        training,
        cluster.capacity,
        cluster.n_gpus_per_node,
        rollout_unit=r.tp_size * r.pp_size,
        train_unit=a.world_size // max(1, a.dp_size),
    )


def _rollout_pace(
    engine: Engine,
    estimate: MemoryEstimate,
    model: Architecture,
    hardware: Hardware,
    shape: StepShape,
    mode: str,
) -> EnginePace:
    """The rollout's generation of the step's sequences (:func:`step_generation`)."""
    allocation = engine.allocation
    gen = step_generation(
        model,
        allocation.parallel,
        hardware,
        shape,
        estimate.kv_cache,
        instances=allocation.n_instances,
        mode=mode,
        backend=allocation.backend,
    )
    one = replace(gen.estimate, terms=gen.estimate.terms + gen.terms)
    rate = shape.sequences * shape.mean / gen.seconds
    return EnginePace(engine.key, gen.seconds, rate, gen.what, one)


def _prefill_pace(
    engine: Engine, model: Architecture, hardware: Hardware, tokens: int
) -> EnginePace:
    """An inference teacher scoring every token of the step: a prefill at compute."""
    flops = 2.0 * model.parameters.active * tokens
    world = engine.allocation.world_size
    seconds = flops / (world * hardware.peak_tflops * 1e12 * hardware.compute_efficiency)
    formula = (
        f"2 × {model.parameters.active / 1e9:.3g}B active params × {tokens:,} tokens / "
        f"({world} GPUs × {hardware.peak_tflops:g} TFLOP/s × "
        f"{hardware.compute_efficiency:.3g})"
    )
    step = StepEstimate(
        (StepTerm("prefill compute", seconds, formula),),
        tokens,
        flops,
        world,
        hardware.peak_tflops,
    )
    what = f"prefill of {tokens:,} tokens (2 × active params per token)"
    return EnginePace(engine.key, seconds, tokens / seconds, what, step)


def _update_terms(
    experiment: Experiment,
    arch: Architecture,
    hardware: Hardware,
    mode: str,
    rollout_parallel: ParallelStrategy | None,
    resident: dict[str, MemoryEstimate] | None = None,
) -> tuple[float, float, tuple[StepTerm, ...]]:
    """The weight update to the rollout and, colocated, the offload / onload between the
    sides: (update seconds, switch seconds, their terms). ``resident``: the actor's and the
    rollout's memory estimates by key (without one, its bf16 weights per GPU)."""
    actor = experiment.get("actor")
    if rollout_parallel is None or actor is None or not actor.active:
        return 0.0, 0.0, ()
    # both sides inside one node (colocated: they share the same GPUs)
    sizes = (actor.allocation.world_size, rollout_parallel.world_size)
    span = max(sizes) if mode == COLOCATED else sum(sizes)
    inside = experiment.cluster.n_gpus_per_node >= span
    term = weight_update(
        arch,
        experiment.transport,
        hardware,
        inside_node=inside,
        senders=actor.allocation.world_size,
    )
    if mode != COLOCATED:
        return term.seconds, 0.0, (term,)
    weights = arch.parameters.total * 2
    found = resident or {}
    trained, served = found.get("actor"), found.get("rollout")
    # what the actor keeps between its phases, whatever phase sets its peak (a peak at
    # load holds a "load" term and none of these): torch_memory_saver pauses every
    # allocation of the engine's process, with a CPU backup (areal/utils/offload.py
    # lines 43-46, ``torch_memory_saver.pause()`` in FSDPEngine.offload,
    # areal/engine/fsdp_engine.py lines 928-948, AReaL cbff54d6)
    training_bytes = (
        trained.resident if trained is not None else weights / max(1, actor.allocation.world_size)
    )
    rollout_bytes = (
        served.term("weights")
        if served is not None
        else weights / max(1, rollout_parallel.tp_size * rollout_parallel.pp_size)
    )
    moved = switch(hardware, training_bytes, rollout_bytes)
    return term.seconds, moved.seconds, (term, moved)
