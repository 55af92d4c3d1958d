"""Each engine of an experiment, its memory per GPU, colocated engines beside it, and what
does not fit (the settings each engine runs with: ``areal_alloc.estimate.execution``).

The model each engine runs and the settings that change memory come from the
experiment's one reading (:class:`areal_alloc.experiment.records.Experiment`), of the
keys the reference already writes (areal/api/cli_args.py), with its defaults; the
GPU and the reserve from ``areal_alloc.settings``:

- model: the engine's ``model_shape`` section, its ``path`` (a local
  config.json, a hub id in the local Hugging Face cache, or a catalogue name;
  a path that exists only on the cluster is matched by its last component),
  for the rollout ``sglang.model_path`` / ``vllm.model``, else ``actor.path``,
  else a top-level ``model_shape``;
- GPU: ``cluster.gpu`` (catalogue) or ``cluster.gpu_memory_gib``; without
  either, memory is shown and nothing is refused; ``cluster.memory_reserve_gib``
  overrides the reserve;
- each engine's settings: :mod:`areal_alloc.estimate.execution` (its docstring
  lists the keys it reads).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from areal_alloc.architecture import Architecture
from areal_alloc.errors import reading
from areal_alloc.estimate.backends import (
    TRAINING,
    NoEstimateModel,
    server_model,
    training_model,
)
from areal_alloc.estimate.execution import (
    InferenceSettings,
    TrainingSettings,
    forced_minibatches_note,
    inference_settings,
    training_settings,
)
from areal_alloc.estimate.margin import (
    EDGE,
    FITS,
    KV_MEMORY_ERROR,
    NO_FIT,
    judge,
)
from areal_alloc.estimate.memory import KVCache, MemoryEstimate, Phase, Term, readable_bytes
from areal_alloc.estimate.memory_inference import inference_memory
from areal_alloc.estimate.memory_training import training_memory
from areal_alloc.estimate.system import GPUSpec, resolve_gpu
from areal_alloc.experiment.records import Experiment
from areal_alloc.model import ModelAllocation
from areal_alloc.settings import (
    MAX_GPU_MEMORY_GIB,
    ON_MEMORY,
    Resolved,
    Settings,
)

__all__ = [
    "MAX_GPU_MEMORY_GIB",
    "ON_MEMORY",
    "Fit",
    "GPUSpec",
    "estimate_allocation",
    "estimate_memory",
    "memory_problems",
    "offloaded_while",
    "resolve_gpu",
    "room_fix",
]


class EngineLike(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def backend_key(self) -> str: ...
    @property
    def allocation(self) -> ModelAllocation: ...
    @property
    def active(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Fit:
    """Every engine's estimate (None where its model is unknown) and what was assumed."""

    estimates: tuple[MemoryEstimate | None, ...]
    gpu: GPUSpec | None
    assumptions: tuple[str, ...] = ()
    #: the model each engine runs, and a training engine's settings (None elsewhere)
    models: tuple[Architecture | None, ...] = ()
    training: tuple[TrainingSettings | None, ...] = ()
    #: why an active engine has no estimate: the key read and what was not found
    not_estimated: tuple[str | None, ...] = ()


# --- estimating ---------------------------------------------------------------------


def estimate_allocation(
    allocation: ModelAllocation,
    arch: Architecture,
    capacity: int | None,
    training: TrainingSettings | None = None,
    inference: InferenceSettings | None = None,
    key: str = "engine",
) -> MemoryEstimate:
    """One layout's memory per GPU with the given settings (the reference's defaults)."""
    with reading(key, arch.source):  # an unexpected error names the engine and its model
        if allocation.is_inference:
            return inference_memory(
                key,
                allocation.backend,
                arch,
                allocation.parallel,
                inference or InferenceSettings(),
                capacity,
            )
        training = training or TrainingSettings()
        return training_memory(
            key, allocation.backend, arch, allocation.parallel, training, capacity
        )


