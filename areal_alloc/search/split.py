"""Proposing a whole RL allocation: how many GPUs generate, how many train, and how.

For every split of the cluster on node boundaries (rollout on whole nodes, the
rest training; below one node, any split), the fastest rollout layout (inference
instances inside a node) and the fastest training layout that fits — with the
reference model (forward only) and the critic colocated on the actor's GPUs, as
the reference's examples place them — are estimated with
:mod:`areal_alloc.estimate.rl_step`, the plan's model of a step. One RL step generates
``batch × mean`` tokens and trains on ``batch × (prompt_len + mean)`` (``mean``: the mean
generation length, at most ``gen_len``); in the step's mode
(:func:`areal_alloc.estimate.rl_step.step_seconds`), the weight update on top:

- asynchronous (off-policy, η = ``rollout.max_head_offpolicyness`` > 0; ``suggest``'s
  default, not the reference's, whose η is 0): generation and training overlap, so a
  step takes the longer of the two;
- synchronous (η = 0): one waits for the other, so a step takes their sum.

Proposals are ordered by that step time; each carries the balance (how much of
what the rollout produces training can consume).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import replace

from areal_alloc.architecture import Architecture
from areal_alloc.errors import AllocationValidationError
from areal_alloc.estimate import rl_step
from areal_alloc.estimate.execution import (
    InferenceSettings,
    TrainingSettings,
    budget_shares,
    whole_local_batch_tokens,
)
from areal_alloc.estimate.speed import ring_share
from areal_alloc.estimate.system import Hardware
from areal_alloc.model_shape import even_split_builds, minibatch_micro_batches
from areal_alloc.search.inputs import RunShape, SearchInputs
from areal_alloc.search.layouts import LayoutConstraints, context_parallel_fits, training_counts
from areal_alloc.search.proposal import Proposal, fits_with_colocated
from areal_alloc.search.ranking import FastestLayouts, RankedLayout, fastest_layouts
from areal_alloc.strategy import ParallelStrategy

__all__ = [
    "FREE_TRIES",
    "SPLIT_LAYOUTS",
    "Proposal",
    "RunShape",
    "SplitSearch",
    "context_parallel_fits",
    "search",
    "suggest",
    "training_counts",
]


def _splits(gpus: int, per_node: int) -> list[int]:
    """GPU counts for the rollout: whole nodes when there are two or more (what is
    left of a partial node trains), else every split of the one node."""
    if gpus >= 2 * per_node:
        return [n * per_node for n in range(1, gpus // per_node)]
    return list(range(1, gpus))


#: Training layouts searched per split at most, in the listing order (most data
#: parallelism first); more are left out and the proposal says so. Every split of up to
#: 4,096 GPUs of every catalogue model is within it (the most: 7,132 megatron layouts
#: of DeepSeek-V3 on 3,840 GPUs, 8 per node), and the search itself is exact
#: (:func:`areal_alloc.search.layouts.fastest_layouts`), so up to there nothing is left out.
SPLIT_LAYOUTS = 8_000
#: A split's training share may leave GPUs free: besides the layouts of the whole share,
#: its fastest layout of the most GPUs below that :func:`training_counts` allows (the first
#: of up to this many that has one) is estimated, and the faster of the two trains. E.g.
#: 4,120 GPUs = 8 × 5 × 103 fill only with c103 or p103 (megatron:d1p40c103, 5.4 s where
#: d128p4c8e8 on 4,096 of them takes 0.7 s); with it, 4,096 train and 24 are free.
FREE_TRIES = 4


#: Up to this many rollout/training splits, every one is estimated; beyond, the search
#: narrows in on the optimum (see :func:`_search_order`), then takes its neighbours.
EXHAUSTIVE_SPLITS = 48
#: Splits estimated on each side of the optimum the search finds.
_WINDOW = 3
#: Splits of the synchronous search's first, coarse look.
_GRID = 12


def _bisect_balance(count: int, training_slower: Callable[[int], bool]) -> int:
    """The first split where training is the slower side (asynchronous optimum)."""
    lo, hi = 0, count - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if training_slower(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def _ternary_minimum(count: int, total: Callable[[int], float | None]) -> int:
    """The split with the least generation + training time (synchronous optimum).

    ``total(i)`` is None where the rollout lacks GPUs (left of the optimum) and ``inf``
    where training does not fit (right of it); in between the sum is convex.
    """

    def value(index: int) -> float:
        found = total(index)
        return math.inf if found is None else found

    # a coarse look first (the sum is convex only piecewise: layouts change with the
    # split), then the ternary search between the best coarse point's neighbours
    grid = sorted({round(i * (count - 1) / (_GRID - 1)) for i in range(_GRID)})
    best = min(range(len(grid)), key=lambda g: value(grid[g]))
    lo, hi = grid[max(0, best - 1)], grid[min(len(grid) - 1, best + 1)]
    while hi - lo > 2:
        third = (hi - lo) // 3
        m1, m2 = lo + third, hi - third
        v1, v2 = total(m1), total(m2)
        if v1 is None:  # the rollout lacks GPUs at m1, and so at every split before it
            lo = m1 + 1
        elif v2 is None:  # not expected (m2 gives the rollout more GPUs); move past it
            lo = m2 + 1
        elif v1 == v2 == math.inf:  # training fits at neither: the optimum is left of m1
            hi = max(lo, m1 - 1)
        elif v1 < v2:
            hi = m2 - 1
        elif v1 > v2:
            lo = m1 + 1
        else:
            lo, hi = m1, m2
    return min(range(lo, hi + 1), key=value)


def _search_order(
    count: int,
    training_slower: Callable[[int], bool],
    total: Callable[[int], float | None],
    *,
    asynchronous: bool,
    window: int = _WINDOW,
) -> list[int]:
    """The split indices to estimate: all of them when few, else those around the optimum.

    Split ``i + 1`` gives the rollout more GPUs than split ``i``: generation time falls
    and training time rises with ``i``. Asynchronous, the step is the slower side and
    its optimum is where training becomes the slower side, found by bisection
    (``training_slower``); synchronous, the step is their sum, found by ternary search
    (``total``). Either takes a few times log2(count) estimates instead of count.
    """
    if count <= EXHAUSTIVE_SPLITS:
        return list(range(count))
    if asynchronous:
        best = _bisect_balance(count, training_slower)
    else:
        best = _ternary_minimum(count, total)
    return list(range(max(0, best - window), min(count, best + window + 1)))


def suggest(
    arch: Architecture,
    gpus: int,
    capacity: int,
    hardware: Hardware,
    shape: RunShape,
    *,
    train_backend: str = "megatron",
    rollout_backend: str = "sglang",
    training: TrainingSettings | None = None,
    context_length: int | None = None,
    top: int = 3,
    memory_reserve: int | None = None,
    inference: InferenceSettings | None = None,
    ref_training: TrainingSettings | None = None,
    critic_training: TrainingSettings | None = None,
) -> list[Proposal]:
    """The best ``top`` splits of ``gpus`` between rollout and training, fastest first
    (:class:`SplitSearch`).

    The engines' execution settings: ``training`` the actor's (micro-batch tokens,
    recomputation …), ``ref_training`` / ``critic_training`` those of the ref and the
    critic placed on the actor's GPUs (default: the actor's, the ref forward only), and
    ``inference`` the rollout's (default: the reference's, with ``context_length``) —
    ``suggest --config`` passes the config's own, so that a proposal of the config's own
    split has the plan's figures (:func:`areal_alloc.estimate.rl_step.training_pace`).
    ``memory_reserve``: bytes kept back per GPU by both engines (``--memory-reserve-gib``);
    None keeps the settings' defaults (4 GiB training, 2 GiB inference).
    """
    training = training or TrainingSettings()
    # the ref (forward only) and the critic (it trains) take turns on the actor's GPUs
    side: list[tuple[str, TrainingSettings]] = [("actor", training)]
    if shape.ref:
        side.append(("ref", ref_training or replace(training, optimizer=None)))
    if shape.critic:
        side.append(("critic", critic_training or training))
    if inference is None:
        inference = InferenceSettings()
        if context_length is not None:
            inference = replace(inference, context_length=context_length)
    if memory_reserve is not None:
        training = replace(training, reserve_bytes=memory_reserve)
        inference = replace(inference, reserve_bytes=memory_reserve)
    backends = (train_backend, rollout_backend)
    settings = (training, inference)
    found = SplitSearch(arch, gpus, capacity, hardware, shape, backends, tuple(side), settings)
    return found.proposals(top)


def search(
    inputs: SearchInputs, arch: Architecture, hardware: Hardware, top: int = 3
) -> list[Proposal]:
    """:func:`suggest` with what :mod:`areal_alloc.search.inputs` read, ``arch`` the model
    it names and ``hardware`` its GPU's speeds."""
    return suggest(
        arch,
        inputs.gpus,
        inputs.gpu.capacity,
        hardware,
        inputs.shape,
        train_backend=inputs.train_backend,
        rollout_backend=inputs.rollout_backend,
        training=inputs.training,
        top=top,
        memory_reserve=inputs.memory_reserve,
        inference=inputs.inference,
        ref_training=inputs.ref_training,
        critic_training=inputs.critic_training,
    )


