"""The engines' sections (actor, critic, ref, rollout, teacher): where each engine's
backend is written, its backend string and scheduling strategy read into a
:class:`~areal_alloc.model.ModelAllocation`, and which engines the run creates
(areal/api/cli_args.py at cbff54d6)."""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

from areal_alloc import defaults
from areal_alloc._config import (
    child,
    is_mapping,
    keys,
    setting_float,
    shown,
    strict_schema,
    unset,
)
from areal_alloc.errors import AllocationError, AllocationValidationError
from areal_alloc.experiment.records import Engine
from areal_alloc.experiment.sections.values import at
from areal_alloc.model import ModelAllocation
from areal_alloc.strategy import SchedulingStrategy, SchedulingStrategyType
from areal_alloc.vocab import (
    ENGINE_ORDER,
    ENGINE_ROLES,
    EXAMPLE_BACKEND,
    INHERITS_ACTOR,
    SCHEDULING_KEYS,
    SCHEDULING_TYPES,
    did_you_mean,
    role_problem,
    scheduling_problem,
)

__all__ = [
    "MAX_KL_CTL",
    "apply_run_rules",
    "engine_version",
    "has_engines",
    "legacy_check",
    "not_inference_keys",
    "read_engines",
]

#: Bound of actor.kl_ctl either side of 0 (the reference's default is 0.1).
MAX_KL_CTL = 1_000_000.0


def has_engines(cfg: object) -> bool:
    """Whether the config has any engine section (``check --skip-without-engines``)."""
    return any(child(cfg, key) is not None for key in ENGINE_ORDER)


def _fail(key: str, value: object, error: AllocationError | str) -> AllocationValidationError:
    """``key='value': message``, keeping the caret of a parse error."""
    if isinstance(error, str):
        return AllocationValidationError(f"{key}={shown(value)}: {error}")
    cls = type(error) if isinstance(error, AllocationValidationError) else AllocationValidationError
    out = cls(f"{key}={shown(value)}: {error.message}")
    if error.column is not None and error.text is not None:
        out.text, out.column = error.text, error.column
    return out


def _scheduling(node_section: object, path: str) -> SchedulingStrategy:
    node = child(node_section, "scheduling_strategy")
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


def _teacher_source(node: object) -> _Source:
    """The teacher as the reference reads it (``TeacherConfig`` in areal/api/cli_args.py).

    ``engine_type`` (default ``rollout``) selects ``teacher.rollout`` (an inference
    engine) or ``teacher.train`` (a training engine); the selected one must be
    set. Older configs write a flat ``teacher.backend`` of any kind.
    """
    engine_type = child(node, "engine_type")
    rollout, train = child(node, "rollout"), child(node, "train")
    rollout = None if unset(rollout) else rollout  # a strict schema's empty sections
    train = None if unset(train) else train
    if engine_type is None and rollout is None and train is None:
        return _Source("teacher.backend", child(node, "backend"), node, "any")
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
    both = rollout is not None and train is not None
    warnings = _teacher_warnings(node, engine_type, both)
    return _Source(f"teacher.{engine_type}.backend", child(sub, "backend"), sub, role, warnings)


def _teacher_warnings(node: object, engine_type: str, both: bool) -> str | None:
    """What a teacher section sets that its ``engine_type`` does not read."""
    warnings = []
    if both:
        warnings.append(
            f"teacher.rollout and teacher.train are both set; "
            f"teacher.engine_type={engine_type!r} selects teacher.{engine_type}"
        )
    if child(node, "backend") not in (None, ""):
        warnings.append(
            f"teacher.backend is not read when teacher.engine_type or teacher.rollout/train is "
            f"set; the teacher runs teacher.{engine_type}.backend"
        )
    return "; ".join(warnings) or None


def _source(key: str, node: object) -> _Source:
    if key == "teacher":
        return _teacher_source(node)
    return _Source(f"{key}.backend", child(node, "backend"), node, ENGINE_ROLES[key])


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


def legacy_check(cfg: object) -> None:
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


#: keys areal-alloc reads under an inference engine that the reference's
#: InferenceEngineConfig lacks (areal/api/cli_args.py l.2478-2690 at cbff54d6): its loader
#: refuses them ("Key … not in 'InferenceEngineConfig'"), and where the servers' own keys
#: say the same
_NOT_INFERENCE_KEYS = {
    "path": "name the model in sglang.model_path or vllm.model (or teacher.path)",
    "offload": "the reference offloads a colocated rollout itself (a teacher: teacher.offload)",
}


def not_inference_keys(cfg: object) -> list[str]:
    """A warning for each key of :data:`_NOT_INFERENCE_KEYS` written under ``rollout`` or
    ``teacher.rollout`` (read for plain Hydra apps, whose configs take any key)."""
    out = []
    for dotted in ("rollout", "teacher.rollout"):
        node = at(cfg, dotted)
        if not is_mapping(node) or strict_schema(node):
            continue
        for key, instead in _NOT_INFERENCE_KEYS.items():
            if key in keys(node):  # a struct dataclass refuses the key, whatever its value
                out.append(
                    f"{dotted}.{key}: the reference's InferenceEngineConfig has no '{key}', so "
                    f"its loader refuses this config; {instead}"
                )
    return out


def read_engines(cfg: object) -> tuple[list[Engine], list[str]]:
    actor_section = child(cfg, "actor")
    actor_backend = child(actor_section, "backend") if is_mapping(actor_section) else None
    engines: list[Engine] = []
    warnings: list[str] = []
    for key in ENGINE_ORDER:
        node = child(cfg, key)
        if node is None:
            continue
        if not is_mapping(node):
            raise AllocationValidationError(
                f"{key}={shown(node)}: {key} must be a mapping (a section with a backend "
                f"field), not {type(node).__name__}; e.g. {key}.backend="
                f"{EXAMPLE_BACKEND[ENGINE_ROLES[key]]}"
            )
        if unset(node):
            continue
        source = _source(key, node)
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
        engines.append(Engine(key, source.backend_key, allocation, True, note))
        if source.warning:
            warnings.append(source.warning)
    if not engines:
        raise AllocationValidationError(
            "no engine found: the config needs at least one of "
            f"{', '.join(ENGINE_ORDER)} with a backend field, e.g. actor.backend=fsdp:d4"
        )
    return engines, warnings


def apply_run_rules(cfg: object, engines: list[Engine]) -> list[Engine]:
    """Engines the run will not create, and implicit colocation, as the reference does."""
    actor = child(cfg, "actor")
    # any finite coefficient the reference runs; ≤ 0 creates no reference model
    kl_ctl = setting_float(actor, "kl_ctl", "actor.kl_ctl", minimum=-MAX_KL_CTL, maximum=MAX_KL_CTL)
    mode = child(actor, "weight_update_mode") if actor is not None else None
    version = child(actor, "_version") if actor is not None else None
    present = {e.key for e in engines}
    out: list[Engine] = []
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
            and "actor" in present
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


def engine_version(cfg: object, engine: Engine) -> str:
    """``<engine>._version`` as the reference's str field holds it (default v1)."""
    node = at(cfg, engine.path)
    value = child(node, "_version") if is_mapping(node) else None
    return defaults.ENGINE_VERSION if value is None else str(value)