def estimate_memory(experiment: Experiment, settings: Resolved | None = None) -> Fit:
    """Each engine of ``experiment`` with its memory per GPU (in its order), colocated
    engines added to their target's GPUs.

    The GPU and the reserve come from ``settings`` (``areal_alloc.settings``), else
    those the experiment was resolved with, else the config's own ``cluster`` keys.
    """
    if settings is None:
        settings = experiment.cluster.machine
    if settings is None:
        settings = Settings().resolve(experiment.config)
    engines = experiment.engines
    chosen = settings.gpu
    gpu = GPUSpec(chosen.name, chosen.capacity) if chosen is not None else None
    reserve = settings.memory_reserve.value if settings.memory_reserve is not None else None
    # what the device reports (catalogue.REPORTED_GIB): what a training engine fits in and
    # what an inference server sizes its claim from
    capacity = gpu.capacity if gpu else None
    device = capacity
    forced = forced_minibatches_note(experiment.startup)
    notes: list[str] = [forced] if forced else []
    estimates: list[MemoryEstimate | None] = []
    models: list[Architecture | None] = []
    trainings: list[TrainingSettings | None] = []
    missing: list[str | None] = []
    for engine in engines:
        arch, note = engine.model.architecture() if engine.active else (None, None)
        models.append(arch)
        trainings.append(None)
        # a model named but not found: said beside the engine, never only in the notes
        missing.append(note if arch is None and note else None)
        if note and arch is not None:
            notes.append(note)
        if arch is None:
            estimates.append(None)
            continue
        allocation = engine.allocation
        try:  # a backend the estimates have no model of, refused with the key that names it
            (server_model if allocation.is_inference else training_model)(allocation.backend)
        except NoEstimateModel as error:
            raise NoEstimateModel(
                f"{engine.backend_key}={allocation.spec!r}: {error.message}"
            ) from None
        if allocation.is_inference:
            serve = inference_settings(engine, reserve, device, experiment.run)
            estimates.append(
                estimate_allocation(allocation, arch, capacity, None, serve, engine.key)
            )
        else:
            minibatches = experiment.startup.minibatches_of(engine.key)
            train = training_settings(engine, experiment.run, reserve, notes, minibatches)
            trainings[-1] = train
            estimates.append(
                estimate_allocation(allocation, arch, capacity, train, None, engine.key)
            )
    estimates = _add_colocated(experiment, estimates, notes)
    return Fit(
        tuple(estimates),
        gpu,
        tuple(dict.fromkeys(notes)),
        tuple(models),
        tuple(trainings),
        tuple(missing),
    )


def _add_colocated(
    experiment: Experiment,
    estimates: list[MemoryEstimate | None],
    notes: list[str],
) -> list[MemoryEstimate | None]:
    """Engines on the same GPUs add up, unless the other one is offloaded meanwhile.

    While an engine runs, every engine sharing its GPUs either stays resident
    (a training engine: its weights, gradients and optimizer states; an inference
    server: the memory fraction it claimed) or is offloaded by the reference's
    trainer (:func:`_offloaded_while`). Each engine is checked with what stays.
    """
    engines = experiment.engines
    index = {e.key: i for i, e in enumerate(engines)}
    groups: dict[str, list[int]] = {}
    for i, engine in enumerate(engines):
        strategy = engine.allocation.scheduling_strategy
        root = strategy.target if strategy.is_colocated and strategy.target in index else engine.key
        groups.setdefault(root or engine.key, []).append(i)
    out = list(estimates)
    for members in groups.values():
        if len(members) < 2:
            continue
        for runner in members:
            estimate = estimates[runner]
            if estimate is None:
                continue
            training: list[Term] = []  # beside its phases after loading
            loading: list[Term] = []  # beside its load phase
            for other in members:
                there = estimates[other]
                if other == runner or there is None:
                    continue
                if (
                    there.kv_cache is None
                    and there.at_load
                    and _loaded_before(experiment, other, runner)
                ):
                    held = (
                        "weights, gradient buffers and main params (built with the model)"
                        if training_model(there.backend).sharding == "megatron"
                        else "weights (gradients and optimizer states come at its first step)"
                    )
                    loading.append(
                        Term(
                            "colocated",
                            there.at_load,
                            f"{engines[other].key}'s loaded {held} stay on these GPUs while "
                            f"{engines[runner].key} loads (every training engine loads before "
                            f"any is offloaded)",
                        )
                    )
                why = _offloaded_while(experiment, runner, other)
                if why is not None:
                    notes.append(
                        f"{engines[runner].key} and {engines[other].key} share GPUs; {why}, so "
                        f"{engines[runner].key} is checked without it"
                    )
                    continue
                term = _resident_term(
                    engines, runner, other, there, there.resident, "weights and states"
                )
                if term is not None:
                    training.append(term)
            out[runner] = _beside(estimate, training, loading)
    return out


#: The order the reference's trainer loads its training engines, all before any
#: inference server starts (areal/trainer/rl_trainer.py lines 311-327, the actor
#: offloaded at 333-335, then _init_rollout at 356; reference commit cbff54d6).
LOAD_ORDER = ("actor", "critic", "ref", "teacher")


