"""A composed experiment config to an allocation plan, or one clear error naming the key.

Works on a DictConfig (from ``hydra.compose`` or ``OmegaConf.load``) or a plain
mapping. Only the fields areal-alloc owns are read and type-checked: each
engine's ``backend`` and ``scheduling_strategy``, ``cluster``, the deprecated
``allocation_mode``, and the few keys that decide whether an engine exists
(``actor.kl_ctl``) or is implicitly colocated (``actor.weight_update_mode``).
Everything else in an engine section is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.model import ModelAllocation, SchedulingStrategy, SchedulingStrategyType

__all__ = [
    "ENGINE_ORDER",
    "EnginePlan",
    "Placement",
    "Plan",
    "plan_config",
    "validate",
]

#: Engines in placement order: inference first, then training (as the launchers do).
ENGINE_ORDER: tuple[str, ...] = ("rollout", "teacher", "actor", "critic", "ref")
_TRAINING_ONLY = ("actor", "critic", "ref")
_INHERITS_ACTOR = ("critic", "ref")


@dataclass(frozen=True, slots=True)
class EnginePlan:
    """One configured engine: where its backend came from, and whether it runs."""

    key: str
    backend_key: str
    allocation: ModelAllocation
    active: bool = True
    note: str | None = None

    @property
    def gpus(self) -> int:
        """GPUs this engine adds to the run (0 when colocated or inactive)."""
        return self.allocation.world_size if self.active else 0

    @property
    def spec(self) -> str:
        return self.allocation.spec


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one separated engine sits: global GPU indices, in rank order."""

    key: str
    gpus: tuple[int, ...]
    shared_with: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Plan:
    """Every configured engine, the cluster, and where each engine lands."""

    engines: tuple[EnginePlan, ...]
    n_nodes: int
    n_gpus_per_node: int
    placements: tuple[Placement, ...] = ()
    warnings: tuple[str, ...] = ()

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
        """A JSON-ready description of the plan."""
        per_node = self.n_gpus_per_node or 1
        return {
            "cluster": {
                "n_nodes": self.n_nodes,
                "n_gpus_per_node": self.n_gpus_per_node,
                "capacity": self.capacity,
                "cpu_only": self.cpu_only,
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
                }
                for e in self.engines
            ],
            "placements": [
                {
                    "key": p.key,
                    "shared_with": list(p.shared_with),
                    "gpus": [
                        {"node": g // per_node, "gpu": g % per_node, "global": g} for g in p.gpus
                    ],
                }
                for p in self.placements
            ],
            "warnings": list(self.warnings),
        }


# --- reading the config ---------------------------------------------------------


def _fail(key: str, value: object, error: AllocationError | str) -> AllocationValidationError:
    """``key='value': message``, keeping the caret of a parse error."""
    if isinstance(error, str):
        return AllocationValidationError(f"{key}={value!r}: {error}")
    cls = type(error) if isinstance(error, AllocationValidationError) else AllocationValidationError
    out = cls(f"{key}={value!r}: {error.message}")
    if error.column is not None and error.text is not None:
        out.text, out.column = error.text, error.column
    return out


def _child(node: object, key: str) -> Any:
    """``node[key]`` or None; an interpolation that cannot be resolved names its key."""
    if isinstance(node, Mapping) or hasattr(node, "get"):
        try:
            return node.get(key)
        except AllocationError:
            raise
        except Exception as error:
            full_key = getattr(node, "_get_full_key", lambda k: k)(key)
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            for prefix in ("AllocationValidationError", "AllocationSyntaxError"):
                reason = reason.replace(f"{prefix} raised while resolving interpolation: ", "")
            raise AllocationValidationError(f"{full_key}: cannot be resolved: {reason}") from None
    return None


def _is_mapping(node: object) -> bool:
    if isinstance(node, Mapping):
        return True
    try:
        from omegaconf import DictConfig
    except ImportError:  # pragma: no cover - omegaconf is a dependency
        return False
    return isinstance(node, DictConfig)


def _int(node: object, path: str, default: int, minimum: int) -> int:
    key = path.rsplit(".", 1)[-1]
    value = _child(node, key) if node is not None else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise AllocationValidationError(f"{path}={value!r}: must be an integer ≥ {minimum}")
    if value < minimum:
        raise AllocationValidationError(f"{path}={value!r}: must be ≥ {minimum}")
    return value


