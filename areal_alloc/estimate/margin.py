"""Three verdicts on memory: fits, at the edge, does not fit; and the measured error that
draws the edge.

An estimate is judged against the GPU's capacity (what the device reports to torch:
``catalogue.REPORTED_GIB``) with its own measured error as a margin: the estimate less its
margin still over the capacity does not fit (the one verdict that refuses); the estimate
plus its margin over the capacity (and the estimate less it under) is at the edge: it
warns, says what would make room, and does not refuse; else it fits.

The error is the upper quartile (75th percentile) of the absolute errors of
``benchmarks/accuracy.py``'s rows of that kind: three in four measured estimates erred by
less. Not the median (4.5 % for train_memory): half the estimates err by more, so a
run the estimate puts 5-8 % over would be refused where one run in four of that error
fits (the 8B step on one H200 that ran with 139.3 of 139.8 GiB in use is estimated 6.9 %
over); not the worst (17.7 %: a torchtitan float8 row counted as bf16), which would call a
fifth of every GPU "at the edge". ``tests/plan/test_verdicts.py`` recomputes both figures
from the benchmark's rows, so a change of the estimates or the rows that moves them fails
there until they are updated here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "EDGE",
    "FITS",
    "KV_MEMORY_ERROR",
    "NO_FIT",
    "TRAIN_MEMORY_ERROR",
    "VERDICTS",
    "MeasuredError",
    "Verdict",
    "judge",
]

Verdict = Literal["fits", "at the edge", "does not fit"]
FITS: Final = "fits"
EDGE: Final = "at the edge"
NO_FIT: Final = "does not fit"
VERDICTS: tuple[Verdict, ...] = (FITS, EDGE, NO_FIT)


@dataclass(frozen=True, slots=True)
class MeasuredError:
    """An estimate's measured relative error, the accuracy benchmark's kind it comes from,
    and how it was computed."""

    share: float
    kind: str
    source: str

    @property
    def percent(self) -> str:
        return f"{self.share:.1%}"


_HOW = (
    "benchmarks/accuracy.py --kind {kind} at areal-alloc 6b208e97: the upper quartile "
    "(statistics.quantiles(n=4, method='inclusive')[2]) of the {n} compared rows' absolute "
    "errors (median {median}, worst {worst})"
)

#: A training engine's memory per GPU (reserve included) against the measured peak.
TRAIN_MEMORY_ERROR = MeasuredError(
    0.084,
    "train_memory",
    _HOW.format(kind="train_memory", n=20, median="4.5 %", worst="17.7 %"),
)
#: An inference server's KV pool (what its tokens in the KV cache come from).
KV_MEMORY_ERROR = MeasuredError(
    0.033,
    "kv_memory",
    _HOW.format(kind="kv_memory", n=5, median="0.6 %", worst="3.4 %"),
)


def judge(needed: int, capacity: int, margin: int) -> Verdict:
    """``needed`` bytes (or tokens) against ``capacity``, with ``margin``, the estimate's
    measured error in the same unit: does not fit when even ``needed - margin`` is over,
    at the edge when ``needed + margin`` is, else fits."""
    if needed - margin > capacity:
        return NO_FIT
    if needed + margin > capacity:
        return EDGE
    return FITS
