"""A composed experiment config to an allocation plan, or one clear error naming the key.

Works on a DictConfig (from ``hydra.compose`` or ``OmegaConf.load``), a plain
mapping, or the dataclass object the reference's loader returns, read as the
reference reads it (``_config``). Only the fields areal-alloc owns are read and type-checked: each
engine's ``backend`` and ``scheduling_strategy``, ``cluster``, the deprecated
``allocation_mode``, and the few keys that decide whether an engine exists
(``actor.kl_ctl``) or is implicitly colocated (``actor.weight_update_mode``).
Everything else in an engine section is left alone, except what the reference's
start-up rules and the shape checks read (``areal_alloc.experiment``: each rule
names its source in the reference).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from areal_alloc._config import child, is_mapping, keys, setting_float, setting_int, shown, unset
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_NODES, grouped
from areal_alloc.model import ModelAllocation
from areal_alloc.placement import Placement, place
from areal_alloc.settings import ON_MEMORY, Resolved, Settings, Sourced
from areal_alloc.strategy import SchedulingStrategy, SchedulingStrategyType
from areal_alloc.vocab import (
    ENGINE_ORDER,
    ENGINE_ROLES,
    EXAMPLE_BACKEND,
    INHERITS_ACTOR,
    SCHEDULING_KEYS,
    SCHEDULING_TYPES,
    colocation_size_problem,
    did_you_mean,
    role_problem,
    scheduling_problem,
)

if TYPE_CHECKING:
    from areal_alloc.memory import MemoryEstimate
    from areal_alloc.pace import Pace

__all__ = [
    "ENGINE_ORDER",
    "EnginePlan",
    "Placement",
    "Plan",
    "plan_config",
]


@dataclass(frozen=True, slots=True)
class EnginePlan:
    """One configured engine: where its backend came from, and whether it runs."""

    key: str
    backend_key: str
    allocation: ModelAllocation
    active: bool = True
    note: str | None = None
    #: memory per GPU, when the config names the model (see ``areal_alloc.fit``)
    memory: MemoryEstimate | None = None
    #: why there is no estimate: the key read and the model it names was not found
    not_estimated: str | None = None

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
        }


def _memory_dict(memory: MemoryEstimate | None) -> dict[str, Any]:
    if memory is None:
        return {"memory": None}
    out: dict[str, Any] = {"memory": memory.to_dict()}
    if memory.kv_cache is not None:
        out["kv_cache"] = memory.kv_cache.to_dict()
    return out


# --- reading the config ---------------------------------------------------------


def _fail(key: str, value: object, error: AllocationError | str) -> AllocationValidationError:
    """``key='value': message``, keeping the caret of a parse error."""
    if isinstance(error, str):
        return AllocationValidationError(f"{key}={shown(value)}: {error}")
    cls = type(error) if isinstance(error, AllocationValidationError) else AllocationValidationError
    out = cls(f"{key}={shown(value)}: {error.message}")
    if error.column is not None and error.text is not None:
        out.text, out.column = error.text, error.column
    return out


def _scheduling(section: object, path: str) -> SchedulingStrategy:
    node = child(section, "scheduling_strategy")
    if node is None:
        return SchedulingStrategy()
    path = f"{path}.scheduling_strategy"
    if not is_mapping(node):
        raise AllocationValidationError(
            f"{path}={shown(node)}: must be a mapping with type and target, e.g. "
            f"{{type: colocation, target: actor}}"
        )
    for key in keys(node):
        if key not in SCHEDULING_KEYS:
            hint = did_you_mean(key, SCHEDULING_KEYS)
            raise AllocationValidationError(
                f"{path}.{key}: unknown key; {hint}scheduling_strategy takes "
                f"{', '.join(SCHEDULING_KEYS)}"
            )
    kind = child(node, "type")
    target = child(node, "target")
    if kind is None:
        kind = "separation"
    if kind == "separation":
        target = None  # a leftover target has no meaning without colocation
    problem = scheduling_problem(kind, target)
    if problem is not None:
        if kind not in SCHEDULING_TYPES:
            raise AllocationValidationError(f"{path}.type={shown(kind)}: {problem}")
        if target:
            raise AllocationValidationError(f"{path}.target={shown(target)}: {problem}")
        raise AllocationValidationError(
            f"{path}.target is empty: {problem}, e.g. {path}.target=actor"
        )
    return SchedulingStrategy(SchedulingStrategyType(kind), target)


class _Source(NamedTuple):
    """Where an engine's backend lives, and which kind of backend it must be."""

    backend_key: str
    value: object
    section: object  # holds the backend and the scheduling_strategy
    role: str  # "inference", "training" or "any"
    warning: str | None = None


