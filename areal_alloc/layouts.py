"""Every valid layout for a backend and a GPU count, optionally constrained.

Layouts are enumerated from the divisors of the GPU count, so even 1,024 GPUs
take milliseconds. Results are canonical strings in a stable order: most data
parallelism first, then the least context and pipeline parallelism (tensor
parallelism is the cheapest way to split a model within a node), then experts.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields

from areal_alloc.errors import AllocationValidationError
from areal_alloc.format import format_spec
from areal_alloc.model import BACKEND_DIMS, HYBRID_BACKENDS, ModelAllocation, ParallelStrategy
from areal_alloc.shape import ModelShape, layout_problems

__all__ = ["LayoutConstraints", "enumerate_layouts"]


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


def enumerate_layouts(
    backend: str, gpus: int, constraints: LayoutConstraints | None = None
) -> list[str]:
    """Every valid ``backend`` layout spanning exactly ``gpus`` GPUs, as canonical strings."""
    if backend not in BACKEND_DIMS:
        ModelAllocation(backend, None, ParallelStrategy())  # raises the unknown-backend error
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise AllocationValidationError(f"GPU count must be an integer ≥ 1, got {gpus!r}")
    c = constraints or LayoutConstraints()
    shape = c.shape()
    allowed = BACKEND_DIMS[backend]
    inference = backend in ("sglang", "vllm")
    node = c.gpus_per_node
    found: list[tuple[tuple[int, ...], str]] = []
    for tp in _divisors(gpus) if "t" in allowed else (1,):
        if not _within(tp, c.max_tp) or (node and tp > node and not inference):
            continue
        rest_t = gpus // tp
        for pp in _divisors(rest_t) if "p" in allowed else (1,):
            if not _within(pp, c.max_pp):
                continue
            if inference and node and (tp * pp) % node and node % (tp * pp):
                continue
            rest_p = rest_t // pp
            for cp in _divisors(rest_p) if "c" in allowed else (1,):
                dp = rest_p // cp
                if not (_within(cp, c.max_cp) and _within(dp, c.max_dp) and dp >= c.min_dp):
                    continue
                with_experts = c.experts or c.hybrid or c.num_experts or c.max_ep
                eps = _divisors(gpus // pp) if "e" in allowed and with_experts else (1,)
                for ep in eps:
                    if not _within(ep, c.max_ep):
                        continue
                    etps: tuple[int, ...] = (1,)
                    if c.hybrid and backend in HYBRID_BACKENDS and ep > 1:
                        etps = tuple(
                            e
                            for e in _divisors(gpus // (pp * ep))
                            if (not node or e <= node) and _within(e, c.max_tp)
                        )
                    for etp in etps:
                        parallel = ParallelStrategy(tp, pp, dp, cp, ep, etp)
                        if shape is not None and layout_problems(backend, parallel, shape):
                            continue
                        text = format_spec(backend, parallel)
                        found.append(((-dp, cp, pp, tp, ep, etp), text))
    found.sort()
    return [text for _, text in found]


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
            if not raw.isdigit() or int(raw) < 1:
                raise AllocationValidationError(f"{key}={raw!r}: must be an integer ≥ 1")
            values[key] = int(raw)
    return LayoutConstraints(**values)  # type: ignore[arg-type]
