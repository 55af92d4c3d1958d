"""Ranking the layouts: which fit a model on a GPU, and the fastest of them by the
estimated step (``fitting_layouts``, ``ranked_layouts``, ``fastest_layouts``), over the
enumeration of :mod:`areal_alloc.search.layouts`."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from areal_alloc.architecture import Architecture
from areal_alloc.estimate.execution import InferenceSettings, TrainingSettings
from areal_alloc.estimate.layout import decode_speed, layout_memory_estimate, training_speed
from areal_alloc.estimate.memory import MemoryEstimate
from areal_alloc.estimate.speed import StepEstimate
from areal_alloc.estimate.system import Hardware
from areal_alloc.format import format_spec
from areal_alloc.limits import MAX_LAYOUTS, grouped
from areal_alloc.search.layouts import (
    Family,
    LayoutConstraints,
    TooManyLayouts,
    iter_families,
    iter_strategies,
    shaped,
)
from areal_alloc.strategy import ParallelStrategy
from areal_alloc.vocab import INFERENCE_BACKENDS

__all__ = [
    "FastestLayouts",
    "RankedLayout",
    "fastest_layouts",
    "layout_memory",
    "ranked_layouts",
]


def layout_memory(
    backend: str,
    gpus: int,
    constraints: LayoutConstraints | None,
    arch: Architecture,
    capacity: int | None,
    training: TrainingSettings | None = None,
    inference: InferenceSettings | None = None,
) -> Iterator[tuple[str, MemoryEstimate]]:
    """Each valid layout with its memory per GPU, the model's shape rules applied.

    At most :data:`MAX_LAYOUTS` layouts, in the listing order.
    """
    training = training or TrainingSettings()
    inference = inference or InferenceSettings()
    strategies = iter_strategies(backend, gpus, shaped(constraints, arch))
    for parallel in itertools.islice(strategies, MAX_LAYOUTS):
        estimate = layout_memory_estimate(backend, parallel, arch, capacity, training, inference)
        yield format_spec(backend, parallel), estimate


@dataclass(frozen=True, slots=True)
class RankedLayout:
    """A layout that fits, its memory per GPU, and its estimated speed."""

    spec: str
    memory: MemoryEstimate
    speed: StepEstimate
    parallel: ParallelStrategy

    def to_dict(self) -> dict[str, object]:
        return {
            "backend": self.spec,
            "memory_total": self.memory.total,
            "step_seconds": self.speed.seconds,
            "tokens_per_second": self.speed.tokens_per_second,
            "mfu": self.speed.mfu,
            "bottleneck": self.speed.bottleneck,
            "memory": self.memory.to_dict(),
            "speed": self.speed.to_dict(),
        }


def _too_many_to_rank(backend: str, gpus: int, limit: int, how: str) -> TooManyLayouts:
    return TooManyLayouts(
        f"more than {grouped(limit)} {backend} layouts of {grouped(gpus)} GPUs to rank "
        f"({how}); narrow the search with --max-tp, --max-pp, --max-cp, --max-ep or "
        f"--gpus-per-node"
    )


def ranked_layouts(
    backend: str,
    gpus: int,
    constraints: LayoutConstraints | None,
    arch: Architecture,
    capacity: int | None,
    hardware: Hardware,
    *,
    tokens_per_step: int,
    sequence_length: int,
    training: TrainingSettings | None = None,
    inference: InferenceSettings | None = None,
    keep: Callable[[ParallelStrategy], bool] | None = None,
    limit: int | None = None,
    sequences: int | None = None,
    optimizer_steps: int = 1,
    training_at: Callable[[int], TrainingSettings] | None = None,
) -> list[RankedLayout]:
    """The layouts that fit, fastest first (training: tokens per second of a step;
    inference: generated tokens per second of all instances at the batch the KV cache
    holds).

    ``keep`` drops layouts before they are estimated. With ``limit``, more than
    ``limit`` valid layouts raise :class:`TooManyLayouts` (checked before any is
    estimated); without, at most :data:`MAX_LAYOUTS` are ranked. ``optimizer_steps``: a
    training step is that many optimizer steps over ``tokens_per_step`` in all.
    ``training_at``: a layout's training settings by its d, in place of ``training``.
    """
    training = training or TrainingSettings()
    inference = inference or InferenceSettings()
    strategies: Iterable[ParallelStrategy] = iter_strategies(
        backend, gpus, shaped(constraints, arch)
    )
    if keep is not None:
        strategies = filter(keep, strategies)
    if limit is not None:
        found = list(itertools.islice(strategies, limit + 1))
        if len(found) > limit:
            raise _too_many_to_rank(
                backend, gpus, limit, "the limit of a full ranking; --top K ranks more"
            )
        strategies = found
    out = []
    for parallel in itertools.islice(strategies, MAX_LAYOUTS):
        settings = training if training_at is None else training_at(parallel.dp_size)
        memory = layout_memory_estimate(backend, parallel, arch, capacity, settings, inference)
        if memory.fits is False:
            continue
        if backend in INFERENCE_BACKENDS:
            speed = decode_speed(arch, parallel, hardware, memory, gpus, sequence_length, sequences)
        else:
            speed = training_speed(
                backend,
                arch,
                parallel,
                hardware,
                tokens_per_step,
                sequence_length,
                settings,
                optimizer_steps,
            )
        out.append(RankedLayout(format_spec(backend, parallel), memory, speed, parallel))
    out.sort(key=lambda r: -r.speed.tokens_per_second)
    return out


@dataclass(frozen=True, slots=True)
class FastestLayouts:
    """The ``top`` fastest layouts that fit, and how much of the listing was searched."""

    layouts: tuple[RankedLayout, ...]
    searched: int  # valid layouts looked at (estimated, or bounded away)
    cut: bool  # the search stopped at its limit with layouts left


#: Speed terms that only expert parallelism adds (and that grow with it).
_EXPERT_TERMS = ("expert all-to-all", "expert all-gather")
#: The terms that change with e·etp inside a family besides the expert ones: the pipeline
#: split weighs an MoE layer by its local experts (pipeline_split.reference_weights), so the
#: slowest rank, and the bubble taken on its time, move with e.
_PIPELINE_TERMS = ("pipeline imbalance", "pipeline bubble")


def _family_bound(speed: StepEstimate) -> float:
    """A lower bound on the step of every layout of a family (same d, c, p, t), from its
    widest e·etp member: its terms but the expert and pipeline ones (the data-parallel term
    only shrinks as e·etp grows), plus its bubble. A member's imbalance I and bubble
    ((p − 1)·busy − I) / (m·vpp) sum to at least (p − 1)·busy / (m·vpp), the same for
    the whole family (the compute does not depend on e), which the widest's bubble never
    exceeds."""
    seconds = {t.name: t.seconds for t in speed.terms if not t.hidden}
    rest = sum(v for n, v in seconds.items() if n not in _EXPERT_TERMS + _PIPELINE_TERMS)
    return rest + seconds.get("pipeline bubble", 0.0)


def fastest_layouts(
    backend: str,
    gpus: int,
    constraints: LayoutConstraints | None,
    arch: Architecture,
    capacity: int | None,
    hardware: Hardware,
    *,
    top: int,
    tokens_per_step: int,
    sequence_length: int,
    training: TrainingSettings | None = None,
    inference: InferenceSettings | None = None,
    keep: Callable[[ParallelStrategy], bool] | None = None,
    accept: Callable[[RankedLayout], bool] | None = None,
    limit: int = MAX_LAYOUTS,
    sequences: int | None = None,
    optimizer_steps: int = 1,
    training_at: Callable[[int], TrainingSettings] | None = None,
    refuse_cut: bool = False,
) -> FastestLayouts:
    """The first ``top`` of :func:`ranked_layouts` that ``accept`` takes, found by
    branch and bound instead of estimating every layout.

    Exactly the same layouts in the same order (ties keep the listing order), for a
    training backend: the layouts of one family share d, c, p and t and differ in
    e and etp; every term of a step but the expert all-to-all is the same across
    the family except the data-parallel one, which only shrinks as e·etp grows
    (fewer parameters per GPU), and the pipeline's imbalance and bubble (the split
    weighs an MoE layer by its local experts). So the step of the family's largest
    e·etp without those (:func:`_family_bound`) is a lower bound for all of them,
    and a family whose bound is no faster than the ``top``-th found so far is passed
    over unestimated; within
    a family, memory is estimated only for a layout fast enough to enter. An
    inference backend's few layouts are all estimated. At most ``limit`` valid
    layouts are searched, in the listing order; ``cut`` says the limit was hit.
    ``optimizer_steps``: a training layout's step is that many optimizer steps over
    ``tokens_per_step`` in all (an RL step's ``ppo_n_minibatches``); every term repeats,
    so the bound holds for it as for one. ``training_at``: a training layout's settings by
    its d (a rank's share of the step sets its micro-batch), in place of ``training``; a
    family shares d, so its bound holds with them. ``refuse_cut``: a listing cut at
    ``limit`` is refused by the caller, so nothing is estimated (``cut`` and no layout).
    """
    if top < 1:
        return FastestLayouts((), 0, False)
    training = training or TrainingSettings()
    inference = inference or InferenceSettings()
    # the families, cut to the first ``limit`` valid layouts, members built only when kept
    families: list[tuple[Family, list[ParallelStrategy] | None]] = []
    searched, cut = 0, False
    for family in iter_families(backend, gpus, shaped(constraints, arch)):
        built = None if keep is None else [p for p in family.strategies() if keep(p)]
        size = len(family.members) if built is None else len(built)
        if searched + size > limit:
            cut = True
            take = limit - searched
            if take:
                families.append((family, (built or list(family.strategies()))[:take]))
                searched += take
            break
        if size:
            families.append((family, built))
            searched += size
    if cut and refuse_cut:  # counted before any estimate: the refusal comes at once
        return FastestLayouts((), searched, cut)
    best: list[tuple[float, int, RankedLayout]] = []  # (-tokens/s, listing index, layout)

    def enter(
        index: int, parallel: ParallelStrategy, speed: StepEstimate, memory: MemoryEstimate
    ) -> None:
        ranked = RankedLayout(format_spec(backend, parallel), memory, speed, parallel)
        if accept is not None and not accept(ranked):
            return
        best.append((-speed.tokens_per_second, index, ranked))
        best.sort(key=lambda entry: (entry[0], entry[1]))
        del best[top:]

    def beaten(seconds: float) -> bool:
        """True when a step of at least ``seconds`` cannot enter the ``top``."""
        return len(best) == top and seconds >= best[-1][2].speed.seconds

    def members(family: Family, built: list[ParallelStrategy] | None) -> list[ParallelStrategy]:
        return list(family.strategies()) if built is None else built

    if backend in INFERENCE_BACKENDS:
        index = 0
        for family, built in families:
            for parallel in members(family, built):
                memory = layout_memory_estimate(
                    backend, parallel, arch, capacity, training, inference
                )
                if memory.fits is not False:
                    speed = decode_speed(
                        arch, parallel, hardware, memory, gpus, sequence_length, sequences
                    )
                    enter(index, parallel, speed, memory)
                index += 1
        return FastestLayouts(tuple(entry[2] for entry in best), searched, cut)

    def speed_of(parallel: ParallelStrategy, settings: TrainingSettings) -> StepEstimate:
        return training_speed(
            backend,
            arch,
            parallel,
            hardware,
            tokens_per_step,
            sequence_length,
            settings,
            optimizer_steps,
        )

    index = 0
    for family, built in families:
        first = index
        index += len(family.members) if built is None else len(built)
        if built is None:
            widest = family.strategy(max(family.members, key=lambda m: m[0] * m[1]))
        else:
            widest = max(built, key=lambda p: p.ep_size * p.etp_size)
        settings = training if training_at is None else training_at(widest.dp_size)
        widest_speed = speed_of(widest, settings)
        bound = _family_bound(widest_speed)
        if beaten(bound):
            continue
        for offset, parallel in enumerate(members(family, built)):
            speed = widest_speed if parallel == widest else speed_of(parallel, settings)
            if beaten(speed.seconds):
                continue
            memory = layout_memory_estimate(backend, parallel, arch, capacity, settings, inference)
            if memory.fits is not False:
                enter(first + offset, parallel, speed, memory)
    return FastestLayouts(tuple(entry[2] for entry in best), searched, cut)
