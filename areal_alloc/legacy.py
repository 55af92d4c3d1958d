"""The deprecated multi-component ``allocation_mode`` string: read it, and migrate it.

``sglang[rollout]:d2+fsdp[actor]:d4|fsdp[critic]:d4``: ``+`` puts components on
separate GPUs, ``|`` colocates them on the same GPUs and binds tighter. New
configs give each engine its own ``backend`` field; this module reads old
strings so they can be checked and translated (:func:`migration_overrides`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from areal_alloc._build import read_dims, suggest_backend
from areal_alloc._parse import Groups, parse_legacy
from areal_alloc._syntax import RawComponent
from areal_alloc.errors import AllocationValidationError
from areal_alloc.model import ModelAllocation
from areal_alloc.strategy import ParallelStrategy, SchedulingStrategy, SchedulingStrategyType
from areal_alloc.vocab import ENGINE_ROLES, colocation_size_problem, missing_hybrid_backend

__all__ = [
    "ENGINE_KEYS",
    "NOT_READ",
    "EngineAssignment",
    "LegacyAllocationMode",
    "Migration",
    "migration_overrides",
    "parse_allocation_mode",
]

#: Who still reads ``allocation_mode``: the reference's single-controller trainer parses each
#: engine's ``backend`` (areal/trainer/rl_trainer.py); only its SPMD launchers still parse the
#: string (areal/infra/launcher/local.py local_main, ray.py, slurm.py, with a FutureWarning;
#: areal/api/cli_args.py: "Only used by SPMD launchers"), AReaL cbff54d6.
NOT_READ = (
    "is deprecated: the single-controller scheduler ignores it and only the legacy SPMD "
    "launchers (areal.infra.launcher.local, ray, slurm) still read it"
)

#: The engines of an experiment config.
ENGINE_KEYS: tuple[str, ...] = tuple(ENGINE_ROLES)
#: Unnamed training components fill these engines in turn; an unnamed inference one, rollout.
_TRAINING_KEYS = tuple(key for key, role in ENGINE_ROLES.items() if role == "training")
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_:.]+\Z")


def _only(
    allocations: tuple[ModelAllocation, ...], inference: bool, what: str
) -> ModelAllocation | None:
    found = [a for a in allocations if a.is_inference == inference]
    if len(found) > 1:
        names = ", ".join(str(a) for a in found)
        raise AttributeError(
            f"Ambiguous: {len(found)} {what} allocations ({names}); "
            f"look them up by name, e.g. mode[{found[0].name or 'name'!r}]"
        )
    return found[0] if found else None


@dataclass(frozen=True, slots=True)
class LegacyAllocationMode:
    """A parsed legacy ``allocation_mode``: its allocations, in order."""

    allocations: tuple[ModelAllocation, ...]

    @classmethod
    def from_str(cls, text: str) -> LegacyAllocationMode:
        return parse_allocation_mode(text)

    def __getitem__(self, name: str) -> ModelAllocation:
        for allocation in self.allocations:
            if allocation.name == name:
                return allocation
        names = [a.name for a in self.allocations if a.name]
        raise KeyError(
            f"no allocation named {name!r}; named allocations: "
            f"{', '.join(map(repr, names)) or 'none'}"
        )

    def __contains__(self, name: object) -> bool:
        return any(a.name == name for a in self.allocations)

    @property
    def world_size(self) -> int:
        """GPUs the whole mode needs: colocated components add none."""
        return sum(a.world_size for a in self.allocations)

    @property
    def gen(self) -> ParallelStrategy | None:
        found = _only(self.allocations, True, "inference")
        return found.parallel if found else None

    @property
    def train(self) -> ParallelStrategy | None:
        found = _only(self.allocations, False, "training")
        return found.parallel if found else None

    @property
    def gen_backend(self) -> str | None:
        found = _only(self.allocations, True, "inference")
        return found.backend if found else None

    @property
    def train_backend(self) -> str | None:
        found = _only(self.allocations, False, "training")
        return found.backend if found else None

    @property
    def gen_instance_size(self) -> int | None:
        """GPUs of one inference server instance: t × p."""
        found = _only(self.allocations, True, "inference")
        return found.instance_size if found else None

    def __str__(self) -> str:
        text = ""
        for allocation in self.allocations:
            if text:
                text += "|" if allocation.scheduling_strategy.is_colocated else "+"
            text += str(allocation)
        return text


def _check_bare_hybrid(groups: Groups, text: str) -> None:
    """``attn:…|ffn:…`` without parentheses and backend is a hybrid layout, not two engines."""
    for group in groups:
        labels = [c.backend for c in group]
        if len(group) == 2 and set(labels) == {"attn", "ffn"} and group[0].name is None:
            parts = "|".join(f"{c.backend}:{raw_spec(c)}" for c in group)
            raise AllocationValidationError(
                missing_hybrid_backend(f"({parts})"), text, group[0].column
            )


def _check_names(groups: Groups, text: str) -> None:
    _check_bare_hybrid(groups, text)
    components = [c for group in groups for c in group]
    for group in groups:
        if len(group) > 1 and any(c.name is None for c in group):
            unnamed = next(c for c in group if c.name is None)
            raise AllocationValidationError(
                f"colocated components need names in {text.strip()!r}: write e.g. "
                f"'fsdp[actor]:d4|fsdp[critic]:d4'",
                text,
                unnamed.column,
            )
    if len(components) >= 3:
        for component in components:
            if component.name is None:
                raise AllocationValidationError(
                    f"with {len(components)} components every component needs a name "
                    f"in {text.strip()!r}, e.g. 'sglang[rollout]:d2+fsdp[actor]:d4'",
                    text,
                    component.column,
                )
    seen: set[str] = set()
    for component in components:
        if component.name is not None:
            if component.name in seen:
                raise AllocationValidationError(
                    f"name {component.name!r} is used twice in {text.strip()!r}; "
                    f"names must be unique",
                    text,
                    component.column,
                )
            seen.add(component.name)


def _build_groups(groups: Groups, text: str) -> tuple[ModelAllocation, ...]:
    allocations: list[ModelAllocation] = []
    for group in groups:
        anchor = ModelAllocation.from_raw(group[0], text)
        allocations.append(anchor)
        for raw in group[1:]:
            strategy = SchedulingStrategy(SchedulingStrategyType.colocation, anchor.name)
            member = ModelAllocation.from_raw(raw, text, scheduling_strategy=strategy)
            problem = colocation_size_problem(
                member.parallel.world_size, str(anchor), anchor.parallel.world_size
            )
            if problem is not None:
                raise AllocationValidationError(f"{member}: {problem}", text, raw.column)
            allocations.append(member)
    return tuple(allocations)


def parse_allocation_mode(text: str) -> LegacyAllocationMode:
    """Parse and check a legacy ``allocation_mode`` string."""
    groups = parse_legacy(text)
    _check_names(groups, text)
    return LegacyAllocationMode(_build_groups(groups, text))


# --- migration ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EngineAssignment:
    """Where one legacy component goes: ``key.backend = spec``, maybe colocated."""

    key: str
    allocation: ModelAllocation
    colocate_with: str | None = None
    suggested_backend: bool = False

    @property
    def spec(self) -> str:
        return self.allocation.spec


def _override(key: str, value: str) -> str:
    """``++key=value``: adds the key or replaces it, whether or not the engine exists yet."""
    if _SAFE_VALUE.match(value):
        return f"++{key}={value}"
    return f"\"++{key}='{value}'\""


@dataclass(frozen=True, slots=True)
class Migration:
    """The per-engine replacement of a legacy ``allocation_mode`` string."""

    source: str
    assignments: tuple[EngineAssignment, ...]
    notes: tuple[str, ...] = ()

    @property
    def overrides(self) -> tuple[str, ...]:
        """Command-line overrides, ready to paste into a shell."""
        out: list[str] = []
        for a in self.assignments:
            out.append(_override(f"{a.key}.backend", a.spec))
            if a.colocate_with:
                out.append(_override(f"{a.key}.scheduling_strategy.type", "colocation"))
                out.append(_override(f"{a.key}.scheduling_strategy.target", a.colocate_with))
        return tuple(out)

    def yaml(self) -> str:
        """The same as YAML for an experiment file."""
        lines: list[str] = []
        for a in self.assignments:
            lines.append(f"{a.key}:")
            lines.append(f"  backend: {a.spec if _SAFE_VALUE.match(a.spec) else repr(a.spec)}")
            if a.colocate_with:
                lines.append("  scheduling_strategy:")
                lines.append("    type: colocation")
                lines.append(f"    target: {a.colocate_with}")
        return "\n".join(lines) + "\n"


def _assign_key(raw: RawComponent, inference: bool, used: set[str], text: str) -> str:
    if raw.name is not None:
        return raw.name
    pool = ("rollout",) if inference else _TRAINING_KEYS
    for key in pool:
        if key not in used:
            return key
    raise AllocationValidationError(
        f"cannot tell which engine the component at column {raw.column} of "
        f"{text.strip()!r} belongs to; name it, e.g. 'fsdp[critic]:d4'",
        text,
        raw.column,
    )


def raw_spec(raw: RawComponent) -> str:
    return "".join(d.letter + d.digits for d in raw.dims)


def migration_overrides(text: str) -> Migration:
    """Translate a legacy string into per-engine ``backend`` fields.

    Bare training dimensions (``sglang:d1+d1``) get the backend the old automatic
    choice took (fsdp unless p or e > 1, else megatron), marked as a suggestion.
    """
    groups = parse_legacy(text)
    _check_names(groups, text)
    notes: list[str] = []
    filled: list[list[RawComponent]] = []
    suggested: list[list[bool]] = []  # per component: was its backend suggested?
    for group in groups:
        members: list[RawComponent] = []
        marks: list[bool] = []
        for raw in group:
            bare = raw.backend is None and raw.hybrid is None and raw.name is None
            if bare:
                sizes = read_dims(raw.dims, text, "dtpce", "megatron")
                backend = suggest_backend(sizes)
                notes.append(
                    f"bare dimensions {raw_spec(raw)!r} get {backend!r}, the backend the old "
                    f"automatic choice took (fsdp unless p or e > 1, else megatron); "
                    f"this is a suggestion, check it"
                )
                raw = raw._replace(backend=backend)
            members.append(raw)
            marks.append(bare)
        filled.append(members)
        suggested.append(marks)
    allocations = iter(_build_groups(tuple(tuple(g) for g in filled), text))
    used: set[str] = set()
    assignments: list[EngineAssignment] = []
    for members, marks in zip(filled, suggested, strict=True):
        anchor_key = ""
        for position, (raw, bare) in enumerate(zip(members, marks, strict=True)):
            allocation = next(allocations)
            key = _assign_key(raw, allocation.is_inference, used, text)
            used.add(key)
            if key not in ENGINE_KEYS:
                notes.append(
                    f"{key!r} is not one of the engines {', '.join(ENGINE_KEYS)}; "
                    f"give its backend to the engine that runs it"
                )
            if position == 0:
                anchor_key = key
            assignments.append(
                EngineAssignment(key, allocation, anchor_key if position else None, bare)
            )
    return Migration(text.strip(), tuple(assignments), tuple(notes))
