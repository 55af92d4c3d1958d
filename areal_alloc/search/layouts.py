"""Every valid layout for a backend and a GPU count, optionally constrained.

Layouts are enumerated from the divisors of the GPU count, so even 1,024 GPUs
take milliseconds. Results are canonical strings in a stable order: most data
parallelism first, then the least context and pipeline parallelism (tensor
parallelism is the cheapest way to split a model within a node), then experts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields, replace

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError, shown
from areal_alloc.format import format_spec
from areal_alloc.limits import MAX_COUNT, MAX_GPUS, MAX_LAYOUTS, grouped
from areal_alloc.model import ModelAllocation
from areal_alloc.model_shape import ModelShape, archon_mesh_problem, engine_shape, layout_problems
from areal_alloc.numbers import divisors, read_int
from areal_alloc.strategy import ParallelStrategy
from areal_alloc.vocab import BACKEND_DIMS, HYBRID_BACKENDS, INFERENCE_BACKENDS

__all__ = [
    "MAX_CANDIDATES",
    "Family",
    "LayoutConstraints",
    "TooManyLayouts",
    "context_parallel_fits",
    "enumerate_layouts",
    "iter_families",
    "iter_layouts",
    "iter_strategies",
    "parse_constraints",
    "shaped",
]

#: Candidate layouts one search examines at most (about a second of work).
MAX_CANDIDATES = 200_000


@dataclass(frozen=True, slots=True)
class LayoutConstraints:
    """Limits on the layouts to list. ``None`` means no limit.

    ``gpus_per_node`` keeps tensor parallelism within one node (an inference
    instance, t × p, either fits in a node or spans whole nodes).
    ``num_layers``/``num_attention_heads``/``num_key_value_heads``/``num_experts``
    apply the model-shape rules.
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
    #: a proposal's bound on context parallelism (suggest): c > 1 only where it cuts this
    #: sequence into 2·c whole chunks (:func:`context_parallel_fits`) and leaves each rank
    #: at least ``cp_share`` tokens of it, (inside a node, across nodes) (the KV ring
    #: hidden under the attention: ``speed.ring_share``); None: no bound
    sequence: int | None = None
    cp_share: tuple[float, float] | None = None

    def cp_bound(self, cp: int, tp: int) -> bool:
        """c keeps a useful share of :attr:`sequence` (``tp``: its group's span, t·c
        consecutive ranks inside a node or not)."""
        if cp == 1 or self.sequence is None:
            return True
        if not context_parallel_fits(cp, self.sequence):
            return False
        if self.cp_share is None:
            return True
        node = self.gpus_per_node
        inside = node is None or tp * cp <= node
        return self.sequence / cp >= self.cp_share[0 if inside else 1]

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


def context_parallel_fits(cp: int, sequence: int) -> bool:
    """Megatron's context parallelism of ``cp`` ranks cuts a sequence into 2·cp equal
    chunks, rank r holding chunks r and 2·cp − 1 − r (causal load balance): its length must
    be a multiple of 2·cp (NVIDIA/Megatron-LM, megatron/core/utils.py,
    _get_batch_on_this_cp_rank_per_sequence_balancing: "The sequence length must be
    divisible by 2 * cp_size", d98e8a64). The reference meets it by padding each sequence to
    a multiple of 2·t·c (areal-project/AReaL, areal/engine/megatron_engine.py,
    ``align_to_multiple_of = tp_size * cp_size * 2``, and
    megatron_utils/packed_context_parallel.py l.57, cbff54d6), so no c is refused; a
    ``sequence`` that fits needs no padding."""
    return cp == 1 or sequence % (2 * cp) == 0


def _within(value: int, limit: int | None) -> bool:
    return limit is None or value <= limit


class TooManyLayouts(AllocationValidationError):
    """A search that would list or examine more layouts than the limit."""


def iter_layouts(
    backend: str, gpus: int, constraints: LayoutConstraints | None = None
) -> Iterator[str]:
    """Every valid ``backend`` layout spanning exactly ``gpus`` GPUs, in the listed order.

    As canonical strings; :func:`iter_strategies` gives the same as layouts.
    """
    return (format_spec(backend, p) for p in iter_strategies(backend, gpus, constraints))


