"""The layout types: a 5-D parallel strategy and a scheduling strategy.

Frozen dataclasses whose invariants are checked once, when built; derived sizes
are properties, and a changed copy comes from :func:`dataclasses.replace`, which
checks again. They know nothing of strings: parsing is ``_parse``, judging a
parsed string is ``_build``, writing one is ``format``.
"""

from __future__ import annotations

from dataclasses import dataclass

from areal_alloc.errors import AllocationValidationError
from areal_alloc.kinds import SchedulingStrategyType
from areal_alloc.limits import MAX_GPUS, grouped, readable
from areal_alloc.vocab import scheduling_problem

__all__ = ["ParallelStrategy", "SchedulingStrategy", "SchedulingStrategyType"]


@dataclass(frozen=True, slots=True)
class SchedulingStrategy:
    """``separation`` (own GPUs, the default) or ``colocation`` onto ``target``."""

    # A plain "separation" / "colocation" is accepted and stored as the enum member.
    type: SchedulingStrategyType | str = SchedulingStrategyType.separation
    target: str | None = None

    def __post_init__(self) -> None:
        kind: object = self.type
        value = kind.value if isinstance(kind, SchedulingStrategyType) else kind
        problem = scheduling_problem(value, self.target)
        if problem is not None:
            if value == "colocation" and not self.target:
                problem += ", e.g. SchedulingStrategy('colocation', target='actor')"
            raise AllocationValidationError(problem)
        if not isinstance(kind, SchedulingStrategyType):
            object.__setattr__(self, "type", SchedulingStrategyType(value))

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
        sizes = (
            self.tensor_parallel_size,
            self.pipeline_parallel_size,
            self.data_parallel_size,
            self.context_parallel_size,
            self.expert_parallel_size,
            self.expert_tensor_parallel_size,
        )
        if not (all(type(v) is int for v in sizes) and min(sizes) >= 1 and max(sizes) <= MAX_GPUS):
            self._reject_sizes()  # the slow path names the offending field
        if self.world_size > MAX_GPUS:
            raise AllocationValidationError(
                f"world size d{self.data_parallel_size}·t{self.tensor_parallel_size}"
                f"·p{self.pipeline_parallel_size}·c{self.context_parallel_size} = "
                f"{readable(self.world_size)} GPUs is over the limit of {grouped(MAX_GPUS)}"
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

    def _reject_sizes(self) -> None:
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
                    f"{attr} ({short}) is {readable(value)}; the limit is {grouped(MAX_GPUS)} GPUs"
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
        """The reference's expert data-parallel size: world / (pp × etp × ep) with experts,
        and dp when ep = etp = 1 (its ``ParallelStrategy`` reports dp for a dense layout).

        Not the same as :attr:`expert_mesh_dp_size` for a dense layout with tp, cp or pp
        > 1: that one is the data dimension of the expert mesh megatron-core builds
        (it always builds one), which rank groups and the order checks use.
        """
        if self.expert_parallel_size == 1 and self.expert_tensor_parallel_size == 1:
            return self.data_parallel_size
        return self.world_size // self.expert_model_parallel_size

    @property
    def edp_size(self) -> int:
        return self.expert_data_parallel_size

    @property
    def expert_mesh_dp_size(self) -> int:
        """world / (pp × etp × ep): the data dimension of megatron-core's expert mesh, always.

        Differs from :attr:`expert_data_parallel_size` only when ep = etp = 1.
        """
        return self.world_size // self.expert_model_parallel_size

    @property
    def is_hybrid(self) -> bool:
        """True when experts use their own tensor-parallel size (attn/ffn form)."""
        return self.expert_tensor_parallel_size != 1
