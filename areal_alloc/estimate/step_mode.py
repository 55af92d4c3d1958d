"""The three modes of an RL step, read from the config (:func:`mode_of`), and one step's
seconds in each (:func:`step_seconds`): asynchronous (η = ``rollout.max_head_offpolicyness``
> 0: the slower side), synchronous (η = 0: the sum) or colocated (time-shared: the sum plus
the offload and onload of what each side holds, ``rl_step.switch``).

``rl_step`` (the one model of an RL step) and ``advice`` (which way GPUs should move) both
read them; ``rl_step`` exports them with the rest of the step's model.
"""

from __future__ import annotations

from areal_alloc.estimate.execution import DEFAULT_OFFPOLICYNESS

__all__ = [
    "ASYNCHRONOUS",
    "COLOCATED",
    "MODES",
    "SYNCHRONOUS",
    "mode_of",
    "step_seconds",
]

ASYNCHRONOUS, SYNCHRONOUS, COLOCATED = "asynchronous", "synchronous", "colocated"
MODES = (ASYNCHRONOUS, SYNCHRONOUS, COLOCATED)


def mode_of(offpolicyness: int | None, colocated: bool) -> str:
    """The step's mode: colocated when the rollout shares the actor's GPUs, else
    asynchronous when ``rollout.max_head_offpolicyness`` > 0, else synchronous."""
    if colocated:
        return COLOCATED
    eta = DEFAULT_OFFPOLICYNESS if offpolicyness is None else offpolicyness
    return ASYNCHRONOUS if eta > 0 else SYNCHRONOUS


def step_seconds(mode: str, generate: float, train: float, update: float, shift: float) -> float:
    """One step in ``mode``: the weight update is on the step's path in every mode."""
    if mode == ASYNCHRONOUS:
        return max(generate, train) + update
    if mode == COLOCATED:
        return generate + train + update + shift
    return generate + train + update