def iter_strategies(
    backend: str, gpus: int, constraints: LayoutConstraints | None = None
) -> Iterator[ParallelStrategy]:
    """Every valid ``backend`` layout spanning exactly ``gpus`` GPUs, in the listed order.

    The loops run in the order of the listing (most data parallelism first, then
    the least context, pipeline and tensor parallelism, then experts), so the
    first layouts come without the rest being built. Raises :class:`TooManyLayouts`
    after examining :data:`MAX_CANDIDATES` candidates, so that any GPU count
    answers quickly.
    """
    for family in iter_families(backend, gpus, constraints):
        yield from family.strategies()


@dataclass(frozen=True, slots=True)
class Family:
    """The valid layouts that share d, c, p and t, as their (e, etp) pairs in listing order."""

    tp: int
    pp: int
    dp: int
    cp: int
    members: tuple[tuple[int, int], ...]

    def strategy(self, member: tuple[int, int]) -> ParallelStrategy:
        return ParallelStrategy(self.tp, self.pp, self.dp, self.cp, *member)

    def strategies(self) -> Iterator[ParallelStrategy]:
        return (self.strategy(member) for member in self.members)


def iter_families(
    backend: str, gpus: int, constraints: LayoutConstraints | None
) -> Iterator[Family]:
    """:func:`iter_strategies` a family at a time, its members not yet built."""
    if backend not in BACKEND_DIMS:
        ModelAllocation(backend, None, ParallelStrategy())  # raises the unknown-backend error
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise AllocationValidationError(f"GPU count must be an integer ≥ 1, got {shown(gpus)}")
    if gpus > MAX_GPUS:
        raise AllocationValidationError(
            f"GPU count {gpus if len(str(gpus)) <= 24 else 'of ' + str(len(str(gpus))) + ' digits'}"
            f" is over the limit of {grouped(MAX_GPUS)}"
        )
    c = constraints or LayoutConstraints()
    shape = c.shape()
    if shape is not None:
        shape = engine_shape(backend, shape)
    allowed = BACKEND_DIMS[backend]
    inference = backend in INFERENCE_BACKENDS
    node = c.gpus_per_node
    with_experts = "e" in allowed and bool(c.experts or c.hybrid or c.num_experts or c.max_ep)
    # Past the rules of t, p and c (checked once per family), the shape rules left are
    # those of e and etp alone (model_shape.layout_problems): answered once per pair.
    pair_fits: dict[tuple[int, int], bool] = {}
    examined = 0
    for dp in reversed(divisors(gpus)):
        if not (_within(dp, c.max_dp) and dp >= c.min_dp):
            continue
        rest_d = gpus // dp
        for cp in divisors(rest_d) if "c" in allowed else (1,):
            if not _within(cp, c.max_cp):
                continue
            rest_c = rest_d // cp
            for pp in divisors(rest_c) if "p" in allowed else (1,):
                tp = rest_c // pp
                if not (_within(pp, c.max_pp) and _within(tp, c.max_tp)):
                    continue
                if tp > 1 and "t" not in allowed:
                    continue
                if node and tp > node:  # tensor parallelism stays inside a node
                    continue
                if not c.cp_bound(cp, tp):  # a proposal's useful share of the sequence
                    continue
                if inference and node and (tp * pp) % node and node % (tp * pp):
                    continue
                # the shape rules of t, p and c hold for every e and etp alike: checked once
                family_fits = shape is None or not layout_problems(
                    backend, ParallelStrategy(tp, pp, dp, cp), shape
                )
                members: list[tuple[int, int]] = []
                for ep in divisors(gpus // pp) if with_experts else (1,):
                    if not _within(ep, c.max_ep):
                        continue
                    if c.num_experts is not None and c.num_experts % ep:
                        continue
                    etps: tuple[int, ...] = (1,)
                    if c.hybrid and backend in HYBRID_BACKENDS and ep > 1:
                        etps = tuple(
                            e
                            for e in divisors(gpus // (pp * ep))
                            if (not node or e <= node) and _within(e, c.max_tp)
                        )
                    for etp in etps:
                        if backend == "archon" and archon_mesh_problem(dp, tp, cp, ep, etp):
                            continue  # the archon engine's mesh refuses it, whatever the model
                        examined += 1
                        if examined > MAX_CANDIDATES:
                            raise TooManyLayouts(
                                f"stopped after examining {grouped(MAX_CANDIDATES)} candidate "
                                f"{backend} layouts of {grouped(gpus)} GPUs; narrow the search "
                                f"with limits such as --max-tp, --max-pp, --max-cp, --max-ep "
                                f"or a model shape"
                            )
                        if not family_fits:
                            continue
                        if ep > 1 and shape is not None:
                            if (ep, etp) not in pair_fits:
                                parallel = ParallelStrategy(tp, pp, dp, cp, ep, etp)
                                pair_fits[ep, etp] = not layout_problems(backend, parallel, shape)
                            if not pair_fits[ep, etp]:
                                continue
                        members.append((ep, etp))
                if members:
                    yield Family(tp, pp, dp, cp, tuple(members))


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


#: a proposal's own bounds (suggest sets them from the run): not a user's option
_SEARCH_FIELDS = {"sequence", "cp_share"}
_BOOL_FIELDS = {f.name for f in fields(LayoutConstraints) if f.type == "bool"}
_INT_FIELDS = {f.name for f in fields(LayoutConstraints)} - _BOOL_FIELDS - _SEARCH_FIELDS


def parse_constraints(options: object) -> LayoutConstraints:
    """``["max_tp=4", "hybrid=true"]`` → :class:`LayoutConstraints`, with clear errors."""
    values: dict[str, int | bool] = {}
    for option in options:  # type: ignore[attr-defined]
        key, sep, raw = str(option).partition("=")
        key, raw = key.strip().replace("-", "_"), raw.strip()
        if not sep or key not in _INT_FIELDS | _BOOL_FIELDS:
            raise AllocationValidationError(
                f"unknown layout constraint {shown(option)}; use key=value with key one of "
                f"{', '.join(sorted(_INT_FIELDS | _BOOL_FIELDS))}"
            )
        if key in _BOOL_FIELDS:
            if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                raise AllocationValidationError(f"{key}={shown(raw)}: must be true or false")
            values[key] = raw.lower() in ("true", "1", "yes")
        else:
            values[key] = read_int(raw, key, minimum=1, maximum=MAX_COUNT)
    return LayoutConstraints(**values)  # type: ignore[arg-type]


def shaped(constraints: LayoutConstraints | None, arch: Architecture) -> LayoutConstraints:
    """The constraints with the model's own shape rules filled in where none are given."""
    base = constraints or LayoutConstraints()
    return replace(
        base,
        num_layers=base.num_layers or arch.num_layers,
        num_attention_heads=base.num_attention_heads or arch.num_attention_heads,
        num_key_value_heads=base.num_key_value_heads or arch.kv_heads,
        num_experts=base.num_experts or (arch.num_experts or None),
    )


def training_counts(
    arch: Architecture,
    backend: str,
    gpus: int,
    per_node: int,
    *,
    sequences: int,
    sequence: int,
    bound: LayoutConstraints | None = None,
    fills: Callable[[int, int], bool] | None = None,
) -> list[int]:
    """The GPU counts below ``gpus`` that a sensible training layout can span, ascending:
    d·c·p·t with d dividing the step's ``sequences`` (the reference's even split), c
    splitting a ``sequence`` with no padding (:func:`context_parallel_fits`),
    p stages the layers fill (at most num_layers + 2, model_shape.layout_problems) and t
    dividing the heads inside a node; ``bound``: c also within its useful share
    (``LayoutConstraints.cp_bound``); ``fills(d, p)``: each rank's sequences fill the
    micro-batches p stages need. Counts of whole nodes only from two nodes on."""
    dims = BACKEND_DIMS[backend]

    def up_to(n: int, upto: int) -> list[int]:  # the divisors of n up to ``upto``
        return [k for k in range(1, min(n, upto) + 1) if n % k == 0]

    data = up_to(sequences, gpus)
    context = [c for c in up_to(sequence // 2, gpus) if context_parallel_fits(c, sequence)]
    context = context if "c" in dims else [1]
    stages = range(1, min(arch.num_layers + 2, gpus) + 1) if "p" in dims else range(1, 2)
    heads = math.gcd(arch.num_attention_heads, arch.kv_heads or arch.num_attention_heads)
    tensor = up_to(heads, per_node) if "t" in dims else [1]
    found: set[int] = set()
    for d in data:
        for c in context:
            for t in tensor:
                if bound is not None and not bound.cp_bound(c, t):
                    continue
                unit = d * c * t
                if unit >= gpus:
                    continue
                found.update(
                    unit * p for p in stages if unit * p < gpus and (fills is None or fills(d, p))
                )
    whole = gpus >= 2 * per_node
    return sorted(n for n in found if not whole or n % per_node == 0 or n < per_node)