def _teacher_source(section: object) -> _Source:
    """The teacher as the reference reads it (``TeacherConfig`` in areal/api/cli_args.py).

    ``engine_type`` (default ``rollout``) selects ``teacher.rollout`` (an inference
    engine) or ``teacher.train`` (a training engine); the selected one must be
    set. Older configs write a flat ``teacher.backend`` of any kind.
    """
    engine_type = child(section, "engine_type")
    rollout, train = child(section, "rollout"), child(section, "train")
    rollout = None if unset(rollout) else rollout  # a strict schema's empty sections
    train = None if unset(train) else train
    if engine_type is None and rollout is None and train is None:
        return _Source("teacher.backend", child(section, "backend"), section, "any")
    if engine_type is None:
        engine_type = "rollout"  # the reference's default
    if engine_type not in ("rollout", "train"):
        raise AllocationValidationError(
            f"teacher.engine_type={shown(engine_type)}: must be 'rollout' or 'train'"
        )
    role = "inference" if engine_type == "rollout" else "training"
    sub = rollout if engine_type == "rollout" else train
    if sub is None:
        raise AllocationValidationError(
            f"teacher.{engine_type} must be provided when teacher.engine_type={engine_type!r}: "
            f"set it, e.g. ++teacher.{engine_type}.backend={EXAMPLE_BACKEND[role]} "
            f"({'an inference' if role == 'inference' else 'a training'} backend)"
        )
    if not is_mapping(sub):
        raise AllocationValidationError(
            f"teacher.{engine_type}={shown(sub)}: must be a section with a backend field, "
            f"e.g. teacher.{engine_type}.backend={EXAMPLE_BACKEND[role]}"
        )
    warnings = []
    if rollout is not None and train is not None:
        warnings.append(
            f"teacher.rollout and teacher.train are both set; "
            f"teacher.engine_type={engine_type!r} selects teacher.{engine_type}"
        )
    if child(section, "backend") not in (None, ""):
        warnings.append(
            f"teacher.backend is not read when teacher.engine_type or teacher.rollout/train is "
            f"set; the teacher runs teacher.{engine_type}.backend"
        )
    return _Source(
        f"teacher.{engine_type}.backend",
        child(sub, "backend"),
        sub,
        role,
        "; ".join(warnings) or None,
    )


def _source(key: str, section: object) -> _Source:
    if key == "teacher":
        return _teacher_source(section)
    return _Source(f"{key}.backend", child(section, "backend"), section, ENGINE_ROLES[key])


def _allocation(key: str, source: _Source, scheduling: SchedulingStrategy) -> ModelAllocation:
    backend_key, value, role = source.backend_key, source.value, source.role
    if not isinstance(value, str):
        raise AllocationValidationError(
            f"{backend_key}={shown(value)}: must be a string such as {EXAMPLE_BACKEND[role]!r}"
        )
    if "${" in value:
        raise AllocationValidationError(
            f"{backend_key}={shown(value)}: an unresolved interpolation; the config was read "
            f"without OmegaConf (e.g. yaml.safe_load), so ${{…}} stayed text. Load it with "
            f"OmegaConf.load(path), or compose it with Hydra, then validate"
        )
    try:
        allocation = ModelAllocation.from_str(value, name=key, scheduling_strategy=scheduling)
    except AllocationError as error:
        raise _fail(backend_key, value, error) from None
    problem = role_problem(backend_key.rsplit(".", 1)[0], role, allocation.backend)
    if problem is not None:
        raise _fail(backend_key, value, problem)
    return allocation


def _legacy_check(cfg: object) -> None:
    value = child(cfg, "allocation_mode")
    if value is None or value == "":
        return
    # imported here, not at the top: the deprecated string is rare, and this module
    # is loaded at the start of every run that enables the hook
    from areal_alloc.legacy import NOT_READ, migration_overrides

    try:
        migration = migration_overrides(str(value))
    except AllocationError as error:
        raise AllocationValidationError(
            f"allocation_mode={shown(value)} {NOT_READ}; give each engine its own backend "
            f"field (rollout.backend=…, actor.backend=…); it also does not parse: "
            f"{error.message}"
        ) from None
    notes = f" ({'; '.join(migration.notes)})" if migration.notes else ""
    raise AllocationValidationError(
        f"allocation_mode={shown(value)} {NOT_READ}; remove it and give each engine its own "
        f"backend field: {' '.join(migration.overrides)}{notes}"
    )


