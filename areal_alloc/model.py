"""Immutable models of an allocation: parallel layout, scheduling, allocation.

Everything here is a frozen dataclass whose invariants are checked once, when it
is built; derived sizes are properties, and a changed copy comes from
:func:`dataclasses.replace`, which checks again. This module does not import
lark: parsing lives in :mod:`areal_alloc.parse`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from areal_alloc.errors import AllocationValidationError
from areal_alloc.format import format_allocation, format_spec
from areal_alloc.kinds import SchedulingStrategyType
from areal_alloc.limits import MAX_GPUS, grouped

__all__ = [
    "BACKEND_DIMS",
    "DIM_NAMES",
    "INFERENCE_BACKENDS",
    "TRAINING_BACKENDS",
    "ModelAllocation",
    "ParallelStrategy",
    "SchedulingStrategy",
    "SchedulingStrategyType",
    "dimension_not_supported",
]

#: Dimension letter -> what it splits.
DIM_NAMES: dict[str, str] = {
    "d": "data",
    "t": "tensor",
    "p": "pipeline",
    "c": "context",
    "e": "expert",
}

INFERENCE_BACKENDS: tuple[str, ...] = ("sglang", "vllm")
TRAINING_BACKENDS: tuple[str, ...] = ("fsdp", "megatron", "archon")
HYBRID_BACKENDS: tuple[str, ...] = ("megatron", "archon")

#: Backend -> the dimension letters it takes (size 1 is accepted for any letter).
BACKEND_DIMS: dict[str, str] = {
    "sglang": "dtp",
    "vllm": "dtp",
    "fsdp": "dtc",
    "megatron": "dtpce",
    "archon": "dtpce",
}

IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _quoted(number: int) -> str:
    """A size for a message: grouped digits, or its digit count when absurdly long."""
    text = str(number)
    return grouped(number) if len(text) <= 24 else f"a {len(text)}-digit number"


def dimension_not_supported(backend: str, letter: str, size: int) -> str:
    """The message for a dimension ``letter`` of ``size`` > 1 that ``backend`` refuses."""
    what = f"{DIM_NAMES[letter]} parallelism ({letter}{size})"
    if backend == "fsdp":
        return (
            f"FSDP backend only supports data/tensor/context parallelism (d, t, c), "
            f"got {what}; use megatron or archon for {letter}"
        )
    if backend in INFERENCE_BACKENDS:
        return f"{backend} does not support {what}; inference backends take d, t, p"
    return f"{backend} does not support {what}"  # pragma: no cover - all take every dim


def missing_hybrid_backend(layout: str) -> str:
    """The message for a hybrid ``(attn:…|ffn:…)`` layout written without its backend."""
    return (
        f"Backend must be explicitly specified in {layout!r}: hybrid attn/ffn layouts run on "
        f"{' or '.join(HYBRID_BACKENDS)}; write e.g. {'megatron:' + layout!r}"
    )


def unknown_backend(backend: str) -> str:
    """The message for a backend name that is not one of ours, with the nearest one."""
    if backend.lower() in BACKEND_DIMS:
        return f"backend names are lower case: write {backend.lower()!r}, not {backend!r}"
    import difflib

    close = difflib.get_close_matches(backend.lower(), list(BACKEND_DIMS), n=1, cutoff=0.5)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown backend {backend!r}; {hint}backends are {describe_backends()}"


def describe_backends() -> str:
    return f"{', '.join(TRAINING_BACKENDS)} (training); {', '.join(INFERENCE_BACKENDS)} (inference)"


@dataclass(frozen=True, slots=True)
class SchedulingStrategy:
    """``separation`` (own GPUs, the default) or ``colocation`` onto ``target``."""

    # A plain "separation" / "colocation" is accepted and stored as the enum member.
    type: SchedulingStrategyType | str = SchedulingStrategyType.separation
    target: str | None = None

    def __post_init__(self) -> None:
        kind: object = self.type
        if not isinstance(kind, SchedulingStrategyType):
            try:
                kind = SchedulingStrategyType(kind)
            except ValueError:
                raise AllocationValidationError(
                    f"scheduling type {kind!r} is not allowed; use 'separation' or 'colocation'"
                ) from None
            object.__setattr__(self, "type", kind)
        if self.target is not None and not isinstance(self.target, str):
            raise AllocationValidationError(
                f"scheduling target must be an engine name, got {self.target!r}"
            )
        if kind is SchedulingStrategyType.colocation and not self.target:
            raise AllocationValidationError(
                "colocation needs a target: the engine whose GPUs are shared, "
                "e.g. SchedulingStrategy('colocation', target='actor')"
            )
        if kind is SchedulingStrategyType.separation and self.target:
            raise AllocationValidationError(
                f"separation takes no target, got target={self.target!r}; "
                f"use type='colocation' to share {self.target!r}'s GPUs"
            )

    @property
    def kind(self) -> SchedulingStrategyType:
        """``type`` as the enum member (what it always holds once built)."""
        return SchedulingStrategyType(self.type)

    @property
    def is_colocated(self) -> bool:
        return self.type is SchedulingStrategyType.colocation


_SIZE_FIELDS: tuple[tuple[str, str], ...] = (
    ("data_parallel_size", "d"),
    ("tensor_parallel_size", "t"),
    ("pipeline_parallel_size", "p"),
    ("context_parallel_size", "c"),
    ("expert_parallel_size", "e"),
    ("expert_tensor_parallel_size", "etp"),
)


@dataclass(frozen=True, slots=True)
class ParallelStrategy:
    """A 5-D parallel layout: data, tensor, pipeline, context and expert.

    ``world_size = dp × tp × pp × cp``; expert parallelism adds no GPUs, it
    spreads the experts over the same mesh, so with ``ep > 1`` the expert
    model-parallel size ``pp × etp × ep`` must divide the world size.
    """

    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    context_parallel_size: int = 1
    expert_parallel_size: int = 1
    expert_tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        for attr, short in _SIZE_FIELDS:
            value: object = getattr(self, attr)
            if isinstance(value, bool) or not isinstance(value, int):
                raise AllocationValidationError(
                    f"{attr} ({short}) must be an integer ≥ 1, got {value!r}"
                )
            if value < 1:
                raise AllocationValidationError(f"{attr} ({short}) must be ≥ 1, got {value}")
            if value > MAX_GPUS:
                raise AllocationValidationError(
                    f"{attr} ({short}) is {_quoted(value)}; the limit is {grouped(MAX_GPUS)} GPUs"
                )
        if self.world_size > MAX_GPUS:
            raise AllocationValidationError(
                f"world size d{self.data_parallel_size}·t{self.tensor_parallel_size}"
                f"·p{self.pipeline_parallel_size}·c{self.context_parallel_size} = "
                f"{_quoted(self.world_size)} GPUs is over the limit of {grouped(MAX_GPUS)}"
            )
        if self.expert_parallel_size > 1 or self.expert_tensor_parallel_size > 1:
            emp = self.expert_model_parallel_size
            if self.world_size % emp:
                raise AllocationValidationError(
                    f"expert model-parallel size p{self.pipeline_parallel_size}"
                    f"·etp{self.expert_tensor_parallel_size}"
                    f"·e{self.expert_parallel_size} = {emp} does not divide world size "
                    f"d{self.data_parallel_size}·t{self.tensor_parallel_size}"
                    f"·p{self.pipeline_parallel_size}·c{self.context_parallel_size}"
                    f" = {self.world_size}"
                )

    @property
    def tp_size(self) -> int:
        return self.tensor_parallel_size

    @property
    def pp_size(self) -> int:
        return self.pipeline_parallel_size

    @property
    def dp_size(self) -> int:
        return self.data_parallel_size

    @property
    def cp_size(self) -> int:
        return self.context_parallel_size

    @property
    def ep_size(self) -> int:
        return self.expert_parallel_size

    @property
    def etp_size(self) -> int:
        return self.expert_tensor_parallel_size

    @property
    def world_size(self) -> int:
        """GPUs the layout spans: dp × tp × pp × cp."""
        return (
            self.data_parallel_size
            * self.tensor_parallel_size
            * self.pipeline_parallel_size
            * self.context_parallel_size
        )

    @property
    def expert_model_parallel_size(self) -> int:
        """pp × etp × ep: the GPUs one copy of every expert is spread over."""
        return (
            self.pipeline_parallel_size
            * self.expert_tensor_parallel_size
            * self.expert_parallel_size
        )

    @property
    def expert_data_parallel_size(self) -> int:
        """world / (pp × etp × ep) with experts; dp when ep = etp = 1 (as the reference)."""
        if self.expert_parallel_size == 1 and self.expert_tensor_parallel_size == 1:
            return self.data_parallel_size
        return self.world_size // self.expert_model_parallel_size

    @property
    def edp_size(self) -> int:
        return self.expert_data_parallel_size

    @property
    def expert_mesh_dp_size(self) -> int:
        """world / (pp × etp × ep): the expert mesh's data dimension, always."""
        return self.world_size // self.expert_model_parallel_size

    @property
    def is_hybrid(self) -> bool:
        """True when experts use their own tensor-parallel size (attn/ffn form)."""
        return self.expert_tensor_parallel_size != 1