def _scheduling(section: object, key: str) -> SchedulingStrategy:
    node = _child(section, "scheduling_strategy")
    if node is None:
        return SchedulingStrategy()
    path = f"{key}.scheduling_strategy"
    if not _is_mapping(node):
        raise AllocationValidationError(
            f"{path}={node!r}: must be a mapping with type and target, e.g. "
            f"{{type: colocation, target: actor}}"
        )
    kind = _child(node, "type")
    target = _child(node, "target")
    if kind is None:
        kind = "separation"
    if isinstance(kind, SchedulingStrategyType):  # from the strict schema
        kind = kind.value
    if not isinstance(kind, str) or kind not in ("separation", "colocation"):
        raise AllocationValidationError(
            f"{path}.type={kind!r}: must be 'separation' or 'colocation'"
        )
    if target is not None and not isinstance(target, str):
        raise AllocationValidationError(f"{path}.target={target!r}: must be an engine name")
    if kind == "colocation" and not target:
        raise AllocationValidationError(
            f"{path}.target is empty: colocation needs the engine whose GPUs are shared, "
            f"e.g. {path}.target=actor"
        )
    if kind == "separation":
        target = None  # a leftover target has no meaning without colocation
    return SchedulingStrategy(SchedulingStrategyType(kind), target)


def _backend_source(key: str, section: object) -> tuple[str, object]:
    """Where an engine's backend field lives (the teacher has three spellings)."""
    if key != "teacher":
        return f"{key}.backend", _child(section, "backend")
    engine_type = _child(section, "engine_type")
    if engine_type is None or _child(section, "backend") is not None:
        return "teacher.backend", _child(section, "backend")
    if engine_type not in ("rollout", "train"):
        raise AllocationValidationError(
            f"teacher.engine_type={engine_type!r}: must be 'rollout' or 'train'"
        )
    sub = _child(section, engine_type)
    return f"teacher.{engine_type}.backend", _child(sub, "backend") if sub is not None else None


def _allocation(
    key: str, backend_key: str, value: object, scheduling: SchedulingStrategy, role: str
) -> ModelAllocation:
    if not isinstance(value, str):
        raise AllocationValidationError(
            f"{backend_key}={value!r}: must be a string such as 'fsdp:d4t2'"
        )
    try:
        allocation = ModelAllocation.from_str(value, name=key, scheduling_strategy=scheduling)
    except AllocationError as error:
        raise _fail(backend_key, value, error) from None
    if role == "training" and allocation.is_inference:
        raise _fail(
            backend_key,
            value,
            f"{key} is a training engine; use fsdp, megatron or archon "
            f"(sglang and vllm serve the rollout)",
        )
    if role == "inference" and allocation.is_training:
        raise _fail(
            backend_key,
            value,
            f"{key} is an inference engine; use sglang or vllm (fsdp, megatron and archon train)",
        )
    return allocation


def _legacy_check(cfg: object) -> None:
    value = _child(cfg, "allocation_mode")
    if value is None or value == "":
        return
    from areal_alloc.legacy import migration_overrides

    try:
        migration = migration_overrides(str(value))
    except AllocationError as error:
        raise AllocationValidationError(
            f"allocation_mode={value!r} is deprecated and no longer read; give each engine its "
            f"own backend field (rollout.backend=…, actor.backend=…); it also does not "
            f"parse: {error.message}"
        ) from None
    notes = f" ({'; '.join(migration.notes)})" if migration.notes else ""
    raise AllocationValidationError(
        f"allocation_mode={value!r} is deprecated and no longer read; remove it and give "
        f"each engine its own backend field: {' '.join(migration.overrides)}{notes}"
    )


def _read_engines(cfg: object) -> list[EnginePlan]:
    actor_section = _child(cfg, "actor")
    actor_backend = _child(actor_section, "backend") if actor_section is not None else None
    engines: list[EnginePlan] = []
    for key in ENGINE_ORDER:
        section = _child(cfg, key)
        if section is None:
            continue
        if not _is_mapping(section):
            raise AllocationValidationError(
                f"{key}={section!r}: must be a section with a backend field, "
                f"e.g. {key}.backend=fsdp:d4"
            )
        backend_key, value = _backend_source(key, section)
        note = None
        if (value is None or value == "") and key in _INHERITS_ACTOR and actor_backend:
            value, note = actor_backend, "backend from actor.backend"
        if value is None or value == "":
            raise AllocationValidationError(
                f"{backend_key} is empty: set it, e.g. {backend_key}="
                f"{'sglang:d2t4' if key == 'rollout' else 'fsdp:d4'}"
            )
        role = "inference" if key == "rollout" else "training" if key in _TRAINING_ONLY else "any"
        allocation = _allocation(key, backend_key, value, _scheduling(section, key), role)
        engines.append(EnginePlan(key, backend_key, allocation, True, note))
    if not engines:
        raise AllocationValidationError(
            "no engine found: the config needs at least one of "
            f"{', '.join(ENGINE_ORDER)} with a backend field, e.g. actor.backend=fsdp:d4"
        )
    return engines