def _read_engines(cfg: object) -> tuple[list[EnginePlan], list[str]]:
    actor_section = child(cfg, "actor")
    actor_backend = child(actor_section, "backend") if is_mapping(actor_section) else None
    engines: list[EnginePlan] = []
    warnings: list[str] = []
    for key in ENGINE_ORDER:
        section = child(cfg, key)
        if section is None:
            continue
        if not is_mapping(section):
            raise AllocationValidationError(
                f"{key}={shown(section)}: {key} must be a mapping (a section with a backend "
                f"field), not {type(section).__name__}; e.g. {key}.backend="
                f"{EXAMPLE_BACKEND[ENGINE_ROLES[key]]}"
            )
        if unset(section):
            continue
        source = _source(key, section)
        value, note = source.value, None
        if (value is None or value == "") and key in INHERITS_ACTOR and actor_backend:
            value, note = actor_backend, "backend from actor.backend"
            source = source._replace(value=value)
        if value is None or value == "":
            raise AllocationValidationError(
                f"{source.backend_key} is empty: set it, e.g. "
                f"++{source.backend_key}={EXAMPLE_BACKEND[source.role]}"
            )
        path = source.backend_key.rsplit(".", 1)[0]
        allocation = _allocation(key, source, _scheduling(source.section, path))
        engines.append(EnginePlan(key, source.backend_key, allocation, True, note))
        if source.warning:
            warnings.append(source.warning)
    if not engines:
        raise AllocationValidationError(
            "no engine found: the config needs at least one of "
            f"{', '.join(ENGINE_ORDER)} with a backend field, e.g. actor.backend=fsdp:d4"
        )
    return engines, warnings


#: Bound of actor.kl_ctl either side of 0 (the reference's default is 0.1).
MAX_KL_CTL = 1_000_000.0


def _apply_run_rules(cfg: object, engines: list[EnginePlan]) -> list[EnginePlan]:
    """Engines the run will not create, and implicit colocation, as the reference does."""
    actor = child(cfg, "actor")
    # any finite coefficient the reference runs; ≤ 0 creates no reference model
    kl_ctl = setting_float(actor, "kl_ctl", "actor.kl_ctl", minimum=-MAX_KL_CTL, maximum=MAX_KL_CTL)
    mode = child(actor, "weight_update_mode") if actor is not None else None
    version = child(actor, "_version") if actor is not None else None
    keys = {e.key for e in engines}
    out: list[EnginePlan] = []
    for engine in engines:
        if engine.key == "ref" and kl_ctl is not None and kl_ctl <= 0:
            written = child(actor, "kl_ctl")
            engine = replace(
                engine,
                active=False,
                note=f"inactive: actor.kl_ctl={written}, so the run creates no reference model",
            )
        elif (
            engine.key == "rollout"
            and mode == "awex"
            and version in (None, "v1")
            and "actor" in keys
            and not engine.allocation.scheduling_strategy.is_colocated
        ):
            colocated = SchedulingStrategy(SchedulingStrategyType.colocation, "actor")
            engine = replace(
                engine,
                allocation=replace(engine.allocation, scheduling_strategy=colocated),
                note="colocated with actor: actor.weight_update_mode=awex with the v1 "
                "controller shares the actor's GPUs",
            )
        out.append(engine)
    return out


def _check_scheduling(engines: list[EnginePlan]) -> None:
    by_key = {e.key: e for e in engines}
    for engine in engines:
        strategy = engine.allocation.scheduling_strategy
        if not engine.active or not strategy.is_colocated:
            continue
        path = f"{engine.key}.scheduling_strategy.target"
        target = by_key.get(strategy.target or "")
        if target is None:
            raise AllocationValidationError(
                f"{path}={shown(strategy.target)}: no such engine; configured engines: "
                f"{', '.join(e.key for e in engines if e.key != engine.key)}"
            )
        if not target.active:
            raise AllocationValidationError(
                f"{path}={shown(strategy.target)}: {target.key} is inactive ({target.note}), "
                f"so there are no GPUs to share"
            )
        if target.allocation.scheduling_strategy.is_colocated:
            raise AllocationValidationError(
                f"{path}={shown(strategy.target)}: {target.key} is itself colocated onto "
                f"{shown(target.allocation.scheduling_strategy.target)}; colocate onto an engine "
                f"with its own GPUs"
            )
        problem = colocation_size_problem(
            engine.allocation.parallel.world_size,
            target.key,
            target.allocation.parallel.world_size,
        )
        if problem is not None:
            raise AllocationValidationError(
                f"{engine.backend_key}={engine.spec!r} ({target.backend_key}={target.spec!r}): "
                f"{problem}"
            )


def _check_capacity(engines: list[EnginePlan], n_nodes: int, per_node: int) -> None:
    if per_node == 0:
        return
    separated = [e for e in engines if e.gpus]
    total = sum(e.gpus for e in separated)
    capacity = n_nodes * per_node
    if total > capacity:
        parts = " + ".join(f"{e.key} {e.spec} {e.gpus}" for e in separated)
        raise AllocationValidationError(
            f"the engines need {total} GPUs but the cluster has cluster.n_nodes={n_nodes} × "
            f"cluster.n_gpus_per_node={per_node} = {capacity}: {parts} = {total}"
        )