@dataclass(frozen=True, slots=True)
class ModelAllocation:
    """One engine's allocation: backend, optional name, layout and scheduling.

    ``str(allocation)`` is the canonical string (``fsdp[actor]:d4t2``); it parses
    back to an equal allocation given the same scheduling strategy.
    """

    backend: str
    name: str | None
    parallel: ParallelStrategy
    scheduling_strategy: SchedulingStrategy = field(default_factory=SchedulingStrategy)

    def __post_init__(self) -> None:
        if self.backend not in BACKEND_DIMS:
            raise AllocationValidationError(unknown_backend(str(self.backend)))
        if self.name is not None and (
            not isinstance(self.name, str) or not IDENTIFIER.match(self.name)
        ):
            raise AllocationValidationError(
                f"allocation name {self.name!r} is not an identifier "
                f"(letters, digits, '_'; not starting with a digit)"
            )
        if not isinstance(self.parallel, ParallelStrategy):
            raise AllocationValidationError(
                f"parallel must be a ParallelStrategy, got {self.parallel!r}"
            )
        if not isinstance(self.scheduling_strategy, SchedulingStrategy):
            raise AllocationValidationError(
                f"scheduling_strategy must be a SchedulingStrategy, "
                f"got {self.scheduling_strategy!r}"
            )
        allowed = BACKEND_DIMS[self.backend]
        sizes = self.parallel
        for letter, size in (
            ("t", sizes.tensor_parallel_size),
            ("p", sizes.pipeline_parallel_size),
            ("c", sizes.context_parallel_size),
            ("e", sizes.expert_parallel_size),
        ):
            if size > 1 and letter not in allowed:
                raise AllocationValidationError(dimension_not_supported(self.backend, letter, size))
        if sizes.expert_tensor_parallel_size > 1 and self.backend not in HYBRID_BACKENDS:
            raise AllocationValidationError(
                f"{self.backend} does not support expert tensor parallelism "
                f"(etp{sizes.expert_tensor_parallel_size}); only "
                f"{', '.join(HYBRID_BACKENDS)} take hybrid attn/ffn layouts"
            )

    @classmethod
    def from_str(
        cls,
        spec: str,
        name: str | None = None,
        scheduling_strategy: SchedulingStrategy | None = None,
    ) -> ModelAllocation:
        """Parse one ``BACKEND[NAME]:DIMS`` string; repeated specs come from a memo.

        ``name`` and ``scheduling_strategy`` override what the string says; the
        scheduling defaults to separation.
        """
        parse = _FROM_STR[0]
        if parse is None:  # bound on first use: validation needs this module
            from areal_alloc.validation import allocation_from_str

            parse = _FROM_STR[0] = allocation_from_str
        return parse(spec, name, scheduling_strategy)

    @property
    def spec(self) -> str:
        """The canonical string without the name, as an engine's ``backend`` field holds it."""
        return format_spec(self.backend, self.parallel)

    @property
    def world_size(self) -> int:
        """GPUs this allocation adds: its layout's world size, 0 when colocated."""
        if self.scheduling_strategy.is_colocated:
            return 0
        return self.parallel.world_size

    @property
    def is_inference(self) -> bool:
        return self.backend in INFERENCE_BACKENDS

    @property
    def is_training(self) -> bool:
        return self.backend in TRAINING_BACKENDS

    @property
    def instance_size(self) -> int:
        """GPUs of one inference server instance (t × p); the world size for training."""
        if self.is_inference:
            return self.parallel.tensor_parallel_size * self.parallel.pipeline_parallel_size
        return self.parallel.world_size

    @property
    def n_instances(self) -> int:
        """Independent inference server instances (d); 1 for a training engine."""
        return self.parallel.data_parallel_size if self.is_inference else 1

    def __str__(self) -> str:
        return format_allocation(self)


#: areal_alloc.validation.allocation_from_str, once bound by from_str.
_FROM_STR: list[Callable[[object, object, object], ModelAllocation] | None] = [None]
