"""Which way GPUs should move between the two sides of an RL step (:func:`balance_advice`,
one line), given where the GPUs are (:class:`Split`): the plan's advice
(``pace.Pace.advice``) and ``suggest``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from areal_alloc.estimate.step_mode import ASYNCHRONOUS, COLOCATED, step_seconds

__all__ = [
    "BALANCED",
    "ROLLOUT",
    "TRAINING",
    "Split",
    "balance",
    "balance_advice",
]

#: A balance within this fraction of even is called balanced (the estimates are no closer).
BALANCED = 0.1
TRAINING, ROLLOUT = "training", "rollout"


@dataclass(frozen=True, slots=True)
class Split:
    """The GPUs each side of a step runs on, and how many may move between them at once.

    On two nodes or more the rollout takes whole nodes (``suggest``'s splits; a server
    spans whole nodes when it is wider than one), so GPUs move a node at a time; on one
    node, whole rollout instances and training replicas move (the least common multiple
    of their sizes; ``suggest``'s single-node splits move one GPU: units of 1)."""

    rollout_gpus: int
    train_gpus: int
    gpus: int  # the cluster's, free ones included
    gpus_per_node: int
    rollout_unit: int = 1  # GPUs of one rollout instance (t × p): the rollout's least
    train_unit: int = 1  # GPUs of one training replica (world / d): the trainer's least
    #: the rollout runs an instance per sequence of the step already: a GPU more cannot
    #: speed it (``suggest``: no more instances than the step has sequences); its count
    rollout_full: int | None = None

    @property
    def whole_nodes(self) -> bool:
        return self.gpus >= 2 * self.gpus_per_node

    @property
    def step(self) -> int:
        """GPUs moved at once."""
        if self.whole_nodes:
            return self.gpus_per_node
        return math.lcm(max(1, self.rollout_unit), max(1, self.train_unit))

    @property
    def free(self) -> int:
        return max(0, self.gpus - self.rollout_gpus - self.train_gpus)

    def least(self, side: str) -> int:
        """The fewest GPUs ``side`` keeps: one node for a rollout on whole nodes, else one
        instance or one replica."""
        if side == ROLLOUT:
            return self.gpus_per_node if self.whole_nodes else max(1, self.rollout_unit)
        return max(1, self.train_unit)

    def gpus_of(self, side: str) -> int:
        return self.rollout_gpus if side == ROLLOUT else self.train_gpus

    def unit_of(self, side: str) -> int:
        return max(1, self.rollout_unit if side == ROLLOUT else self.train_unit)


def balance(generate: float | None, train: float | None) -> float | None:
    """Generation rate over training rate, ``train ÷ generate`` seconds (> 1: rollout
    outruns training); None when either side has no estimate."""
    if not generate or not train:
        return None
    return train / generate


def balance_advice(
    generate: float | None,
    train: float | None,
    mode: str = ASYNCHRONOUS,
    split: Split | None = None,
    *,
    update: float = 0.0,
    moved: Callable[[str], float | None] | None = None,
) -> str:
    """What to do about the two sides of a step, one line.

    Asynchronous, the step is the slower side: GPUs go to it until the two balance.
    Synchronous, the step is their sum: a GPU goes where it saves most, the side with
    more seconds per GPU. Colocated, the sides take turns on the same GPUs: nothing moves.
    With ``split`` (where the GPUs are), the side to grow is checked: free GPUs go to it;
    else the other side gives up :attr:`Split.step` GPUs only if it keeps its least and
    the step gets faster — ``moved(side)`` is that step as the caller estimated it
    (``suggest``: its neighbouring split; None: no such split fits), else both sides are
    scaled by their GPUs (linear scaling, said) — and otherwise the split is the best in
    those steps."""
    ratio_of_rates = balance(generate, train)
    if generate is None or train is None or ratio_of_rates is None:
        return "one side has no estimate"
    rate = (
        f"rollout produces {ratio_of_rates:.1f}× what training consumes"
        if ratio_of_rates > 1
        else f"training could consume {1 / ratio_of_rates:.1f}× what rollout produces"
    )
    if mode == COLOCATED:
        return (
            f"{rate}; colocated, the two take turns on the same GPUs: none move between them "
            f"(areal-alloc suggest proposes separate splits)"
        )
    if mode == ASYNCHRONOUS or split is None or not split.rollout_gpus or not split.train_gpus:
        ratio, head = ratio_of_rates, rate
    else:  # a synchronous step is the sum: a GPU saves its side's seconds per GPU
        train_per, gen_per = train / split.train_gpus, generate / split.rollout_gpus
        ratio = train_per / gen_per
        head = (
            f"{rate}; a synchronous step is their sum, and a GPU saves ≈ "
            f"{_seconds(max(train_per, gen_per))} on {TRAINING if ratio > 1 else ROLLOUT}, "
            f"{_seconds(min(train_per, gen_per))} on {ROLLOUT if ratio > 1 else TRAINING}"
        )
    if abs(ratio - 1) <= BALANCED:
        return "balanced" if head == rate else f"{head}: balanced"
    grow = TRAINING if ratio > 1 else ROLLOUT
    if split is None:
        return f"{head}: move GPUs to {grow}"
    shrink = ROLLOUT if grow == TRAINING else TRAINING
    if grow == ROLLOUT and split.rollout_full is not None:
        return (
            f"{head}, but the rollout already runs an instance per sequence of the step "
            f"({split.rollout_full:,}): no GPU more speeds it"
            + (f"; the {split.free:,} free GPUs stay free" if split.free else "")
        )
    if split.free >= split.unit_of(grow):
        return f"{head}: give the {split.free} free GPUs to {grow}"
    step = split.step
    what = f"a node ({step} GPUs)" if split.whole_nodes else f"{step} GPU{'s' * (step > 1)}"
    where = "on whole nodes" if split.whole_nodes else f"in steps of {what}"
    have, least = split.gpus_of(shrink), split.least(shrink)
    if have - step < least:
        return (
            f"{head}, but the {shrink} cannot give up {what}: it has {have} GPUs and needs "
            f"at least {least}, so the split is the best {where}; a faster step needs more "
            f"GPUs (areal-alloc suggest --gpus N)"
        )
    now = step_seconds(mode, generate, train, update, 0.0)
    if moved is not None:
        after, how = moved(grow), ""
        if after is None:
            return (
                f"{head}, but no split with {what} more for {grow} fits: the split is the "
                f"best {where}"
            )
    else:  # each side's time scaled by its GPUs
        rollout = split.rollout_gpus + (step if grow == ROLLOUT else -step)
        training = split.train_gpus + (step if grow == TRAINING else -step)
        after = step_seconds(
            mode,
            generate * split.rollout_gpus / rollout,
            train * split.train_gpus / training,
            update,
            0.0,
        )
        how = ", each side scaled by its GPUs"
    shown_after, shown_now = _seconds(after, now), _seconds(now, after)
    if after < now:
        return f"{head}: move {what} to {grow} (≈ {shown_after} a step instead of {shown_now}{how})"
    if math.isclose(after, now, rel_tol=1e-9):
        effect = f"would leave the step at ≈ {shown_now}{how}"
    else:
        effect = f"would take ≈ {shown_after} a step, not less than {shown_now}{how}"
    return (
        f"{head}, but moving {what} to {grow} {effect}: the split is the best {where} "
        f"(areal-alloc suggest weighs every split)"
    )


def _seconds(value: float, beside: float | None = None) -> str:
    """``2,246 s``, ``12.4 s``: three figures, never an exponent; more when ``beside``
    would print the same (``86.04 s`` beside ``85.98 s``)."""

    def shown(seconds: float, digits: int) -> str:
        return f"{seconds:,.0f} s" if seconds >= 10**digits else f"{seconds:.{digits}g} s"

    for digits in range(3, 7):
        if beside is None or beside == value or shown(value, digits) != shown(beside, digits):
            return shown(value, digits)
    return shown(value, 7)
