"""Every valid layout for a backend and a GPU count, optionally constrained.

Layouts are enumerated from the divisors of the GPU count, so even 1,024 GPUs
take milliseconds. Results are canonical strings in a stable order: most data
parallelism first, then the least context and pipeline parallelism (tensor
parallelism is the cheapest way to split a model within a node), then experts.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, fields

from areal_alloc.errors import AllocationValidationError
from areal_alloc.format import format_spec
from areal_alloc.limits import MAX_GPUS, MAX_LAYOUTS, grouped
from areal_alloc.model import ModelAllocation
from areal_alloc.model_shape import ModelShape, layout_problems
from areal_alloc.strategy import ParallelStrategy
from areal_alloc.vocab import BACKEND_DIMS, HYBRID_BACKENDS, INFERENCE_BACKENDS

__all__ = [
    "MAX_CANDIDATES",
    "LayoutConstraints",
    "TooManyLayouts",
    "enumerate_layouts",
    "iter_layouts",
]

#: Candidate layouts one search examines at most (about a second of work).
MAX_CANDIDATES = 200_000


@dataclass(frozen=True, slots=True)
class LayoutConstraints:
    """Limits on the layouts to list. ``None`` means no limit.

    ``gpus_per_node`` keeps tensor parallelism (and, for inference, a whole
    instance) within one node. ``num_layers``/``num_attention_heads``/
    ``num_key_value_heads``/``num_experts`` apply the model-shape rules.
    ``experts`` adds expert parallelism (e > 1; on when ``num_experts`` or
    ``max_ep`` is given), ``hybrid`` adds attn/ffn layouts with expert tensor
    parallelism.
    """

    max_tp: int | None = None
    max_pp: int | None = None
    max_cp: int | None = None
    max_ep: int | None = None
    max_dp: int | None = None
    min_dp: int = 1
    gpus_per_node: int | None = None
    num_layers: int | None = None
    num_attention_heads: int | None = None
    num_key_value_heads: int | None = None
    num_experts: int | None = None
    hybrid: bool = False
    experts: bool = False

    def shape(self) -> ModelShape | None:
        """The model-shape rules as a :class:`ModelShape`, or None when none are given."""
        if (
            self.num_layers is None
            and self.num_attention_heads is None
            and self.num_key_value_heads is None
            and self.num_experts is None
        ):
            return None
        return ModelShape(
            num_layers=self.num_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads,
            num_experts=self.num_experts,
            source="layout constraints",
        )


@functools.cache
def _divisors(n: int) -> tuple[int, ...]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def _within(value: int, limit: int | None) -> bool:
    return limit is None or value <= limit


class TooManyLayouts(AllocationValidationError):
    """A search that would list or examine more layouts than the limit."""


def iter_layouts(
    backend: str, gpus: int, constraints: LayoutConstraints | None = None
) -> Iterator[str]:
    """Every valid ``backend`` layout spanning exactly ``gpus`` GPUs, in the listed order.

    The loops run in the order of the listing (most data parallelism first, then
    the least context, pipeline and tensor parallelism, then experts), so the
    first layouts come without the rest being built. Raises :class:`TooManyLayouts`
    after examining :data:`MAX_CANDIDATES` candidates, so that any GPU count
    answers quickly.
    """
    if backend not in BACKEND_DIMS:
        ModelAllocation(backend, None, ParallelStrategy())  # raises the unknown-backend error
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise AllocationValidationError(f"GPU count must be an integer ≥ 1, got {gpus!r}")
    if gpus > MAX_GPUS:
        raise AllocationValidationError(
            f"GPU count {gpus if len(str(gpus)) <= 24 else 'of ' + str(len(str(gpus))) + ' digits'}"
            f" is over the limit of {grouped(MAX_GPUS)}"
        )
    c = constraints or LayoutConstraints()
    shape = c.shape()
    allowed = BACKEND_DIMS[backend]
    inference = backend in INFERENCE_BACKENDS
    node = c.gpus_per_node
    with_experts = "e" in allowed and bool(c.experts or c.hybrid or c.num_experts or c.max_ep)
    examined = 0
    for dp in reversed(_divisors(gpus)):
        if not (_within(dp, c.max_dp) and dp >= c.min_dp):
            continue
        rest_d = gpus // dp
        for cp in _divisors(rest_d) if "c" in allowed else (1,):
            if not _within(cp, c.max_cp):
                continue
            rest_c = rest_d // cp
            for pp in _divisors(rest_c) if "p" in allowed else (1,):
                tp = rest_c // pp
                if not (_within(pp, c.max_pp) and _within(tp, c.max_tp)):
                    continue
                if tp > 1 and "t" not in allowed:
                    continue
                if node and tp > node and not inference:
                    continue
                if inference and node and (tp * pp) % node and node % (tp * pp):
                    continue
                for ep in _divisors(gpus // pp) if with_experts else (1,):
                    if not _within(ep, c.max_ep):
                        continue
                    if c.num_experts is not None and c.num_experts % ep:
                        continue
                    etps: tuple[int, ...] = (1,)
                    if c.hybrid and backend in HYBRID_BACKENDS and ep > 1:
                        etps = tuple(
                            e
                            for e in _divisors(gpus // (pp * ep))
                            if (not node or e <= node) and _within(e, c.max_tp)
                        )
                    for etp in etps:
                        examined += 1
                        if examined > MAX_CANDIDATES:
                            raise TooManyLayouts(
                                f"stopped after examining {grouped(MAX_CANDIDATES)} candidate "
                                f"{backend} layouts of {grouped(gpus)} GPUs; narrow the search "
                                f"with limits such as --max-tp, --max-pp, --max-cp, --max-ep "
                                f"or a model shape"
                            )
                        parallel = ParallelStrategy(tp, pp, dp, cp, ep, etp)
                        if shape is not None and layout_problems(backend, parallel, shape):
                            continue
                        yield format_spec(backend, parallel)


def enumerate_layouts(
    backend: str,
    gpus: int,
    constraints: LayoutConstraints | None = None,
    limit: int = MAX_LAYOUTS,
) -> list[str]:
    """Every valid ``backend`` layout spanning exactly ``gpus`` GPUs, as canonical strings.

    More than ``limit`` layouts raise :class:`TooManyLayouts`, which asks for
    tighter constraints instead of printing an unreadable list.
    """
    found = list(itertools.islice(iter_layouts(backend, gpus, constraints), limit + 1))
    if len(found) > limit:
        raise TooManyLayouts(
            f"more than {grouped(limit)} {backend} layouts of {grouped(gpus)} GPUs; narrow the "
            f"search with limits such as max_tp, max_pp, max_cp, max_ep or a model shape"
        )
    return found


_BOOL_FIELDS = {f.name for f in fields(LayoutConstraints) if f.type == "bool"}
_INT_FIELDS = {f.name for f in fields(LayoutConstraints)} - _BOOL_FIELDS


def parse_constraints(options: object) -> LayoutConstraints:
    """``["max_tp=4", "hybrid=true"]`` → :class:`LayoutConstraints`, with clear errors."""
    values: dict[str, int | bool] = {}
    for option in options:  # type: ignore[attr-defined]
        key, sep, raw = str(option).partition("=")
        key, raw = key.strip().replace("-", "_"), raw.strip()
        if not sep or key not in _INT_FIELDS | _BOOL_FIELDS:
            raise AllocationValidationError(
                f"unknown layout constraint {option!r}; use key=value with key one of "
                f"{', '.join(sorted(_INT_FIELDS | _BOOL_FIELDS))}"
            )
        if key in _BOOL_FIELDS:
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise AllocationValidationError(f"{key}={raw!r}: must be true or false")
            values[key] = raw.lower() in ("true", "1", "yes")
        else:
            if not raw.isdigit() or int(raw) < 1 or len(raw) > 9:
                raise AllocationValidationError(f"{key}={raw!r}: must be an integer ≥ 1")
            values[key] = int(raw)
    return LayoutConstraints(**values)  # type: ignore[arg-type]
