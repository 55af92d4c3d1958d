"""The run's pace: each engine's estimated time per RL step, and the balance of the two sides.

Read from the keys the reference writes (areal/api/cli_args.py, with its
defaults): sequences per step = ``train_dataset.batch_size`` ×
``gconfig.n_samples``; each generates up to ``gconfig.max_new_tokens`` (16,384)
after a prompt of ``train_dataset.max_length`` (unset: 1,024 tokens assumed, and
said). The GPU's speeds, the network and the efficiencies come from
``areal_alloc.settings`` (``--gpu``, ``AREAL_ALLOC_GPU``, nvidia-smi, … and last
``cluster.gpu``, ``cluster.peak_tflops`` …) or a kept calibration; the node size
from ``cluster.n_gpus_per_node``.

- rollout: decode steps of every instance, at the batch its KV cache holds;
- actor, critic: one optimizer step over every token of the step;
- ref and a training teacher: a forward pass (a third of forward + backward);
- an inference teacher: a prefill of every token (compute-bound).

The training-side engines run one after another, as the reference's training
loop calls them. Asynchronous (off-policy) runs overlap the two sides, so a step
takes the longer; synchronous ones take the sum. Both are reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from areal_alloc import defaults
from areal_alloc.architecture import Architecture
from areal_alloc.estimate import rl_step
from areal_alloc.estimate.memory import MemoryEstimate, TrainingSettings
from areal_alloc.estimate.speed import StepEstimate, StepTerm, balance_advice, training_step
from areal_alloc.estimate.system import build_hardware, hardware_assumptions
from areal_alloc.experiment.read import Experiment
from areal_alloc.settings import Resolved, Settings

__all__ = ["EnginePace", "Pace", "estimate_pace"]

DEFAULT_PROMPT = defaults.PROMPT_TOKENS
DEFAULT_NEW_TOKENS = defaults.NEW_TOKENS  # GenerationHyperparameters.max_new_tokens


@dataclass(frozen=True, slots=True)
class EnginePace:
    key: str
    seconds: float  # per RL step
    tokens_per_second: float
    what: str
    estimate: StepEstimate

    def to_dict(self) -> dict[str, object]:
        return {
            "seconds_per_step": self.seconds,
            "tokens_per_second": self.tokens_per_second,
            "what": self.what,
            **self.estimate.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class Pace:
    engines: tuple[EnginePace, ...]
    generate_seconds: float
    train_seconds: float
    sequences: int
    assumptions: tuple[str, ...]
    #: The stored calibration the estimates start from, with how to turn it off, or "".
    calibration: str = ""
    mode: str = rl_step.SYNCHRONOUS
    update_seconds: float = 0.0  # the weight update to the rollout
    switch_seconds: float = 0.0  # colocated: offload / onload between the sides
    step_terms: tuple[StepTerm, ...] = ()

    @property
    def step_seconds(self) -> float:
        """One RL step in the config's own mode (:func:`.rl_step.step_seconds`)."""
        return rl_step.step_seconds(
            self.mode,
            self.generate_seconds,
            self.train_seconds,
            self.update_seconds,
            self.switch_seconds,
        )

    @property
    def balance(self) -> float | None:
        """Generation rate over training rate (> 1: rollout outruns training)."""
        if not self.generate_seconds or not self.train_seconds:
            return None
        return self.train_seconds / self.generate_seconds

    @property
    def advice(self) -> str:
        return balance_advice(self.balance)

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
            "async_step_seconds": max(self.generate_seconds, self.train_seconds),
            "sync_step_seconds": self.generate_seconds + self.train_seconds,
            "balance": self.balance,
            "advice": self.advice,
            "assumptions": list(self.assumptions),
            "calibration": self.calibration or None,
        }