def _check_startup(cfg: object, engines: list[EnginePlan], per_node: int) -> list[str]:
    """The reference's start-up rules and each engine's shape (``areal_alloc.experiment``)."""
    from areal_alloc.experiment.rules import check_startup, startup_warnings
    from areal_alloc.experiment.shapes import check_engine_shapes

    check_startup(cfg, engines, per_node)
    check_engine_shapes(cfg, engines)
    return startup_warnings(cfg, engines)


#: The reference's cluster defaults (ClusterSpecConfig in areal/api/cli_args.py).
DEFAULT_N_NODES = 32
DEFAULT_GPUS_PER_NODE = 8


def _cluster(cfg: object) -> tuple[int, int, list[str]]:
    cluster = child(cfg, "cluster")
    if cluster is not None and not is_mapping(cluster):
        raise AllocationValidationError(
            f"cluster={shown(cluster)}: must be a mapping with n_nodes and n_gpus_per_node"
        )
    n_nodes = setting_int(cluster, "cluster.n_nodes", DEFAULT_N_NODES, 1, MAX_NODES)
    per_node = setting_int(
        cluster, "cluster.n_gpus_per_node", DEFAULT_GPUS_PER_NODE, 0, MAX_GPUS_PER_NODE
    )
    assumed = []
    if n_nodes is None:
        n_nodes = DEFAULT_N_NODES
        assumed.append(f"cluster.n_nodes={n_nodes}")
    if per_node is None:
        per_node = DEFAULT_GPUS_PER_NODE
        assumed.append(f"cluster.n_gpus_per_node={per_node}")
    if n_nodes * per_node > MAX_GPUS:
        raise AllocationValidationError(
            f"cluster.n_nodes={n_nodes} × cluster.n_gpus_per_node={per_node} = "
            f"{grouped(n_nodes * per_node)} GPUs is over the limit of {grouped(MAX_GPUS)}"
        )
    notes = []
    if assumed:
        notes.append(
            f"{' and '.join(assumed)} assumed (not set in the config; the reference's defaults)"
        )
    return n_nodes, per_node, notes


def _with_memory(
    cfg: object, engines: list[EnginePlan], on_memory: str, per_node: int, machine: Resolved
) -> tuple[list[EnginePlan], list[str], list[str], str | None, int | None, Pace | None]:
    """Each engine's memory estimate; refuses (``fail``) or warns of what does not fit.

    With the GPU's speeds known, also the run's pace (``areal_alloc.pace``).
    """
    # loaded only for configs that name a model: a plain layout check stays light
    from areal_alloc.fit import estimate_memory, memory_problems
    from areal_alloc.pace import estimate_pace

    fit = estimate_memory(cfg, engines, machine)
    errors, warnings = memory_problems(engines, fit)
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
    engines = [
        replace(e, memory=m, not_estimated=why)
        for e, m, why in zip(engines, fit.estimates, missing, strict=True)
    ]
    gpu = fit.gpu
    pace = estimate_pace(cfg, engines, fit.estimates, fit.models, per_node, fit.training, machine)
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
    if not is_mapping(cfg):
        raise AllocationValidationError(
            f"expected a config mapping (DictConfig, dict or a dataclass instance), "
            f"got {type(cfg).__name__}"
        )
    _legacy_check(cfg)
    n_nodes, per_node, assumptions = _cluster(cfg)
    read, warnings = _read_engines(cfg)
    engines = _apply_run_rules(cfg, read)
    _check_scheduling(engines)
    _check_capacity(engines, n_nodes, per_node)
    warnings.extend(_check_startup(cfg, engines, per_node))
    gpu: str | None = None
    gpu_memory: int | None = None
    gpu_source: str | None = None
    pace: Pace | None = None
    if on_memory != "off" and _names_a_model(cfg):
        machine = settings.resolve(cfg)
        engines, memory_warnings, memory_notes, gpu, gpu_memory, pace = _with_memory(
            cfg, engines, on_memory, per_node, machine
        )
        gpu_source = machine.gpu.source if machine.gpu is not None else None
        warnings.extend(memory_warnings)
        assumptions.extend(memory_notes)
    placements, placement_warnings = place(engines, n_nodes, per_node)
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
    )


def _names_a_model(cfg: object) -> bool:
    """Cheap test before loading the memory model: does the config say which model runs?"""
    if not unset(child(cfg, "model_shape")):
        return True
    for key in ("actor", "critic", "ref", "teacher", "sglang", "vllm"):
        section = child(cfg, key)
        if is_mapping(section) and any(
            not unset(child(section, k)) for k in ("path", "model_path", "model", "model_shape")
        ):
            return True
    return False