def _loaded_before(experiment: Experiment, other: int, runner: int) -> bool:
    """Whether the training engine ``other`` is on the GPUs while ``runner`` loads.

    Every training engine loads before any offloading starts, in :data:`LOAD_ORDER`,
    and before any inference server starts; only the actor is offloaded before the
    servers start, when it is offloaded while they serve (areal/trainer/rl_trainer.py
    lines 333-335 and, with awex, 345; critic, ref and teacher by their own
    ``offload`` only at line 490, after the servers start; reference commit cbff54d6).
    """
    engines = experiment.engines
    off, run = engines[other].key, engines[runner].key
    if engines[runner].allocation.is_inference:
        return off != "actor" or _offloaded_while(experiment, runner, other) is None
    if off not in LOAD_ORDER or run not in LOAD_ORDER:
        return False
    return LOAD_ORDER.index(off) < LOAD_ORDER.index(run)


def _beside(estimate: MemoryEstimate, training: list[Term], loading: list[Term]) -> MemoryEstimate:
    """``estimate`` with what colocated engines keep beside each of its phases
    (``loading`` beside its load phase, ``training`` beside every later one), its
    peak chosen again: with the other engines beside it, another phase may peak."""
    if not training and not loading:
        return estimate
    return estimate.with_phases(
        tuple(
            Phase(p.name, (*p.terms, *(loading if p.name == "load" else training)))
            for p in estimate.phases
        )
    )


def _resident_term(
    engines: Sequence[EngineLike],
    runner: int,
    other: int,
    there: MemoryEstimate,
    held: int,
    what: str,
) -> Term | None:
    """What ``other`` keeps on the GPUs ``runner`` runs on: ``held`` bytes, or a server's claim."""
    engine, key = engines[other], engines[other].key
    path = engine.backend_key.rsplit(".", 1)[0]
    if there.kv_cache is not None:
        fraction = there.claimed_fraction
        claimed = int(fraction * there.capacity) if fraction and there.capacity else None
        if claimed is None:
            claimed = there.term("weights")
        what = f"{fraction:g} of each GPU" if fraction is not None else "its weights (no GPU named)"
        server = engine.allocation.backend
        return Term(
            "colocated",
            claimed,
            f"{key} ({server}) keeps {what} while both are resident; offload one of them "
            f"({_offload_key(engines, runner)}=true) or lower the {server} memory fraction",
        )
    if not held:
        return None
    return Term(
        "colocated",
        held,
        f"{key}'s {what} stay on these GPUs while {engines[runner].key} runs "
        f"({path}.offload=false)",
    )


def _offload_key(engines: Sequence[EngineLike], i: int) -> str:
    engine = engines[i]
    if engine.key == "teacher":
        return "teacher.offload"
    return f"{engine.backend_key.rsplit('.', 1)[0]}.offload"


def offloaded_while(experiment: Experiment, runner: int, other: int) -> str | None:
    """Why engine ``other`` is off its GPUs while engine ``runner`` runs (None: it stays):
    the reference's offloading as the colocation estimate reads it (the host estimate,
    ``estimate.host``, counts what an offloaded engine leaves in host memory)."""
    return _offloaded_while(experiment, runner, other)


def _offloaded_while(experiment: Experiment, runner: int, other: int) -> str | None:
    """Why ``other`` is off the GPU while ``runner`` runs, or None when it stays.

    The reference's trainer (areal/trainer/rl_trainer.py, reference commit
    cbff54d6): ``_should_offload_rollout`` when actor and rollout are colocated
    either way (lines 155, 502-507), ``_should_offload_actor =
    _should_offload_rollout or actor.offload`` (156-158), critic, ref and teacher
    by their own ``offload`` (159-165); v1 awex colocation hands the GPUs over
    itself, rollout off while the actor trains and the actor off while it serves
    (169-171, 766-779). In a step (lines 686-856): the rollout is onloaded only to
    generate; ref and teacher only around their forward pass; the critic from its
    values until after its own update, so it stays while the actor trains; the
    actor is onloaded after ref and teacher and stays through the critic's update.
    """
    engines = experiment.engines
    keys = [e.key for e in engines]
    by_key = dict(zip(keys, engines, strict=True))
    run, off = engines[runner].key, engines[other].key
    awex = experiment.awex_v1

    def colocated(a: str, b: str) -> bool:
        ea, eb = by_key.get(a), by_key.get(b)
        if ea is None or eb is None:
            return False
        sa, sb = ea.allocation.scheduling_strategy, eb.allocation.scheduling_strategy
        return (sa.is_colocated and sa.target == b) or (sb.is_colocated and sb.target == a)

    actor_rollout = colocated("actor", "rollout")

    def flag(key: str) -> bool:
        return by_key[key].offload

    if off == "rollout" and (actor_rollout or awex) and "actor" in keys:
        return (
            "the rollout is offloaded outside generation (actor.weight_update_mode=awex hands "
            "the GPUs over)"
            if awex and not actor_rollout
            else "the reference offloads a rollout colocated with the actor outside generation"
        )
    if off == "actor" and run != "critic":
        if awex:
            return "actor.weight_update_mode=awex offloads the actor while the rollout serves"
        if actor_rollout:
            return "the reference offloads an actor colocated with the rollout between its phases"
        if flag("actor"):
            return "actor.offload=true moves the actor off the GPU between its phases"
    if off == "critic" and run == "rollout" and flag("critic"):
        return "critic.offload=true moves the critic off the GPU during generation"
    if off in ("ref", "teacher") and flag(off):
        return f"{_offload_key(engines, other)}=true onloads {off} only for its forward pass"
    return None


