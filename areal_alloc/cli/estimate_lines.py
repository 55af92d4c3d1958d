"""The lines the estimate commands (``layouts``, ``suggest``) mark and end with: a layout at
the edge of its GPU's memory, the actor's host share, what an estimate assumed, and what to
try when nothing fits."""

from __future__ import annotations

from areal_alloc.estimate.margin import EDGE
from areal_alloc.estimate.memory import MemoryEstimate
from areal_alloc.estimate.speed import StepEstimate

__all__ = ["at_the_edge", "footer", "host_share", "memory_fixes"]


def footer(gpus_per_node: int | None, assumptions: tuple[str, ...]) -> None:
    """What an estimate assumed (``gpus_per_node`` None: the 8 assumed), and where a
    calibration came from."""
    for assumption in assumptions:
        if not assumption.startswith("calibrated: "):
            print(f"# assumed: {assumption}")
    if not gpus_per_node:
        print("# assumed: 8 GPUs per node (--gpus-per-node)")
    for assumption in assumptions:  # a stored calibration, with how to turn it off
        if assumption.startswith("calibrated: "):
            print(f"# {assumption}")


def memory_fixes(recompute: str | None) -> str:
    """What to try when nothing fits: --recompute full only when it is not already so."""
    if recompute == "full":
        return "try more GPUs or fewer --tokens (this is already with --recompute full)"
    return "try more GPUs, --recompute full or fewer --tokens"


def at_the_edge(memory: MemoryEstimate) -> str:
    """A proposal's memory at the edge (estimate.margin): within the estimate's measured
    error of the GPU's memory, so it may not fit."""
    if memory.verdict != EDGE:
        return ""
    return f" (AT THE EDGE: within the estimate's {memory.error.sides} measured error)"


def host_share(step: StepEstimate) -> str:
    """The actor's host time (speed_host) as a share of its step: hidden under its GPU
    time, or beyond it; "" where it has none."""
    term = step.host
    if term is None or not step.seconds:
        return ""
    where = "hidden under its GPU time" if term.hidden else "beyond its GPU time"
    return f"; host {term.seconds / step.seconds:.0%} of the actor's step, {where}"