def estimate_pace(
    experiment: Experiment,
    memory: Sequence[MemoryEstimate | None],
    models: Sequence[Architecture | None],
    settings: Sequence[TrainingSettings | None],
    machine: Resolved | None = None,
) -> Pace | None:
    """Each engine of ``experiment``'s seconds per RL step (``memory``, ``models`` and
    ``settings`` in its engines' order, from ``areal_alloc.estimate.fit``); None without a GPU
    whose speeds are known.

    ``machine``: the GPU, speeds and efficiencies (``areal_alloc.settings``), else those
    the experiment was resolved with, else the config's ``cluster`` keys only."""
    engines = experiment.engines
    per_node = experiment.cluster.n_gpus_per_node
    arch = next((m for m in models if m is not None), None)
    if arch is None or per_node < 1:
        return None
    if machine is None:
        machine = experiment.cluster.machine or Settings().resolve(experiment.config)
    hardware = build_hardware(machine, per_node, arch)
    if hardware is None:
        return None
    run = experiment.run  # the run's shape, with the reference's defaults
    batch, samples, new_tokens = run.batch, run.samples, run.new_tokens
    prompt = run.max_length
    recompute_logprob = (
        rl_step.DEFAULT_RECOMPUTE_LOGPROB
        if run.recompute_logprob is None
        else run.recompute_logprob
    )
    assumptions = list(hardware_assumptions(hardware))
    if prompt is None:
        prompt = DEFAULT_PROMPT
        assumptions.append(
            f"train_dataset.max_length unset: prompts of {DEFAULT_PROMPT:,} tokens assumed"
        )
    sequences = batch * samples
    mean, mean_source = _mean_gen_len(machine, new_tokens)
    if mean_source:
        assumptions.append(f"mean generation length {mean:,} tokens ({mean_source})")
    else:
        assumptions.append(
            f"mean generation length = gconfig.max_new_tokens={new_tokens:,} (the maximum; "
            f"give --mean-gen-len or the hook's mean_gen_len)"
        )
    mode = rl_step.mode_of(run.max_head_offpolicyness, _colocated(experiment))
    length = prompt + mean
    rollout_parallel = None
    paces: list[EnginePace] = []
    generate = train = 0.0
    for engine, estimate, model, train_settings in zip(
        engines, memory, models, settings, strict=True
    ):
        if not engine.active or estimate is None or model is None:
            continue
        allocation = engine.allocation
        if allocation.is_inference and engine.key == "rollout":
            kv = estimate.kv_cache
            gen = rl_step.rollout(
                model,
                allocation.parallel,
                hardware,
                sequences=sequences,
                instances=allocation.n_instances,
                prompt=prompt,
                max_new_tokens=new_tokens,
                mean_gen_len=mean,
                kv_tokens=kv.tokens if kv is not None else None,
                kv_bytes_per_token=kv.bytes_per_token if kv is not None else 0,
                max_concurrent=run.max_concurrent_rollouts,
                synchronous=mode != rl_step.ASYNCHRONOUS,
            )
            one = replace(gen.estimate, terms=gen.estimate.terms + gen.terms)
            rate = sequences * mean / gen.seconds
            generate += gen.seconds
            rollout_parallel = allocation.parallel
            paces.append(EnginePace(engine.key, gen.seconds, rate, gen.what, one))
            continue
        tokens = sequences * length
        if allocation.is_inference:  # a teacher scoring every token: a prefill
            flops = 2.0 * model.parameters.active * tokens
            world = allocation.world_size
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
            train += seconds
            paces.append(EnginePace(engine.key, seconds, tokens / seconds, what, step))
            continue
        ts = train_settings or TrainingSettings()
        forward_only = ts.optimizer is None
        step = training_step(
            allocation.backend,
            model,
            allocation.parallel,
            hardware,
            tokens_per_step=tokens,
            tokens_per_micro_batch=ts.tokens_per_micro_batch,
            sequence_length=min(length, ts.tokens_per_micro_batch),
            recompute="none" if forward_only else ts.recompute,  # nothing to recompute
            virtual_pipeline=ts.virtual_pipeline,
        )
        seconds = step.seconds / 3 if forward_only else step.seconds
        what = (
            f"forward pass over {tokens:,} tokens (a third of a training step)"
            if forward_only
            else f"one optimizer step over {tokens:,} tokens"
        )
        if engine.key == "actor" and recompute_logprob:
            extra = step.seconds / 3
            step = replace(
                step,
                terms=(
                    *step.terms,
                    StepTerm(
                        "log-prob recomputation",
                        extra,
                        "actor.recompute_logprob: one forward of the actor (a third of its "
                        f"{step.seconds:.4g} s step)",
                    ),
                ),
            )
            seconds += extra
            what += " + one forward to recompute the log-probs"
        train += seconds
        paces.append(EnginePace(engine.key, seconds, tokens / seconds, what, step))
    if not paces:
        return None
    assumptions.append("training-side engines run one after another, as the reference calls them")
    update = shift = 0.0
    terms: list[StepTerm] = []
    actor = experiment.get("actor")
    if rollout_parallel is not None and actor is not None and actor.active:
        # both sides inside one node (colocated: they share the same GPUs)
        sizes = (actor.allocation.world_size, rollout_parallel.world_size)
        span = max(sizes) if mode == rl_step.COLOCATED else sum(sizes)
        inside = experiment.cluster.n_gpus_per_node >= span
        term = rl_step.weight_update(
            arch,
            experiment.update_mode,
            hardware,
            inside_node=inside,
            senders=actor.allocation.world_size,
        )
        update = term.seconds
        terms.append(term)
        if mode == rl_step.COLOCATED:
            moved = rl_step.switch(arch, hardware, actor.allocation.world_size)
            shift = moved.seconds
            terms.append(moved)
    assumptions.append(f"mode {mode}: {_MODE_RULE[mode]}")
    return Pace(
        tuple(paces),
        generate,
        train,
        sequences,
        tuple(dict.fromkeys(assumptions)),
        hardware.calibration,
        mode,
        update,
        shift,
        tuple(terms),
    )


_MODE_RULE = {
    rl_step.ASYNCHRONOUS: "rollout.max_head_offpolicyness > 0, a step takes the slower side "
    "plus the weight update",
    rl_step.SYNCHRONOUS: "rollout.max_head_offpolicyness = 0 (the reference's default), a step "
    "takes generation + training + the weight update",
    rl_step.COLOCATED: "the rollout shares the actor's GPUs, a step takes generation + "
    "training + the weight update + the offload/onload between them",
}


def _colocated(experiment: Experiment) -> bool:
    """The rollout and the actor share GPUs (either colocated onto the other)."""
    for key, other in (("rollout", "actor"), ("actor", "rollout")):
        engine = experiment.get(key)
        scheduling = engine.scheduling if engine is not None else None
        if scheduling is not None and scheduling.is_colocated and scheduling.target == other:
            return True
    return False


def _mean_gen_len(machine: Resolved, new_tokens: int) -> tuple[int, str]:
    """The mean generation length and where it came from ("": the maximum)."""
    found = machine.mean_gen_len
    if found is None:
        return new_tokens, ""
    return min(found.value, new_tokens), f"from {found.source}"
