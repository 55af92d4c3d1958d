"""``ModelAllocation``: one engine's allocation, and ``from_str``, its memoised parser.

A frozen dataclass whose invariants are checked once, when it is built; a
changed copy comes from :func:`dataclasses.replace`, which checks again.
``from_str`` parses (``_parse``), judges (``_build``) and builds, and serves
repeated strings from a memo: sharing the results is safe because every model is
immutable. This module does not import lark; the parser loads it on first use.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from areal_alloc._build import build_parts
from areal_alloc._parse import parse_single
from areal_alloc._syntax import RawComponent
from areal_alloc.errors import AllocationValidationError
from areal_alloc.format import format_allocation, format_spec
from areal_alloc.strategy import ParallelStrategy, SchedulingStrategy, SchedulingStrategyType
from areal_alloc.vocab import (
    BACKEND_DIMS,
    DIM_NAMES,
    HYBRID_BACKENDS,
    INFERENCE_BACKENDS,
    TRAINING_BACKENDS,
    dimension_not_supported,
    name_problem,
    unknown_backend,
)

__all__ = [
    "BACKEND_DIMS",
    "DIM_NAMES",
    "HYBRID_BACKENDS",
    "INFERENCE_BACKENDS",
    "TRAINING_BACKENDS",
    "ModelAllocation",
    "ParallelStrategy",
    "SchedulingStrategy",
    "SchedulingStrategyType",
]

_SEPARATION = SchedulingStrategy()


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
        if self.name is not None:
            problem = name_problem(self.name)
            if problem is not None:
                raise AllocationValidationError(f"allocation {problem}")
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
        if type(spec) is str and name is None and scheduling_strategy is None:
            return _cached(spec, None, None)
        if not isinstance(spec, str):
            parse_single(spec)  # raises the AllocationError for a non-string
        if name is not None and not isinstance(name, str):
            raise AllocationValidationError(f"name must be a string or None, got {name!r}")
        if scheduling_strategy is not None and not isinstance(
            scheduling_strategy, SchedulingStrategy
        ):
            raise AllocationValidationError(
                f"scheduling_strategy must be a SchedulingStrategy or None, "
                f"got {scheduling_strategy!r}"
            )
        return _cached(spec, name, scheduling_strategy)

    @classmethod
    def from_raw(
        cls,
        raw: RawComponent,
        text: str,
        name: str | None = None,
        scheduling_strategy: SchedulingStrategy | None = None,
    ) -> ModelAllocation:
        """Judge one parsed component (see ``_build``) and build it."""
        backend, final_name, parallel = build_parts(raw, text, name)
        return cls(backend, final_name, parallel, scheduling_strategy or _SEPARATION)

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
        return format_allocation(self.backend, self.name, self.parallel)


@functools.lru_cache(maxsize=4096)
def _cached(
    spec: str, name: str | None, scheduling_strategy: SchedulingStrategy | None
) -> ModelAllocation:
    return ModelAllocation.from_raw(parse_single(spec), spec, name, scheduling_strategy)
