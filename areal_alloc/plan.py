"""A composed experiment config to an allocation plan, or one clear error naming the key.

Works on a DictConfig (from ``hydra.compose`` or ``OmegaConf.load``), a plain
mapping, or the dataclass object the reference's loader returns. The config is
read once, by :func:`areal_alloc.experiment.read.read_experiment` (the cluster,
each engine's backend, scheduling, model and settings, the run shape); the plan
checks that :class:`~areal_alloc.experiment.records.Experiment`
(:func:`areal_alloc.experiment.checks.check_experiment`: colocation targets, the
cluster's capacity, the reference's start-up rules and each engine's shape),
estimates memory and pace from it, and places the engines on the nodes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from areal_alloc.errors import AllocationValidationError
from areal_alloc.experiment.checks import check_experiment
from areal_alloc.experiment.read import read_experiment
from areal_alloc.experiment.records import Experiment
from areal_alloc.model import ModelAllocation
from areal_alloc.placement import Placement, place
from areal_alloc.settings import DETECTED_HOST, ON_MEMORY, Resolved, Settings, Sourced

if TYPE_CHECKING:
    from areal_alloc.estimate.host import HostEstimate
    from areal_alloc.estimate.memory import MemoryEstimate
    from areal_alloc.estimate.pace import Pace
    from areal_alloc.estimate.pipeline_split import PipelineSplit

__all__ = [
    "EnginePlan",
    "Placement",
    "Plan",
    "plan_config",
    "validate",
]


@dataclass(frozen=True, slots=True)
class EnginePlan:
    """One configured engine: where its backend came from, and whether it runs."""

    key: str
    backend_key: str
    allocation: ModelAllocation
    active: bool = True
    note: str | None = None
    #: memory per GPU, when the config names the model (see ``areal_alloc.estimate.engines``)
    memory: MemoryEstimate | None = None
    #: why there is no estimate: the key read and the model it names was not found
    not_estimated: str | None = None
    #: a training engine's layers per pipeline rank (p > 1, its model known): the split
    #: its memory estimate takes (``estimate.pipeline_split.engine_split``)
    pipeline_split: PipelineSplit | None = None

    @property
    def gpus(self) -> int:
        """GPUs this engine adds to the run (0 when colocated or inactive)."""
        return self.allocation.world_size if self.active else 0

    @property
    def spec(self) -> str:
        return self.allocation.spec


@dataclass(frozen=True, slots=True)
class Plan:
    """Every configured engine, the cluster, and where each engine lands."""

    engines: tuple[EnginePlan, ...]
    n_nodes: int
    n_gpus_per_node: int
    placements: tuple[Placement, ...] = ()
    warnings: tuple[str, ...] = ()
    #: What was assumed because the config did not say (e.g. the cluster size).
    assumptions: tuple[str, ...] = ()
    #: The GPU the memory estimates are checked against, and its bytes.
    gpu: str | None = None
    gpu_memory: int | None = None
    #: Each engine's estimated time per RL step and the balance (GPU speeds known).
    pace: Pace | None = None
    #: Where the GPU came from: ``--gpu``, ``hydra.callbacks.areal_alloc.gpu``,
    #: ``AREAL_ALLOC_GPU``, ``nvidia-smi`` or ``cluster.gpu`` (``areal_alloc.settings``).
    gpu_source: str | None = None
    #: Host memory and CPUs per node: the scheduler's requests and what the run keeps in
    #: host memory, against the host's figures (``areal_alloc.estimate.host``); None when
    #: nothing applies and no host figure is known.
    host: HostEstimate | None = None

    @property
    def gpu_origin(self) -> str | None:
        """``detected by nvidia-smi``, ``from --gpu``; None without a GPU."""
        if self.gpu_source is None:
            return None
        return Sourced(self.gpu, self.gpu_source).origin

    @property
    def cpu_only(self) -> bool:
        return self.n_gpus_per_node == 0

    @property
    def capacity(self) -> int:
        return self.n_nodes * self.n_gpus_per_node

    @property
    def total_gpus(self) -> int:
        """GPUs the run needs: separated, active engines; colocated ones count once."""
        return sum(e.gpus for e in self.engines)

    def __getitem__(self, key: str) -> EnginePlan:
        for engine in self.engines:
            if engine.key == key:
                return engine
        raise KeyError(key)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description of the plan (GPU runs, never one entry per GPU)."""
        per_node = self.n_gpus_per_node or 1
        return {
            "cluster": {
                "n_nodes": self.n_nodes,
                "n_gpus_per_node": self.n_gpus_per_node,
                "capacity": self.capacity,
                "cpu_only": self.cpu_only,
                "gpu": self.gpu,
                "gpu_memory": self.gpu_memory,
                "gpu_source": self.gpu_source,
                "gpu_origin": self.gpu_origin,
            },
            "total_gpus": self.total_gpus,
            "engines": [
                {
                    "key": e.key,
                    "backend_key": e.backend_key,
                    "backend": e.spec,
                    "world_size": e.allocation.parallel.world_size,
                    "gpus": e.gpus,
                    "instances": e.allocation.n_instances if e.allocation.is_inference else None,
                    "instance_size": (
                        e.allocation.instance_size if e.allocation.is_inference else None
                    ),
                    "scheduling": {
                        "type": e.allocation.scheduling_strategy.kind.value,
                        "target": e.allocation.scheduling_strategy.target,
                    },
                    "active": e.active,
                    "note": e.note,
                    "not_estimated": e.not_estimated,
                    **_memory_dict(e.memory),
                    "pipeline_split": e.pipeline_split.to_dict() if e.pipeline_split else None,
                }
                for e in self.engines
            ],
            "placements": [
                {
                    "key": p.key,
                    "shared_with": list(p.shared_with),
                    "gpu_ranges": [
                        {
                            "start": start,
                            "stop": stop,
                            "first_node": start // per_node,
                            "last_node": (stop - 1) // per_node,
                        }
                        for start, stop in p.runs
                    ],
                }
                for p in self.placements
            ],
            "warnings": list(self.warnings),
            "assumptions": list(self.assumptions),
            "pace": self.pace.to_dict() if self.pace is not None else None,
            "host": self.host.to_dict() if self.host is not None else None,
        }