class SplitSearch:
    """One search of the splits of ``gpus`` between rollout and training: the fastest
    rollout layout of each rollout share and the fastest training layout of the rest, each
    estimated once (kept per GPU count), the step of each split as the plan's pace reads
    it (:mod:`areal_alloc.estimate.rl_step`); :meth:`proposals` searches and ranks."""

    def __init__(
        self,
        arch: Architecture,
        gpus: int,
        capacity: int,
        hardware: Hardware,
        shape: RunShape,
        backends: tuple[str, str],
        side: tuple[tuple[str, TrainingSettings], ...],
        settings: tuple[TrainingSettings, InferenceSettings],
    ) -> None:
        """``backends``: training's and the rollout's; ``side``: each engine on the actor's
        GPUs with its own settings, the actor's first; ``settings``: the actor's and the
        rollout's that size their layouts' memory (:func:`suggest` reads them all)."""
        if gpus < 2:
            raise AllocationValidationError(
                f"{gpus} GPU(s): a rollout and a trainer need at least 2"
            )
        self.arch, self.gpus, self.capacity, self.hardware = arch, gpus, capacity, hardware
        self.shape, self.side = shape, side
        self.train_backend, self.rollout_backend = backends
        self.training, self.inference = settings
        self.per_node = per_node = hardware.gpus_per_node
        self.constraints = LayoutConstraints(gpus_per_node=per_node)
        self.step = shape.step
        self.sequence = sequence = shape.prompt_len + shape.gen_len
        # a proposal's context parallelism: each rank keeps 2 whole chunks of the longest
        # sequence, long enough to hide the KV ring under its attention (inside a node,
        # across)
        self.train_constraints = replace(
            self.constraints,
            sequence=sequence,
            cp_share=(ring_share(arch, hardware, True), ring_share(arch, hardware, False)),
        )
        self.best_rollout: dict[int, RankedLayout | None] = {}
        self.best_train: dict[int, RankedLayout | None] = {}
        # training GPU counts whose search stopped at SPLIT_LAYOUTS, and that limit
        self.cut_splits: dict[int, int] = {}
        self.shared: dict[int, TrainingSettings] = {}
        # no rollout wider than the step's sequences can keep busy: an instance per sequence
        # at most, each inside a node
        self.splits = [n for n in _splits(gpus, per_node) if n <= shape.batch * per_node] or [
            min(_splits(gpus, per_node))
        ]
        # the training GPU counts below a share worth trying (d | sequences, c splitting the
        # longest sequence without padding, p up to the layers' stages, t | heads in a node)
        self.fallback = training_counts(
            arch,
            self.train_backend,
            gpus,
            per_node,
            sequences=shape.batch,
            sequence=sequence,
            bound=self.train_constraints,
            fills=self.fills,
        )

    # --- what a layout must hold to be proposed ---------------------------------------

    def instance_in_node(self, parallel: ParallelStrategy) -> bool:
        """Inference instances inside a node, and no more of them than the step's
        sequences."""
        return (
            parallel.tp_size * parallel.pp_size <= self.per_node
            and parallel.dp_size <= self.shape.batch
        )

    def ranks_have_sequences(self, parallel: ParallelStrategy) -> bool:
        """Every data-parallel rank trains a sequence, and the step's sequences split evenly
        over them: the reference's single controller refuses a count that is not a multiple
        of dp (areal_alloc.experiment.rules.batch_splits_over_data_parallel)."""
        dp = parallel.dp_size
        return dp <= self.shape.batch and self.shape.batch % dp == 0

    def fills(self, dp: int, pp: int) -> bool:
        """Each engine on the actor's layout (the actor, a critic) splits a rank's sequences
        into its ppo_n_minibatches (a ref's forward: one) and packs each into at least its
        micro-batches (model_shape.minibatch_micro_batches): the start-up rule
        minibatches_fill_their_micro_batches refuses fewer (not under dynamic_bs)."""
        per_rank = self.shape.batch // max(1, dp)
        for key, own in self.side:
            if self.shape.dynamic_bs:
                continue
            least = minibatch_micro_batches(self.train_backend, pp, own.virtual_pipeline, own.n_mbs)
            if least is not None and per_rank < self.step.minibatches_of(key) * least:
                return False
        return True

    def builds(self, parallel: ParallelStrategy, settings: TrainingSettings) -> bool:
        """The micro-batches fill (:meth:`fills`), and an engine split evenly
        (megatron-bridge's path: execution sets layer_split "even") starts only where p
        divides the layers and vpp each rank's (the start-up rule
        megatron_bridge_splits_evenly refuses the rest)."""
        if not self.fills(parallel.dp_size, parallel.pp_size):
            return False
        if self.train_backend != "megatron" or settings.layer_split != "even":
            return True
        return even_split_builds(self.arch.num_layers, parallel.pp_size, settings.virtual_pipeline)

    def colocated_fit(self, actor: RankedLayout) -> bool:
        return fits_with_colocated(actor, self.shape, self.capacity)

    # --- the settings at a layout's d ------------------------------------------------

    def at_dp(self, settings: TrainingSettings, dp: int, key: str = "actor") -> TrainingSettings:
        """``mb_spec.max_tokens_per_mb`` unset (the config's micro_batches given): each
        rank's whole share of the step is a forward's micro-batch, a minibatch of it an
        update's (``execution.whole_local_batch_tokens``), so its tokens follow d."""
        shape, sequence = self.shape, self.sequence
        splits = self.step.minibatches_of(key) if settings.optimizer is not None else 1
        if settings.micro_batches is None:
            # a tokens budget: the shares the engine balances over its micro-batches
            share, whole = budget_shares(shape.batch, dp, sequence, splits)
            return replace(
                settings, share_tokens=share, forward_share_tokens=whole, sequence_tokens=sequence
            )
        count = settings.micro_batches
        tokens = whole_local_batch_tokens(shape.batch, dp, sequence, count, splits)
        forward = whole_local_batch_tokens(shape.batch, dp, sequence, count)
        return replace(
            settings,
            tokens_per_micro_batch=tokens,
            forward_tokens_per_micro_batch=forward if forward != tokens else None,
        )

    def actor_at(self, dp: int) -> TrainingSettings:
        """The actor's settings at d (:meth:`at_dp`), once per d."""
        if dp not in self.shared:
            self.shared[dp] = self.at_dp(self.training, dp)
        return self.shared[dp]

    # --- the fastest layouts of a share ------------------------------------------------

    def rollout_layout(self, rollout_gpus: int) -> RankedLayout | None:
        if rollout_gpus not in self.best_rollout:
            found = fastest_layouts(
                self.rollout_backend,
                rollout_gpus,
                self.constraints,
                self.arch,
                self.capacity,
                self.hardware,
                top=1,
                tokens_per_step=self.shape.generated_tokens,
                sequence_length=min(self.sequence, self.inference.context_length),
                inference=self.inference,
                keep=self.instance_in_node,
                sequences=self.shape.batch,
            )
            self.best_rollout[rollout_gpus] = found.layouts[0] if found.layouts else None
        return self.best_rollout[rollout_gpus]

    def train_search(
        self, train_gpus: int, settings: TrainingSettings | None, dp: int | None
    ) -> FastestLayouts:
        """The fastest layout at ``dp`` (None: every d) with ``settings`` (None: the actor's
        at each layout's d, :meth:`actor_at`)."""

        def keep(p: ParallelStrategy) -> bool:
            own = self.actor_at(p.dp_size) if settings is None else settings
            return self.ranks_have_sequences(p) and dp in (None, p.dp_size) and self.builds(p, own)

        return fastest_layouts(
            self.train_backend,
            train_gpus,
            self.train_constraints,
            self.arch,
            self.capacity,
            self.hardware,
            top=1,
            tokens_per_step=self.shape.train_tokens,
            # a trained sequence as the plan's pace reads it: prompt + mean generation
            sequence_length=min(
                self.step.length, (settings or self.training).tokens_per_micro_batch
            ),
            training=settings,
            training_at=self.actor_at if settings is None else None,
            keep=keep,
            accept=self.colocated_fit,
            limit=SPLIT_LAYOUTS,
            # the actor's ppo_update: its minibatches' optimizer steps, as the plan's pace
            optimizer_steps=self.step.minibatches_of("actor"),
        )

    def train_layout(self, train_gpus: int) -> RankedLayout | None:
        """The fastest training layout of at most ``train_gpus`` GPUs: of all of them, or of
        the most GPUs below that :func:`training_counts` allows and that have one (of
        :data:`FREE_TRIES` tried), when that is faster; the rest are free."""
        found = self.exact_train_layout(train_gpus)
        fallback = self.fallback
        below = bisect.bisect_left(fallback, train_gpus)  # the allowed counts < train_gpus
        for size in reversed(fallback[max(0, below - FREE_TRIES) : below]):
            fewer = self.exact_train_layout(size)
            if fewer is not None:
                if found is None or fewer.speed.tokens_per_second > found.speed.tokens_per_second:
                    found = fewer
                break
        return found

    def exact_train_layout(self, train_gpus: int) -> RankedLayout | None:
        if train_gpus not in self.best_train:
            batch, training = self.shape.batch, self.training
            counts = [
                dp
                for dp in range(1, min(train_gpus, batch) + 1)
                if train_gpus % dp == 0 and batch % dp == 0
            ]
            if training.micro_batches is None and training.sequence_tokens is None:
                # a tokens budget: one search, each layout with a rank's share at its d
                # (below the budget, the engine balances the share over its micro-batches)
                searches = [self.train_search(train_gpus, None, None)]
            else:  # a micro-batch per d: one search per d that splits the sequences
                searches = [
                    self.train_search(train_gpus, self.at_dp(training, dp), dp) for dp in counts
                ]
            if any(found.cut for found in searches):
                self.cut_splits[train_gpus] = SPLIT_LAYOUTS
            layouts = [layout for found in searches for layout in found.layouts]
            self.best_train[train_gpus] = min(
                layouts, key=lambda r: -r.speed.tokens_per_second, default=None
            )
        return self.best_train[train_gpus]

    # --- a split, and the search over them ----------------------------------------------

    def proposal(self, index: int) -> Proposal | None:
        rollout_gpus = self.splits[index]
        train_gpus = self.gpus - rollout_gpus
        rollout, actor = self.rollout_layout(rollout_gpus), self.train_layout(train_gpus)
        if rollout is None or actor is None:
            return None
        free = train_gpus - actor.parallel.world_size
        train_gpus -= free
        gen = _generation(self.arch, rollout, self.hardware, self.shape)
        dp = actor.parallel.dp_size
        train = rl_step.training_side(  # each engine with its own settings, as the plan does
            [
                rl_step.training_pace(
                    key,
                    self.train_backend,
                    actor.parallel,
                    self.arch,
                    self.hardware,
                    self.step,
                    self.at_dp(settings, dp, key),
                )
                for key, settings in self.side
            ]
        )
        inside = rollout_gpus + train_gpus <= self.per_node
        update = rl_step.weight_update(
            self.arch, self.shape.update_mode, self.hardware, inside_node=inside, senders=train_gpus
        )
        return Proposal(
            rollout,
            actor,
            rollout_gpus,
            train_gpus,
            gen.seconds,
            train,
            self.shape,
            self.cut_splits.get(train_gpus),
            update.seconds,
            gen,
            self.per_node,
            free_gpus=free,
        )

    def training_slower(self, index: int) -> bool:
        rollout_gpus = self.splits[index]
        if self.rollout_layout(rollout_gpus) is None:
            return False  # the rollout lacks GPUs
        found = self.proposal(index)
        if found is None and self.gpus - rollout_gpus > self.shape.batch * self.per_node:
            return False  # more training GPUs than its sequences keep busy: to the rollout
        return found is None or found.train_seconds >= found.generate_seconds

    def total(self, index: int) -> float | None:
        if self.rollout_layout(self.splits[index]) is None:
            return None  # the rollout lacks GPUs
        found = self.proposal(index)
        return math.inf if found is None else found.generate_seconds + found.train_seconds

    def step_of(self, index: int) -> float | None:
        found = self.proposal(index) if 0 <= index < len(self.splits) else None
        return None if found is None else found.step_seconds

    def weighed(self, p: Proposal) -> Proposal:
        """The proposal's advice against the splits beside it."""
        index = self.splits.index(p.rollout_gpus)
        return replace(p, neighbours=(self.step_of(index - 1), self.step_of(index + 1)))

    def proposals(self, top: int = 3) -> list[Proposal]:
        """The best ``top`` splits, fastest first: every split when few, else those around
        the optimum (:func:`_search_order`)."""
        order = _search_order(
            len(self.splits),
            self.training_slower,
            self.total,
            asynchronous=self.shape.mode == rl_step.ASYNCHRONOUS,
            window=max(_WINDOW, top),
        )
        found = [p for p in map(self.proposal, order) if p is not None]
        found.sort(key=lambda p: p.step_seconds)
        return [self.weighed(p) for p in found[:top]]


def _generation(
    arch: Architecture, rollout: RankedLayout, hardware: Hardware, shape: RunShape
) -> rl_step.Generation:
    """The rollout layout's generation of one step
    (:func:`areal_alloc.estimate.rl_step.step_generation`, as the plan's pace reads it)."""
    return rl_step.step_generation(
        arch,
        rollout.parallel,
        hardware,
        shape.step,
        rollout.memory.kv_cache,
        instances=rollout.parallel.dp_size,
        mode=shape.mode,
        backend=rollout.spec.partition(":")[0],
    )