def _colocated_text(estimate: MemoryEstimate) -> str:
    return "; ".join(t.formula for t in estimate.terms if t.name == "colocated")


_FIXES = {
    "activations": (
        "turn on gradient_checkpointing, lower mb_spec.max_tokens_per_mb, or raise t/p/c"
    ),
    "logits": "lower mb_spec.max_tokens_per_mb or raise t",
    "optimizer": "raise d (the optimizer states shard over data parallelism) or t/p",
    "gradients": "raise t or p",
    "weights": "raise t or p",
    "colocated": "separate the colocated engine, offload it, or raise t/p",
    "reserve": "lower cluster.memory_reserve_gib",
}


#: FSDP's fixes: it has no pipeline, and it shards every state over d·c (memory_sharding)
_FSDP_FIXES = {
    "activations": "turn on gradient_checkpointing, lower mb_spec.max_tokens_per_mb, or raise t/c",
    "optimizer": "raise d or c (FSDP shards the {term} over d·c), or t",
    "gradients": "raise d or c (FSDP shards the {term} over d·c), or t",
    "weights": "raise d or c (FSDP shards the {term} over d·c), or t",
    "colocated": "separate the colocated engine, offload it, or raise t",
}
#: FSDP with the model's MLPs whole over t (execution.fsdp_keeps_mlp_whole): t splits only
#: the attention (the reference's apply_non_moe_tp, areal/engine/fsdp_utils/parallel.py
#: l.279-293 at cbff54d6), so raising it barely helps a state
_FSDP_WHOLE_MLP_FIXES = {
    **_FSDP_FIXES,
    **{
        name: (
            "raise d or c (FSDP shards the {term} over d·c; t splits only the attention: the "
            "reference's FSDP leaves this model's MLPs whole)"
        )
        for name in ("optimizer", "gradients", "weights")
    },
}


def _length(kv: KVCache, longest: int | None) -> int:
    """The length a sequence in flight takes in the KV cache: the run's longest, at most the
    server's context length."""
    return kv.sequence_length if longest is None else max(1, min(kv.sequence_length, longest))


def room_fix(estimate: MemoryEstimate, path: str) -> str:
    """What would make room for a training engine's estimate, by its largest term
    (``path``: the engine's key, ``actor``)."""
    largest = estimate.largest
    fix = _FIXES.get(largest.name, "raise t or p")
    model = TRAINING.get(estimate.backend)
    if model is not None and model.fsdp_engine:  # no pipeline; every state sharded over d·c
        fixes = _FSDP_WHOLE_MLP_FIXES if estimate.whole_mlp else _FSDP_FIXES
        fix = fixes.get(largest.name, fix).format(term=largest.name)
    if largest.name == "load":
        # more GPUs do not help: every rank loads the whole model
        return (
            f"set {path}.fsdp.memory_efficient_load=true (rank 0 then loads on the CPU "
            f"and broadcasts after sharding)"
        )
    if largest.name == "colocated" and estimate.phase == "load":
        # offloading starts only after every training engine has loaded (_loaded_before)
        return "separate the colocated engine or raise t/p (engines load before any offload)"
    return fix