def _memory_dict(memory: MemoryEstimate | None) -> dict[str, Any]:
    if memory is None:
        return {"memory": None}
    out: dict[str, Any] = {"memory": memory.to_dict()}
    if memory.kv_cache is not None:
        out["kv_cache"] = memory.kv_cache.to_dict()
    return out


def _with_memory(
    experiment: Experiment,
    engines: list[EnginePlan],
    on_memory: str,
    per_node: int,
    machine: Resolved,
) -> tuple[list[EnginePlan], list[str], list[str], str | None, int | None, Pace | None]:
    """Each engine's memory estimate; refuses (``fail``) or warns of what does not fit.

    With the GPU's speeds known, also the run's pace (``areal_alloc.estimate.rl_step``).
    """
    # loaded only for configs that name a model: a plain layout check stays light
    from areal_alloc.estimate.engines import estimate_memory, memory_problems
    from areal_alloc.estimate.pace import estimate_pace
    from areal_alloc.estimate.pipeline_split import engine_split

    fit = estimate_memory(experiment, machine)
    run = experiment.run  # the sequences in flight fit the KV cache at the longest's length
    errors, warnings = memory_problems(engines, fit, run.longest)
    chosen = machine.gpu
    # a GPU the config does not name: the refusal says where it came from
    where = "" if chosen is None or chosen.source.startswith("cluster.") else chosen.described
    if errors and on_memory == "fail":
        if len(errors) == 1:
            raise AllocationValidationError(errors[0] + (f" (GPU: {where})" if where else ""))
        # every engine that does not fit, on one line
        listed = " ".join(f"({n}) {error}" for n, error in enumerate(errors, 1))
        raise AllocationValidationError(
            f"{len(errors)} engines do not fit{f' a {where}' if where else ''}: {listed}"
        )
    missing = fit.not_estimated or (None,) * len(engines)
    # an engine whose model is not found is said, not left out silently
    not_estimated = [
        f"{e.key} not estimated: {why}" for e, why in zip(engines, missing, strict=True) if why
    ]
    warnings = [*errors, *warnings, *not_estimated]
    models = fit.models or (None,) * len(engines)
    trainings = fit.training or (None,) * len(engines)
    # each training engine's layers per pipeline rank, as its memory estimate splits them
    splits = [
        engine_split(
            e.allocation.backend,
            arch,
            e.allocation.parallel.pp_size,
            ts.virtual_pipeline,
            e.allocation.parallel.ep_size,
            ts.layer_split,
        )
        if arch is not None and ts is not None
        else None
        for e, arch, ts in zip(engines, models, trainings, strict=True)
    ]
    engines = [
        replace(e, memory=m, not_estimated=why, pipeline_split=split)
        for e, m, why, split in zip(engines, fit.estimates, missing, splits, strict=True)
    ]
    gpu = fit.gpu
    pace = estimate_pace(experiment, fit.estimates, fit.models, fit.training, machine)
    return (
        engines,
        warnings,
        list(fit.assumptions),
        gpu.name if gpu else None,
        gpu.capacity if gpu else None,
        pace,
    )


