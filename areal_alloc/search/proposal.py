"""A proposed split of the GPUs between rollout and training (areal_alloc.search.split): its
layouts, its step as the plan's pace reads it, which way GPUs should move, and the overrides
and YAML that run it; and whether the actor's GPUs also hold a colocated ref and critic."""

from __future__ import annotations

from dataclasses import dataclass

from areal_alloc.estimate import rl_step
from areal_alloc.estimate.advice import TRAINING, Split, balance, balance_advice
from areal_alloc.estimate.memory import Term
from areal_alloc.search.inputs import RunShape
from areal_alloc.search.ranking import RankedLayout

__all__ = ["Proposal", "fits_with_colocated"]


@dataclass(frozen=True, slots=True)
class Proposal:
    rollout: RankedLayout
    actor: RankedLayout
    rollout_gpus: int
    train_gpus: int
    generate_seconds: float
    train_seconds: float
    shape: RunShape
    #: The training layouts of this split were more than the search's limit
    #: (``areal_alloc.search.split.SPLIT_LAYOUTS``): the first ``cut_at`` in the listing
    #: order (most data parallelism first) were searched; None: every one.
    cut_at: int | None = None
    update_seconds: float = 0.0  # the weight update to the rollout (rl_step.weight_update)
    generation: rl_step.Generation | None = None
    gpus_per_node: int = 8
    #: the step of the neighbouring splits as the search estimates them: one step of GPUs
    #: more for training, one more for the rollout (None: no such split fits)
    neighbours: tuple[float | None, float | None] | None = None
    #: GPUs of the split that no engine uses: training is faster on ``train_gpus`` of its
    #: share than on all of it (``areal_alloc.search.split.FREE_TRIES``)
    free_gpus: int = 0

    @property
    def training_search_cut(self) -> bool:
        """The training search of this split stopped at its limit, with layouts left."""
        return self.cut_at is not None

    @property
    def step_seconds(self) -> float:
        """The step in the run's mode (:func:`areal_alloc.estimate.rl_step.step_seconds`)."""
        return rl_step.step_seconds(
            self.shape.mode,
            self.generate_seconds,
            self.train_seconds,
            self.update_seconds,
            0.0,
        )

    @property
    def balance(self) -> float | None:
        """Generation rate over training rate (:func:`.advice.balance`; None when a side
        has no estimate)."""
        return balance(self.generate_seconds, self.train_seconds)

    @property
    def advice(self) -> str:
        """Which way GPUs should move, weighed against the neighbouring splits."""
        gpus = self.rollout_gpus + self.train_gpus + self.free_gpus
        instances = self.rollout.parallel.dp_size
        split = Split(
            self.rollout_gpus,
            self.train_gpus,
            gpus,
            self.gpus_per_node,
            rollout_full=instances if instances >= self.shape.batch else None,
        )
        near = self.neighbours

        def moved(side: str) -> float | None:
            if near is None:
                return None
            return near[0] if side == TRAINING else near[1]

        return balance_advice(
            self.generate_seconds,
            self.train_seconds,
            self.shape.mode,
            split,
            update=self.update_seconds,
            moved=None if near is None else moved,
        )

    def overrides(self) -> list[str]:
        out = [f"rollout.backend={self.rollout.spec}", f"actor.backend={self.actor.spec}"]
        if self.shape.ref:
            out += ["++ref.backend=''", "++ref.scheduling_strategy.type=colocation"]
            out += ["++ref.scheduling_strategy.target=actor"]
        if self.shape.critic:
            out += [f"++critic.backend={self.actor.spec}"]
            out += ["++critic.scheduling_strategy.type=colocation"]
            out += ["++critic.scheduling_strategy.target=actor"]
        return out

    def yaml(self) -> str:
        lines = [
            f"rollout:\n  backend: {self.rollout.spec}",
            f"actor:\n  backend: {self.actor.spec}",
        ]
        colocated = "  scheduling_strategy: {type: colocation, target: actor}"
        if self.shape.ref:
            lines.append(f'ref:\n  backend: ""\n{colocated}')
        if self.shape.critic:
            lines.append(f"critic:\n  backend: {self.actor.spec}\n{colocated}")
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict[str, object]:
        return {
            "rollout": {"gpus": self.rollout_gpus, **self.rollout.to_dict()},
            "actor": {"gpus": self.train_gpus, **self.actor.to_dict()},
            "free_gpus": self.free_gpus,
            "generate_seconds": self.generate_seconds,
            "train_seconds": self.train_seconds,
            "step_seconds": self.step_seconds,
            "update_seconds": self.update_seconds,
            "mode": self.shape.mode,
            "generation": None if self.generation is None else self.generation.what,
            "balance": self.balance,
            "advice": self.advice,
            "overrides": self.overrides(),
            "training_search_cut": self.training_search_cut,
        }

    @property
    def search_note(self) -> str | None:
        """What the search of this proposal's training layouts left out, if anything."""
        if self.cut_at is None:
            return None
        backend = self.actor.spec.partition(":")[0]
        return (
            f"training on {self.train_gpus:,} GPUs: only the first {self.cut_at:,} "
            f"{backend} layouts were searched (most data parallelism first); "
            f"`areal-alloc layouts {backend} {self.train_gpus} --rank --top 3` searches more"
        )


def fits_with_colocated(actor: RankedLayout, shape: RunShape, capacity: int) -> bool:
    """The actor's GPUs also hold the ref's weights (bf16) and the critic's states."""
    memory = actor.memory
    resident = memory.term("weights") + memory.term("gradients") + memory.term("optimizer")
    added = 0
    if shape.ref:
        added += memory.term("weights")  # the same model, weights only
    if shape.critic:
        added += resident
    if not added:
        return True
    shared = memory.with_term(Term("colocated", added, "ref/critic on these GPUs"))
    return shared.total <= capacity
