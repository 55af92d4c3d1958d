"""The rank groups the report draws: ``explain --json``'s lists, per training engine.

Each active training engine's backend string is read back from the plan's JSON dict
and its groups come from :func:`areal_alloc.rankgroups.summarize_rank_groups`, whose
lists ``explain --json`` prints, in Megatron's default order. The report draws an
engine's first :data:`MAX_DRAWN_RANKS` ranks and embeds the first DRAWN groups of each
kind (every group that holds a drawn rank starts below DRAWN) cut to the drawn ranks:
for an engine of at most that many GPUs, exactly what ``explain SPEC --json`` lists
(which stops at 16,384 ranks a kind; the page, at the drawn ranks). An engine's layers per
pipeline rank are the plan's ``pipeline_split``, ``explain SPEC --model M --json``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import takewhile
from typing import Any

from areal_alloc.errors import AllocationError
from areal_alloc.model import ModelAllocation
from areal_alloc.rankgroups import summarize_rank_groups
from areal_alloc.vocab import DEFAULT_ORDER

__all__ = ["KINDS", "MAX_DRAWN_RANKS", "EngineGroups", "engine_groups"]

#: Ranks of one engine drawn at most (one cell each).
MAX_DRAWN_RANKS = 1024
#: The group kinds offered, attention mesh first, then the expert mesh; the others
#: ``explain`` lists (dp-cp, tp-pp, …) are unions of these.
KINDS = ("tp", "cp", "dp", "pp", "etp", "ep", "edp")
_EXPERT_KINDS = frozenset(("etp", "ep", "edp"))


@dataclass(frozen=True, slots=True)
class EngineGroups:
    """One training engine's drawn ranks and their groups."""

    key: str
    spec: str
    world: int
    #: the global GPU of each drawn rank (None: the plan places no GPU, e.g. CPU-only)
    gpus: tuple[int | None, ...]
    #: kind -> {size, count, omitted, groups (cut to the drawn ranks), part}
    kinds: dict[str, dict[str, Any]]
    hybrid: bool
    #: why no groups are drawn (megatron-core refuses the order), or None
    refused: str | None = None
    #: the layers per pipeline rank as the plan's JSON holds them (``explain --json``'s
    #: ``pipeline_split``), or None (p = 1, or no model)
    pipeline_split: dict[str, Any] | None = None

    @property
    def drawn(self) -> int:
        return len(self.gpus)

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "spec": self.spec,
            "order": DEFAULT_ORDER,
            "world": self.world,
            "drawn": self.drawn,
            "kinds": self.kinds,
            "refused": self.refused,
            "pipeline_split": self.pipeline_split,
        }


def _gpus_of(
    plan: Mapping[str, Any], engine: Mapping[str, Any], count: int
) -> tuple[int | None, ...]:
    """The GPUs of an engine's first ``count`` ranks: its own placement, or its target's."""
    key = engine["key"]
    target = engine.get("scheduling", {}).get("target")
    runs: list[tuple[int, int]] = []
    for placement in plan["placements"]:
        if placement["key"] == key or (not engine["gpus"] and placement["key"] == target):
            runs = [(r["start"], r["stop"]) for r in placement["gpu_ranges"]]
            if placement["key"] == key:
                break
    gpus: list[int | None] = []
    for start, stop in runs:
        gpus.extend(range(start, min(stop, start + count - len(gpus))))
        if len(gpus) >= count:
            break
    gpus.extend([None] * (count - len(gpus)))
    return tuple(gpus)


def _below(group: Iterable[int], bound: int) -> list[int]:
    """The ranks of an ascending group below ``bound``, reading no further."""
    return list(takewhile(bound.__gt__, group))


def engine_groups(plan: Mapping[str, Any]) -> list[EngineGroups]:
    """Every active training engine of the plan with its drawn rank groups."""
    out: list[EngineGroups] = []
    for engine in plan["engines"]:
        if not engine.get("active"):
            continue
        try:
            allocation = ModelAllocation.from_str(engine["backend"])
        except AllocationError:  # the plan was built from it: only a hand-made dict fails
            continue
        if allocation.is_inference:
            continue
        parallel = allocation.parallel
        drawn = min(parallel.world_size, MAX_DRAWN_RANKS)
        gpus = _gpus_of(plan, engine, drawn)
        hybrid = parallel.ep_size > 1 or parallel.etp_size > 1
        split = engine.get("pipeline_split")
        try:
            # the first DRAWN groups of each kind (explain --json --groups DRAWN's): every
            # group that holds a drawn rank starts below DRAWN; each is read lazily, up to
            # the drawn ranks only, so a group of a million ranks costs its drawn part
            summaries = summarize_rank_groups(allocation, DEFAULT_ORDER, limit=drawn)
        except AllocationError as error:
            out.append(
                EngineGroups(
                    engine["key"],
                    allocation.spec,
                    parallel.world_size,
                    gpus,
                    {},
                    hybrid,
                    error.message,
                    split,
                )
            )
            continue
        kinds: dict[str, dict[str, Any]] = {}
        for summary in summaries:
            if summary.name not in KINDS or summary.size == 1:
                continue
            cut = [_below(g, drawn) for g in summary.first]
            kinds[summary.name] = {
                "size": summary.size,
                "count": summary.count,
                "omitted": summary.omitted,
                "part": "ffn" if summary.name in _EXPERT_KINDS else "attn",
                "groups": [g for g in cut if g],
                # every group listed and every rank drawn: explain --json's lists, unchanged
                "complete": not summary.omitted and parallel.world_size <= drawn,
            }
        out.append(
            EngineGroups(
                engine["key"],
                allocation.spec,
                parallel.world_size,
                gpus,
                kinds,
                hybrid,
                pipeline_split=split,
            )
        )
    return out