def plan_config(
    cfg: object, on_memory: str | None = None, settings: Settings | None = None
) -> Plan:
    """Read, check and place every engine of a composed config (``areal_alloc.validate``).

    ``cfg`` is a DictConfig from ``hydra.compose`` or ``OmegaConf.load``, a plain
    mapping, or the dataclass object the reference's ``load_expr_config`` returns.
    Raises an :class:`AllocationError` whose message names the key. When the
    config names the model (and a GPU is known), each engine's memory per GPU is
    estimated; ``on_memory`` says what an engine over its GPU memory does:
    ``fail`` (raise), ``warn`` (a plan warning) or ``off`` (not estimated).

    ``settings`` (``areal_alloc.settings``): the GPU, speeds, efficiencies, reserve
    and ``on_memory`` given outside the experiment (flags, the hook's parameters,
    the environment, nvidia-smi); by default only the config's own ``cluster``
    keys. An explicit ``on_memory`` wins over the settings' one.
    """
    settings = settings if settings is not None else Settings()
    if on_memory is None:
        on_memory = settings.on_memory().value
    if on_memory not in ON_MEMORY:
        raise AllocationValidationError(f"on_memory={on_memory!r}: must be 'fail', 'warn' or 'off'")
    # the one reading of the config (or one already read: suggest --config)
    experiment = (
        cfg
        if isinstance(cfg, Experiment)
        else read_experiment(
            cfg, reference=settings.reference_version(), app_keys=settings.app_keys
        )
    )
    cfg = experiment.config
    n_nodes, per_node = experiment.cluster.n_nodes, experiment.cluster.n_gpus_per_node
    assumptions = list(experiment.cluster.assumptions)
    warnings = list(experiment.warnings)
    engines = [
        EnginePlan(e.key, e.backend_key, e.allocation, e.active, e.note) for e in experiment.engines
    ]
    # colocation targets, capacity, the reference's start-up rules, shapes (experiment.checks)
    warnings.extend(check_experiment(experiment))
    gpu: str | None = None
    gpu_memory: int | None = None
    gpu_source: str | None = None
    pace: Pace | None = None
    if on_memory != "off" and experiment.names_a_model:
        machine = settings.resolve(cfg)
        experiment = experiment.with_machine(machine)
        engines, memory_warnings, memory_notes, gpu, gpu_memory, pace = _with_memory(
            experiment, engines, on_memory, per_node, machine
        )
        gpu_source = machine.gpu.source if machine.gpu is not None else None
        warnings.extend(memory_warnings)
        assumptions.extend(memory_notes)
    placements, placement_warnings = place(engines, n_nodes, per_node)
    host = _host(experiment, engines, placements, settings)
    if host is not None and host.refusals:
        raise AllocationValidationError(
            host.refusals[0]
            if len(host.refusals) == 1
            else " ".join(f"({n}) {line}" for n, line in enumerate(host.refusals, 1))
        )
    if host is not None:
        warnings.extend(host.warnings)
    return Plan(
        tuple(engines),
        n_nodes,
        per_node,
        placements,
        (*warnings, *placement_warnings),
        tuple(assumptions),
        gpu,
        gpu_memory,
        pace,
        gpu_source,
        host,
    )


def _host(
    experiment: Experiment,
    engines: list[EnginePlan],
    placements: tuple[Placement, ...],
    settings: Settings,
) -> HostEstimate | None:
    """The host estimate (``areal_alloc.estimate.host``), loaded only where it can say
    something: a scheduler that is asked for CPUs and memory, something the run keeps in
    host memory, or host figures given (this machine's figures alone, detected, have
    nothing to judge without one of the others)."""
    memory, cpus = settings.host()
    startup = experiment.startup
    given = [f for f in (memory, cpus) if f is not None and f.source not in DETECTED_HOST]
    if (
        not given  # this machine's figures alone judge only what something asks of a host
        and startup.scheduler_type not in ("ray", "slurm")
        and not startup.enable_offload
        and not any(
            e.inference is not None and e.inference.cpu_offload_gb for e in experiment.engines
        )
        and experiment.transport != "disk"
        and not any(
            e.training is not None
            and (e.training.offload_params or e.training.memory_efficient_load)
            for e in experiment.engines
        )
    ):
        return None
    from areal_alloc.estimate.host import estimate_host

    return estimate_host(experiment, engines, placements, memory, cpus)


def validate(cfg: object, on_memory: str | None = None, settings: Settings | None = None) -> Plan:
    """``areal_alloc.validate``: :func:`plan_config` with the settings resolved as the hook
    resolves them.

    Without ``settings``, the GPU, speeds, efficiencies, reserve and ``on_memory`` come
    from the environment (``AREAL_ALLOC_GPU=H800``, ``AREAL_ALLOC_ON_MEMORY`` …), then
    detection (``nvidia-smi``, on a launch node; ``AREAL_ALLOC_DETECT=0`` turns it off),
    then the config's own ``cluster`` keys: a config read by the reference's loader (which
    refuses our ``cluster.gpu``) is still checked for memory. Give ``settings=Settings()``
    to read the config's keys only, or ``Settings.from_sources(flags={"gpu": "H800"})``
    for flags of your own.
    """
    if settings is None:
        settings = Settings.from_sources()
    return plan_config(cfg, on_memory, settings)