def memory_problems(
    engines: Sequence[EngineLike], fit: Fit, longest: int | None = None
) -> tuple[list[str], list[str]]:
    """(errors, warnings): engines over their GPU memory, KV caches too small.

    ``longest``: the run's longest sequence (prompt + ``gconfig.max_new_tokens``), the length
    at which the sequences in flight must fit the KV cache (None: the context length)."""
    errors: list[str] = []
    warnings: list[str] = []
    gpu = fit.gpu
    if gpu is None:
        return errors, warnings
    for engine, estimate in zip(engines, fit.estimates, strict=True):
        if estimate is None:
            continue
        where = f"{engine.backend_key}={engine.allocation.spec!r}"
        kv = estimate.kv_cache
        if kv is not None:
            tokens = kv.tokens or 0
            length_key = server_model(estimate.backend).context_key
            shared = judge(estimate.total, gpu.capacity, estimate.margin, estimate.over_margin)
            held = judge(kv.sequence_length, max(tokens, 0), int(KV_MEMORY_ERROR.share * tokens))
            if estimate.term("colocated") and shared == NO_FIT:
                errors.append(
                    f"{where}: {estimate.backend} claims {estimate.claimed_fraction:g} of each "
                    f"GPU while {readable_bytes(estimate.term('colocated'))} stay resident "
                    f"beside it: {readable_bytes(estimate.total)} per GPU, over the "
                    f"{readable_bytes(gpu.capacity)} of a {gpu.name} "
                    f"({_colocated_text(estimate)})"
                )
            elif held == NO_FIT:
                errors.append(
                    f"{where}: the KV cache holds {tokens:,} tokens per instance on {gpu.name}, "
                    f"fewer than one {kv.sequence_length:,}-token sequence ({length_key}): "
                    f"weights take {readable_bytes(estimate.term('weights'))} per GPU; raise t, "
                    f"the memory fraction, or lower {length_key}"
                )
            if estimate.term("colocated") and shared == EDGE:
                warnings.append(
                    f"{where}: at the edge: {estimate.backend} claims "
                    f"{estimate.claimed_fraction:g} of each GPU while "
                    f"{readable_bytes(estimate.term('colocated'))} stay resident beside it: "
                    f"{readable_bytes(estimate.total)} per GPU of the "
                    f"{readable_bytes(gpu.capacity)} of a {gpu.name}, within the colocated "
                    f"estimate's measured error ({estimate.edge_error}): it may not fit; "
                    f"to make room: "
                    f"{_colocated_text(estimate)}"
                )
            if held == EDGE and not (estimate.term("colocated") and shared == NO_FIT):
                warnings.append(
                    f"{where}: at the edge: the KV cache holds {tokens:,} tokens per instance "
                    f"on {gpu.name}, within the KV estimate's measured error "
                    f"(±{KV_MEMORY_ERROR.percent}) of one {kv.sequence_length:,}-token sequence "
                    f"({length_key}): the server may refuse to start; to make room: raise t, "
                    f"the memory fraction, or lower {length_key}"
                )
            elif (
                held == FITS  # no KV refusal or edge warning above: queueing is the news
                and not (estimate.term("colocated") and shared == NO_FIT)
                and kv.concurrency is not None
                and tokens // _length(kv, longest) < kv.concurrency
            ):
                length = _length(kv, longest)
                what = "full-length" if length == kv.sequence_length else f"{length:,}-token"
                warnings.append(
                    f"{where}: the KV cache holds {tokens // length:,} {what} sequences per "
                    f"instance, fewer than the {kv.concurrency:,} the run keeps in flight "
                    f"(gconfig.n_samples × min(rollout.max_concurrent_rollouts, (η + 1) × "
                    f"train_dataset.batch_size) over {engine.allocation.n_instances} "
                    f"instances); the server will queue the rest"
                )
            continue
        verdict = judge(estimate.total, gpu.capacity, estimate.margin, estimate.over_margin)
        if verdict == FITS:
            continue
        largest = estimate.largest
        fix = room_fix(estimate, engine.backend_key.rsplit(".", 1)[0])
        if verdict == NO_FIT:
            errors.append(
                f"{where}: needs about {readable_bytes(estimate.total)} per GPU, over the "
                f"{readable_bytes(gpu.capacity)} of a {gpu.name}; largest term {largest.name} "
                f"{readable_bytes(largest.bytes)} ({largest.formula}); {fix}"
            )
        else:
            warnings.append(
                f"{where}: at the edge: needs about {readable_bytes(estimate.total)} per GPU of "
                f"the {readable_bytes(gpu.capacity)} of a {gpu.name}, within the estimate's "
                f"measured error ({estimate.edge_error}): it may not fit; largest term "
                f"{largest.name} {readable_bytes(largest.bytes)}; to make room: {fix}"
            )
    return errors, warnings