def _apply_run_rules(cfg: object, engines: list[EnginePlan]) -> list[EnginePlan]:
    """Engines the run will not create, and implicit colocation, as the reference does."""
    actor = _child(cfg, "actor")
    kl_ctl = _child(actor, "kl_ctl") if actor is not None else None
    mode = _child(actor, "weight_update_mode") if actor is not None else None
    version = _child(actor, "_version") if actor is not None else None
    keys = {e.key for e in engines}
    out: list[EnginePlan] = []
    for engine in engines:
        if engine.key == "ref" and isinstance(kl_ctl, (int, float)) and kl_ctl <= 0:
            engine = replace(
                engine,
                active=False,
                note=f"inactive: actor.kl_ctl={kl_ctl}, so the run creates no reference model",
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
                f"{path}={strategy.target!r}: no such engine; configured engines: "
                f"{', '.join(e.key for e in engines if e.key != engine.key)}"
            )
        if not target.active:
            raise AllocationValidationError(
                f"{path}={strategy.target!r}: {target.key} is inactive ({target.note}), "
                f"so there are no GPUs to share"
            )
        if target.allocation.scheduling_strategy.is_colocated:
            raise AllocationValidationError(
                f"{path}={strategy.target!r}: {target.key} is itself colocated onto "
                f"{target.allocation.scheduling_strategy.target!r}; colocate onto an engine "
                f"with its own GPUs"
            )
        mine, theirs = engine.allocation.parallel.world_size, target.allocation.parallel.world_size
        if mine != theirs:
            raise AllocationValidationError(
                f"{engine.backend_key}={engine.spec!r}: colocated with {target.key} "
                f"({target.backend_key}={target.spec!r}) it must span the same GPUs, but "
                f"its world size is {mine} and {target.key}'s is {theirs}"
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
    for engine in engines:
        a = engine.allocation
        if not engine.active or not a.is_inference:
            continue
        size = a.instance_size
        if per_node % size and size % per_node:
            p = a.parallel
            raise AllocationValidationError(
                f"{engine.backend_key}={engine.spec!r}: one {a.backend} instance spans "
                f"t{p.tp_size}·p{p.pp_size} = {size} GPUs, which neither divides nor is a "
                f"multiple of cluster.n_gpus_per_node={per_node}, so instances would "
                f"straddle nodes"
            )


def _shape_from(node: object, source: str) -> Any:
    from areal_alloc.shape import ModelShape

    if not _is_mapping(node):
        raise AllocationValidationError(
            f"{source}={node!r}: must be a mapping (num_layers, num_attention_heads, …) "
            f"or {{path: /local/model/dir}}"
        )
    path = _child(node, "path")
    if isinstance(path, str) and path:
        return ModelShape.from_hf_config(path)
    return ModelShape.from_mapping(node, source=source)


def _model_shape(cfg: object, key: str) -> Any:
    """The model shape an engine runs: its own, its local model path, or the experiment's."""
    from pathlib import Path

    from areal_alloc.shape import ModelShape

    section = _child(cfg, key)
    own = _child(section, "model_shape")
    if own is not None:
        return _shape_from(own, f"{key}.model_shape")
    path = _child(section, "path")
    if isinstance(path, str) and path and (Path(path).expanduser() / "config.json").is_file():
        return ModelShape.from_hf_config(Path(path).expanduser())
    if key == "teacher":
        return None  # a teacher is another model: only its own shape applies
    top = _child(cfg, "model_shape")
    return _shape_from(top, "model_shape") if top is not None else None


def _check_shapes(cfg: object, engines: list[EnginePlan]) -> None:
    from areal_alloc.shape import check_shape

    for engine in engines:
        if not engine.active:
            continue
        shape = _model_shape(cfg, engine.key)
        if shape is not None:
            check_shape(engine.allocation, shape, engine.backend_key)


def plan_config(cfg: object) -> Plan:
    """Read, check and place every engine of a composed config."""
    if not _is_mapping(cfg):
        raise AllocationValidationError(
            f"expected a config mapping (DictConfig or dict), got {type(cfg).__name__}"
        )
    _legacy_check(cfg)
    cluster = _child(cfg, "cluster")
    if cluster is not None and not _is_mapping(cluster):
        raise AllocationValidationError(
            f"cluster={cluster!r}: must be a mapping with n_nodes and n_gpus_per_node"
        )
    n_nodes = _int(cluster, "cluster.n_nodes", 1, 1)
    per_node = _int(cluster, "cluster.n_gpus_per_node", 8, 0)
    engines = _apply_run_rules(cfg, _read_engines(cfg))
    _check_scheduling(engines)
    _check_capacity(engines, n_nodes, per_node)
    _check_shapes(cfg, engines)
    from areal_alloc.placement import place

    placements, warnings = place(engines, n_nodes, per_node)
    return Plan(tuple(engines), n_nodes, per_node, placements, warnings)


def validate(cfg: object) -> Plan:
    """Check a composed config and return its plan, or raise an AllocationError naming the key.

    ``cfg`` is a DictConfig from ``hydra.compose`` or ``OmegaConf.load``, or a
    plain mapping.
    """
    return plan_config(cfg)
